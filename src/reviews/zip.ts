// Reads an uploaded site (a base64 zip) in memory, never on disk. Everything that only needs the
// central directory (names, symlinks, encryption, declared sizes, the entry file) is checked before
// any byte is inflated; while inflating, bytes are counted as they flow and the stream is cut as
// soon as a cap is passed. Hostile input ends in an AppError, never in a crash.
import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import yauzl from 'yauzl'
import { AppError } from '../platform/errors.ts'
import { contentTypeOf } from './content-types.ts'
import {
  SITE_PATH_MAX_BYTES,
  ZIP_MAX_BASE64_CHARS,
  ZIP_MAX_BYTES,
  ZIP_MAX_ENTRIES,
  ZIP_MAX_ENTRY_BYTES,
  ZIP_MAX_RATIO,
  ZIP_MAX_TOTAL_BYTES,
  ZIP_RATIO_FLOOR_BYTES,
} from './limits.ts'
import { type ReadSite, SITE_RESERVED_PREFIX, type SiteFileData, type ZipRejection } from './types.ts'

const PAYLOAD_TOO_LARGE: ReadonlySet<ZipRejection> = new Set(['too_large', 'entry_count', 'entry_too_large', 'total_too_large', 'ratio'])
const LOCAL_FILE_HEADER = Buffer.from('PK\x03\x04', 'latin1')
/** An archive without entries is only its end-of-central-directory record. */
const END_OF_CENTRAL_DIRECTORY = Buffer.from('PK\x05\x06', 'latin1')
const RESERVED_FOLDER = SITE_RESERVED_PREFIX.slice(1).toLowerCase()
const ENTRY_NAME_MAX_CHARS = 200
const S_IFMT = 0o170000
const S_IFLNK = 0o120000

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it escapes
const UNPRINTABLE = /[\u0000-\u001f\u007f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g

/** A file entry that passed the central-directory checks, in central-directory order. */
interface ListedFile {
  entry: yauzl.Entry
  /** NFC name as in the archive (top folder not yet stripped). */
  name: string
}

/**
 * The files of a site zip, top folder stripped, with their types and hashes; `entryFile` is looked
 * up after the same normalisation (with or without the top folder). Refusals are AppErrors
 * `zip_rejected` (400) or `zip_too_large` (413) with `reason` (a ZipRejection) and, when one entry
 * is to blame, `entry` (its name, at most 200 characters, control characters escaped).
 */
export async function readSiteZip(zipBase64: string, entryFile: string): Promise<ReadSite> {
  const zip = decodeZip(zipBase64)
  let zipfile: yauzl.ZipFile
  try {
    zipfile = await yauzl.fromBufferPromise(zip, { lazyEntries: true, validateEntrySizes: true, decodeStrings: true, strictFileNames: true })
  } catch (error) {
    throw refuse('not_zip', `zipData has no readable central directory (${messageOf(error)})`)
  }
  // A late error from the reader must never go unheard (an 'error' event without a listener throws).
  zipfile.on('error', () => {})
  try {
    const listed = await listFiles(zipfile)
    const { top, entryPath } = layOut(listed, entryFile)
    const files: SiteFileData[] = []
    const inflated = { bytes: 0 }
    for (const file of listed) {
      const { data, sha256 } = await inflate(zipfile, file, inflated)
      const path = file.name.slice(top.length)
      files.push({ path, data, contentType: contentTypeOf(path).contentType, sha256 })
    }
    return { files, entryFile: entryPath, totalBytes: inflated.bytes, zip }
  } finally {
    zipfile.close()
  }
}

function decodeZip(zipBase64: string): Buffer {
  if (typeof zipBase64 !== 'string') throw refuse('base64', 'zipData is not a string')
  if (zipBase64.length > ZIP_MAX_BASE64_CHARS) throw refuse('too_large', `zipData is longer than ${ZIP_MAX_BASE64_CHARS} base64 characters (${ZIP_MAX_BYTES} bytes decoded)`)
  const zip = Buffer.from(zipBase64, 'base64')
  // Buffer.from skips characters outside the alphabet and accepts base64url, so only text that
  // encodes back to itself is strict base64 (one native pass; a regex takes 5x longer on 14 MB).
  // This also refuses non-zero pad bits, which RFC 4648 §3.5 lets a decoder do.
  if (zip.toString('base64') !== zipBase64) {
    throw refuse('base64', 'zipData is not strict base64 (the + and / alphabet of RFC 4648 §4, padded with = to a multiple of 4 characters, no line breaks)')
  }
  if (zip.length > ZIP_MAX_BYTES) throw refuse('too_large', `zipData decodes to ${zip.length} bytes; at most ${ZIP_MAX_BYTES} are accepted`)
  const magic = zip.subarray(0, 4)
  if (magic.equals(END_OF_CENTRAL_DIRECTORY)) throw refuse('empty', 'the zip has no entries')
  if (!magic.equals(LOCAL_FILE_HEADER)) throw refuse('not_zip', 'zipData is not a zip archive (it does not start with a local file header, PK\\x03\\x04)')
  return zip
}

/** Reads the central directory, refusing before any inflating whatever its records give away. */
async function listFiles(zipfile: yauzl.ZipFile): Promise<ListedFile[]> {
  if (zipfile.entryCount > ZIP_MAX_ENTRIES) {
    throw refuse('entry_count', `the zip has ${zipfile.entryCount} entries; at most ${ZIP_MAX_ENTRIES} are accepted`)
  }
  const listed: ListedFile[] = []
  const nameByFolded = new Map<string, string>()
  let declaredTotal = 0
  const entries = zipfile.eachEntry()
  try {
    for (;;) {
      let next: IteratorResult<yauzl.Entry>
      try {
        next = await entries.next()
      } catch (error) {
        throw fromYauzl(error, undefined)
      }
      if (next.done) break
      const entry = next.value
      const isFolder = entry.fileName.endsWith('/')
      const name = entry.fileName.normalize('NFC')
      checkName(isFolder ? name.slice(0, -1) : name)
      if (isFolder || name.startsWith('__MACOSX/') || name === '.DS_Store' || name.endsWith('/.DS_Store')) continue
      if (((entry.externalFileAttributes >>> 16) & S_IFMT) === S_IFLNK) throw refuse('symlink', `"${printable(name)}" is a symbolic link`, name)
      if (entry.isEncrypted()) throw refuse('encrypted', `"${printable(name)}" is encrypted`, name)
      // Case-folded too: paths differing only in case are one file where sites are made (macOS, Windows).
      const folded = name.toLowerCase()
      const earlier = nameByFolded.get(folded)
      if (earlier !== undefined) {
        throw refuse('duplicate_path', `"${printable(name)}" collides with "${printable(earlier)}" (the same path after NFC normalisation, or differing only in case)`, name)
      }
      nameByFolded.set(folded, name)
      declaredTotal += entry.uncompressedSize
      const overCap = capPassed(name, entry.uncompressedSize, declaredTotal, entry.compressedSize)
      if (overCap) throw overCap
      listed.push({ entry, name })
    }
  } finally {
    // Stops listening (a refusal leaves the loop early).
    await entries.return?.()
  }
  return listed
}

/** yauzl itself refuses absolute paths, drive letters, `..` segments and backslashes. */
function checkName(name: string): void {
  const unsafe = (why: string) => refuse('unsafe_path', `"${printable(name)}" is not a safe relative path: ${why}`, name)
  if (!name.isWellFormed()) throw unsafe('it has an unpaired UTF-16 surrogate')
  if (CONTROL_CHARACTER.test(name)) throw unsafe('it has a control character')
  for (const segment of name.split('/')) {
    if (segment === '') throw unsafe('it has an empty segment')
    if (segment === '.' || segment === '..') throw unsafe(`it has a "${segment}" segment`)
  }
}

/** Strips the single top folder all files share (if any), then checks the paths' length and prefix and finds the entry file. */
function layOut(listed: readonly ListedFile[], entryFile: string): { top: string; entryPath: string } {
  if (listed.length === 0) throw refuse('empty', 'the zip has no files (folders, __MACOSX/ and .DS_Store are left out)')
  const top = topFolder(listed.map((file) => file.name))
  const paths = new Set<string>()
  for (const { name } of listed) {
    const path = name.slice(top.length)
    if (Buffer.byteLength(path) > SITE_PATH_MAX_BYTES) {
      throw refuse('unsafe_path', `"${printable(name)}" is not a safe relative path: it is longer than ${SITE_PATH_MAX_BYTES} UTF-8 bytes`, name)
    }
    if (path.toLowerCase().startsWith(RESERVED_FOLDER)) {
      throw refuse('reserved_path', `"${printable(name)}" is under ${RESERVED_FOLDER}, which the review origin keeps for its own files`, name)
    }
    paths.add(path)
  }
  const wanted = entryFile.normalize('NFC')
  const entryPath = paths.has(wanted) ? wanted : top !== '' && wanted.startsWith(top) && paths.has(wanted.slice(top.length)) ? wanted.slice(top.length) : undefined
  if (entryPath === undefined) {
    throw refuse('entry_file_missing', `entryFile "${printable(entryFile)}" is not among the zip's files`, entryFile)
  }
  return { top, entryPath }
}

/** `site/` when every name is under that one folder, else ''. */
function topFolder(names: readonly string[]): string {
  const first = names[0] ?? ''
  const slash = first.indexOf('/')
  if (slash < 0) return ''
  const top = first.slice(0, slash + 1)
  return names.every((name) => name.startsWith(top)) ? top : ''
}

/** Inflates one file, counting bytes as they flow and cutting the stream as soon as a cap is passed. */
async function inflate(zipfile: yauzl.ZipFile, file: ListedFile, inflated: { bytes: number }): Promise<{ data: Buffer; sha256: string }> {
  let stream: Readable
  try {
    stream = await zipfile.openReadStreamPromise(file.entry)
  } catch (error) {
    throw fromYauzl(error, file.name)
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    const hash = createHash('sha256')
    let bytes = 0
    let settled = false
    const fail = (error: AppError): void => {
      if (settled) return
      settled = true
      stream.destroy()
      reject(error)
    }
    // Stays attached after settling: yauzl's inner streams may still report once cut.
    stream.on('error', (error) => fail(fromYauzl(error, file.name)))
    stream.on('data', (chunk: Buffer) => {
      if (settled) return
      bytes += chunk.length
      inflated.bytes += chunk.length
      const overCap = capPassed(file.name, bytes, inflated.bytes, file.entry.compressedSize)
      if (overCap) return fail(overCap)
      hash.update(chunk)
      chunks.push(chunk)
    })
    stream.on('end', () => {
      if (settled) return
      settled = true
      resolve({ data: Buffer.concat(chunks, bytes), sha256: hash.digest('hex') })
    })
  })
}

/** The refusal when an entry of `entryBytes` (total so far `totalBytes`) passes a cap; the same rules for declared and inflated sizes. */
function capPassed(name: string, entryBytes: number, totalBytes: number, compressedBytes: number): AppError | undefined {
  const quoted = `"${printable(name)}"`
  // The ratio comes first: a bomb passes it long before the size caps.
  if (entryBytes > ZIP_RATIO_FLOOR_BYTES && entryBytes > compressedBytes * ZIP_MAX_RATIO) {
    return refuse('ratio', `${quoted} inflates to more than ${ZIP_MAX_RATIO} times its ${compressedBytes} compressed bytes`, name)
  }
  if (entryBytes > ZIP_MAX_ENTRY_BYTES) return refuse('entry_too_large', `${quoted} inflates past ${ZIP_MAX_ENTRY_BYTES} bytes`, name)
  if (totalBytes > ZIP_MAX_TOTAL_BYTES) return refuse('total_too_large', `the files inflate past ${ZIP_MAX_TOTAL_BYTES} bytes in all (at ${quoted})`, name)
  return undefined
}

/** Maps an error of yauzl or zlib (found by its message: yauzl has no error codes). */
function fromYauzl(error: unknown, name: string | undefined): AppError {
  const message = messageOf(error)
  const unsafeName = /^(?:invalid characters in fileName|absolute path|invalid relative path): (.*)$/s.exec(message)
  if (unsafeName) {
    const entry = unsafeName[1] ?? ''
    return refuse('unsafe_path', `"${printable(entry)}" is not a safe relative path: it is absolute, has a ".." segment or a backslash`, entry)
  }
  const quoted = name === undefined ? undefined : `"${printable(name)}"`
  if (/size mismatch|bytes in the stream/.test(message)) {
    return refuse('size_mismatch', `${quoted ?? 'an entry'} inflates to other than its declared size (${printable(message)})`, name)
  }
  if (/encrypt/i.test(message)) return refuse('encrypted', `${quoted ?? 'an entry'} is encrypted (${printable(message)})`, name)
  return refuse('corrupt', `${quoted ?? "the zip's central directory"} could not be read (${printable(message)})`, name)
}

function refuse(reason: ZipRejection, detail: string, entry?: string): AppError {
  return new AppError(PAYLOAD_TOO_LARGE.has(reason) ? 'zip_too_large' : 'zip_rejected', detail, {
    field: reason === 'entry_file_missing' ? 'body.entryFile' : 'body.zipData',
    extensions: entry === undefined ? { reason } : { reason, entry: printable(entry) },
  })
}

/** A name fit for a JSON answer and a log line: control characters and unpaired surrogates escaped, at most 200 characters. */
function printable(name: string): string {
  const escaped = name.replace(UNPRINTABLE, (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`)
  if (escaped.length <= ENTRY_NAME_MAX_CHARS) return escaped
  // Never cut between the halves of a surrogate pair.
  const end = /[\ud800-\udbff]/.test(escaped[ENTRY_NAME_MAX_CHARS - 2] ?? '') ? ENTRY_NAME_MAX_CHARS - 2 : ENTRY_NAME_MAX_CHARS - 1
  return `${escaped.slice(0, end)}…`
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
