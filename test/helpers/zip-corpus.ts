// Site zips for the review tests: a good site and an attack corpus, each attack with the refusal it
// must get. yazl writes the archives; what yazl refuses to write (`..`, absolute and backslash names,
// lying sizes, encryption flags, overlapping entries) is patched into its bytes afterwards. Everything
// is built once, when this module is first imported (about half a second), and cached.
import yazl from 'yazl'
import { ZIP_MAX_BYTES, ZIP_MAX_ENTRIES, ZIP_MAX_ENTRY_BYTES, ZIP_MAX_TOTAL_BYTES } from '../../src/reviews/limits.ts'
import type { ZipRejection } from '../../src/reviews/types.ts'

export interface ZipEntrySpec {
  name: string
  data?: Buffer | string
  /** Stored as is (compression method 0) instead of deflated. */
  store?: boolean
  /** Deflate level (default 6). */
  level?: number
  /** Unix mode, e.g. 0o120777 for a symlink. */
  mode?: number
  /** A folder entry (`name/`). */
  folder?: boolean
}

export interface ZipAttack {
  name: string
  zipBase64: string
  /** Sent as entryFile when set (else the default, index.html). */
  entryFile?: string
  status: 400 | 413
  reason: ZipRejection
  /** The `entry` the refusal names, when it names one. */
  entry?: string
}

const MTIME = new Date(Date.UTC(2024, 0, 1))
const TOO_LARGE: ReadonlySet<ZipRejection> = new Set(['too_large', 'entry_count', 'entry_too_large', 'total_too_large', 'ratio'])
const MIB = 1024 * 1024

/** Writes a zip with yazl (fixed timestamps, so the same specs give the same bytes). */
export async function buildZip(entries: readonly ZipEntrySpec[]): Promise<Buffer> {
  const zip = new yazl.ZipFile()
  for (const entry of entries) {
    if (entry.folder) {
      zip.addEmptyDirectory(entry.name, { mtime: MTIME, forceDosTimestamp: true })
      continue
    }
    const data = typeof entry.data === 'string' ? Buffer.from(entry.data) : (entry.data ?? Buffer.from(`contents of ${entry.name}\n`))
    zip.addBuffer(data, entry.name, {
      mtime: MTIME,
      forceDosTimestamp: true,
      compressionLevel: entry.store ? 0 : (entry.level ?? 6),
      ...(entry.mode === undefined ? {} : { mode: entry.mode }),
    })
  }
  zip.end()
  const chunks: Buffer[] = []
  for await (const chunk of zip.outputStream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

// --- byte patching (offsets from APPNOTE 4.3.7 local header, 4.3.12 central record, 4.3.16 end record)

interface EntryRecord {
  /** Offset of the central directory record. */
  central: number
  /** Offset of the local file header. */
  local: number
  /** Offset of the file data. */
  data: number
  compressedSize: number
}

function recordsOf(zip: Buffer): EntryRecord[] {
  const end = zip.length - 22
  if (zip.readUInt32LE(end) !== 0x06054b50) throw new Error('no end of central directory record at the end (a comment or zip64?)')
  const records: EntryRecord[] = []
  let at = zip.readUInt32LE(end + 16)
  for (let i = 0; i < zip.readUInt16LE(end + 10); i++) {
    const local = zip.readUInt32LE(at + 42)
    records.push({
      central: at,
      local,
      data: local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28),
      compressedSize: zip.readUInt32LE(at + 20),
    })
    at += 46 + zip.readUInt16LE(at + 28) + zip.readUInt16LE(at + 30) + zip.readUInt16LE(at + 32)
  }
  return records
}

function recordAt(zip: Buffer, index: number): EntryRecord {
  const record = recordsOf(zip)[index]
  if (record === undefined) throw new Error(`no entry ${index}`)
  return record
}

/** Gives entry `index` a name of the same byte length as the one it was written with (yazl refuses hostile names). */
export function renamed(zip: Buffer, index: number, name: string | Buffer): Buffer {
  const out = Buffer.from(zip)
  const record = recordAt(out, index)
  const bytes = Buffer.from(name)
  if (out.readUInt16LE(record.central + 28) !== bytes.length) throw new Error(`the name ${JSON.stringify(name.toString())} has another length than entry ${index}'s`)
  bytes.copy(out, record.local + 30)
  bytes.copy(out, record.central + 46)
  return out
}

/** A name yazl accepts with the UTF-8 length of `name`, to be renamed() later. */
function placeholder(name: string, index: number): string {
  return `${index}`.padEnd(Buffer.byteLength(name), 'x')
}

function withFlags(zip: Buffer, index: number, bits: number): Buffer {
  const out = Buffer.from(zip)
  const record = recordAt(out, index)
  out.writeUInt16LE(out.readUInt16LE(record.local + 6) | bits, record.local + 6)
  out.writeUInt16LE(out.readUInt16LE(record.central + 8) | bits, record.central + 8)
  return out
}

function withUncompressedSize(zip: Buffer, index: number, size: number): Buffer {
  const out = Buffer.from(zip)
  const record = recordAt(out, index)
  out.writeUInt32LE(size, record.local + 22)
  out.writeUInt32LE(size, record.central + 24)
  return out
}

function withMethod(zip: Buffer, index: number, method: number): Buffer {
  const out = Buffer.from(zip)
  const record = recordAt(out, index)
  out.writeUInt16LE(method, record.local + 8)
  out.writeUInt16LE(method, record.central + 10)
  return out
}

function patched(zip: Buffer, at: (records: EntryRecord[]) => number, bytes: Buffer): Buffer {
  const out = Buffer.from(zip)
  bytes.copy(out, at(recordsOf(out)))
  return out
}

/** Adds `copies` central records that point at entry 0's data under names `1…`, `2…` of the same length (Fifield's overlap). */
function overlapping(zip: Buffer, copies: number): Buffer {
  const first = recordAt(zip, 0)
  const end = zip.length - 22
  const centralEnd = zip.readUInt32LE(end + 16) + zip.readUInt32LE(end + 12)
  const recordLength = 46 + zip.readUInt16LE(first.central + 28) + zip.readUInt16LE(first.central + 30) + zip.readUInt16LE(first.central + 32)
  const added = Array.from({ length: copies }, (_, i) => {
    const copy = Buffer.from(zip.subarray(first.central, first.central + recordLength))
    copy.write(`${i + 1}`, 46, 'latin1')
    return copy
  })
  const tail = Buffer.from(zip.subarray(end))
  tail.writeUInt16LE(tail.readUInt16LE(8) + copies, 8)
  tail.writeUInt16LE(tail.readUInt16LE(10) + copies, 10)
  tail.writeUInt32LE(tail.readUInt32LE(12) + copies * recordLength, 12)
  return Buffer.concat([zip.subarray(0, centralEnd), ...added, tail])
}

/** Zeros with one pseudo-random byte every 512: deflates about 110:1 at level 1, under ZIP_MAX_RATIO. */
function compressible(bytes: number): Buffer {
  const data = Buffer.alloc(bytes)
  let state = 0x2545f491
  for (let i = 0; i < bytes; i += 512) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    data[i] = state >>> 24
  }
  return data
}

// --- the good site

/** 1×1 transparent PNG. */
const PIXEL_PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64')

/** What goodSiteZip() reads back as: paths (top folder stripped) and bytes, in archive order. */
export const GOOD_SITE_FILES: ReadonlyArray<{ path: string; data: Buffer }> = [
  {
    path: 'index.html',
    data: Buffer.from(
      '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Review me</title>\n<link rel="stylesheet" href="css/site.css">\n</head>\n<body>\n<h1 id="title">Hello, reviewer</h1>\n<img src="img/logo.png" alt="logo">\n<button id="buy">Buy</button>\n<script src="js/app.js"></script>\n</body>\n</html>\n',
    ),
  },
  { path: 'css/site.css', data: Buffer.from('body { font-family: system-ui, sans-serif; margin: 2rem; }\nh1 { color: #234; }\n') },
  { path: 'js/app.js', data: Buffer.from("document.getElementById('buy').addEventListener('click', () => { document.title = 'clicked' })\n") },
  { path: 'img/logo.png', data: PIXEL_PNG },
]

/** The good site as a macOS Finder zip makes it: under `site/`, with folder entries, `__MACOSX/` and `.DS_Store` (all left out when read). */
function goodSiteSpecs(): ZipEntrySpec[] {
  return [
    { name: 'site/', folder: true },
    { name: 'site/index.html', data: GOOD_SITE_FILES[0]!.data },
    { name: 'site/.DS_Store', data: Buffer.alloc(64, 1) },
    { name: 'site/css/', folder: true },
    { name: 'site/css/site.css', data: GOOD_SITE_FILES[1]!.data },
    { name: 'site/js/app.js', data: GOOD_SITE_FILES[2]!.data },
    { name: 'site/img/logo.png', data: PIXEL_PNG, store: true },
    { name: '__MACOSX/site/._index.html', data: Buffer.alloc(32, 2) },
  ]
}

// --- the attacks

interface Built {
  good: Buffer
  attacks: ZipAttack[]
}

async function buildCorpus(): Promise<Built> {
  const good = await buildZip(goodSiteSpecs())
  const goodBase64 = good.toString('base64')
  const index = { name: 'index.html', data: GOOD_SITE_FILES[0]!.data }
  const attacks: ZipAttack[] = []
  const add = (name: string, zip: Buffer | string, reason: ZipRejection, more: { entryFile?: string; entry?: string } = {}): void => {
    attacks.push({ name, zipBase64: typeof zip === 'string' ? zip : zip.toString('base64'), status: TOO_LARGE.has(reason) ? 413 : 400, reason, ...more })
  }
  /** index.html plus one file written under a placeholder and renamed to `hostile`. */
  const withHostileName = async (hostile: string): Promise<Buffer> => renamed(await buildZip([index, { name: placeholder(hostile, 1) }]), 1, hostile)

  // base64
  const url = goodBase64.replaceAll('+', '-').replaceAll('/', '_')
  if (url === goodBase64) throw new Error('the good zip has no + or / in base64')
  add('base64url alphabet', url, 'base64')
  add('line breaks every 76 characters', goodBase64.replace(/.{76}/g, '$&\n'), 'base64')
  add('junk character', `${goodBase64.slice(0, 40)}*${goodBase64.slice(41)}`, 'base64')
  add('length not a multiple of 4', goodBase64.slice(0, -1), 'base64')
  add('leading space', ` ${goodBase64}`, 'base64')

  // size and magic
  const oversized = Buffer.alloc(ZIP_MAX_BYTES + 1)
  good.copy(oversized)
  add('10 MiB + 1 byte decoded', oversized, 'too_large')
  add('plain text', Buffer.from('this is not a zip archive\n'), 'not_zip')
  add('empty string', '', 'not_zip')
  add('a PNG', PIXEL_PNG, 'not_zip')
  add('truncated zip (no central directory)', good.subarray(0, good.length >> 1), 'not_zip')
  add('empty archive', await buildZip([]), 'empty')
  add('only folders and macOS metadata', await buildZip([{ name: 'site/', folder: true }, { name: 'site/.DS_Store' }, { name: '__MACOSX/site/._x.html' }]), 'empty')

  // counts, sizes, bombs
  add(`${ZIP_MAX_ENTRIES + 1} entries`, await buildZip(Array.from({ length: ZIP_MAX_ENTRIES + 1 }, (_, i) => ({ name: `f${i}.txt`, data: '', store: true }))), 'entry_count')
  add('ratio bomb: 50 MiB of zeros', await buildZip([index, { name: 'zeros.bin', data: Buffer.alloc(50 * MIB) }]), 'ratio', { entry: 'zeros.bin' })
  const bigEntry = ZIP_MAX_ENTRY_BYTES + MIB
  add('one entry past the entry cap (ratio under the cap)', await buildZip([index, { name: 'big.bin', data: compressible(bigEntry), level: 1 }]), 'entry_too_large', {
    entry: 'big.bin',
  })
  // Five names for the same 21 MiB of data: 105 MiB in all from a 200 kB zip.
  const shared = await buildZip([{ name: '0.bin', data: compressible(Math.floor(ZIP_MAX_TOTAL_BYTES / 5) + MIB), level: 1 }, index])
  add('overlapping entries past the total cap', overlapping(shared, 4), 'total_too_large', { entry: '4.bin' })
  const text = { name: 'notes.txt', data: 'all work and no play makes a dull review\n'.repeat(200) }
  const declared = Buffer.byteLength(text.data)
  add('declared size smaller than the data', withUncompressedSize(await buildZip([index, text]), 1, declared >> 1), 'size_mismatch', { entry: 'notes.txt' })
  add('declared size larger than the data', withUncompressedSize(await buildZip([index, text]), 1, declared * 2), 'size_mismatch', { entry: 'notes.txt' })
  add('stored entry with a lying size', withUncompressedSize(await buildZip([index, { ...text, store: true }]), 1, declared + 1), 'size_mismatch')

  // names
  // [case, name, the name as the refusal shows it (control characters escaped)]
  for (const [name, hostile, shown] of [
    ['zip-slip', '../evil.html', '../evil.html'],
    ['zip-slip inside a folder', 'site/../../evil.html', 'site/../../evil.html'],
    ['absolute path', '/etc/evil.html', '/etc/evil.html'],
    ['drive letter', 'C:/evil.html', 'C:/evil.html'],
    ['drive-relative path', 'C:evil.html', 'C:evil.html'],
    ['backslash traversal', '..\\evil.html', '..\\evil.html'],
    ['backslash separator', 'css\\site.css', 'css\\site.css'],
    ['NUL in a name', 'evil\u0000.html', 'evil\\u0000.html'],
    ['control character in a name', 'evil\u0001.html', 'evil\\u0001.html'],
    ['line break in a name', 'evil\n.html', 'evil\\u000a.html'],
    ['DEL in a name', 'evil\u007f.html', 'evil\\u007f.html'],
    ['empty segment', 'css//site.css', 'css//site.css'],
    ['dot segment', './evil.html', './evil.html'],
    ['dot segment inside', 'css/./site.css', 'css/./site.css'],
  ] as const) {
    add(name, await withHostileName(hostile), 'unsafe_path', { entry: shown })
  }
  add('path longer than 1024 bytes', await buildZip([index, { name: `${'x'.repeat(1020)}.html` }]), 'unsafe_path')
  add('symlink', await buildZip([index, { name: 'passwd.html', data: '/etc/passwd', mode: 0o120777 }]), 'symlink', { entry: 'passwd.html' })
  add('encrypted entry', withFlags(await buildZip([index, text]), 1, 0x1), 'encrypted', { entry: 'notes.txt' })
  add('strong encryption', withFlags(await buildZip([index, text]), 1, 0x41), 'encrypted')
  add('names differing in case', await buildZip([index, { name: 'a.html' }, { name: 'A.html' }]), 'duplicate_path', { entry: 'A.html' })
  add('NFC and NFD forms of one name', await buildZip([index, { name: 'caf\u00e9.html' }, { name: 'cafe\u0301.html' }]), 'duplicate_path', { entry: 'caf\u00e9.html' })
  add('the same name twice', await buildZip([index, index]), 'duplicate_path', { entry: 'index.html' })
  add('reserved prefix', await buildZip([index, { name: '__agent_gateway__/overlay.js' }]), 'reserved_path', { entry: '__agent_gateway__/overlay.js' })
  add('reserved prefix under the top folder', await buildZip([{ ...index, name: 'site/index.html' }, { name: 'site/__agent_gateway__/x.js' }]), 'reserved_path', {
    entry: 'site/__agent_gateway__/x.js',
  })
  add('reserved prefix in capitals', await buildZip([index, { name: '__AGENT_GATEWAY__/x.js' }]), 'reserved_path')
  add('entryFile missing', good, 'entry_file_missing', { entryFile: 'missing.html', entry: 'missing.html' })
  add('entryFile in another case', good, 'entry_file_missing', { entryFile: 'INDEX.HTML' })

  // damage
  const damaged = await buildZip([index, text])
  add(
    'garbled deflate data',
    patched(damaged, (records) => records[1]!.data, Buffer.alloc(8, 0xff)),
    'corrupt',
    { entry: 'notes.txt' },
  )
  add(
    'bad local header signature',
    patched(damaged, (records) => records[1]!.local, Buffer.from('XX')),
    'corrupt',
    { entry: 'notes.txt' },
  )
  add('unsupported compression method', withMethod(damaged, 1, 12), 'corrupt', { entry: 'notes.txt' })
  add(
    'central directory shorter than its count',
    patched(damaged, () => damaged.length - 22 + 10, Buffer.from([3, 0])),
    'corrupt',
  )
  return { good, attacks }
}

const built = await buildCorpus()

/** The good site (index.html, css/site.css, js/app.js, img/logo.png under `site/`, plus macOS leftovers); reads back as GOOD_SITE_FILES. */
export function goodSiteZip(): Buffer {
  return built.good
}

/** Every attack with the refusal it must get (field `body.entryFile` for entry_file_missing, else `body.zipData`). */
export function attackCorpus(): ZipAttack[] {
  return [...built.attacks]
}
