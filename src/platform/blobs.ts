// The blob store port: named byte strings with a content type (artifacts, CDN files, screenshots,
// run logs). The embedded default keeps them under a local directory; in a cluster an S3 (or any
// object store) adapter implements the same three calls with the key as the object key and the
// content type as the object's Content-Type, so callers never see which one they have.
//
// Keys are `/`-separated segments of [A-Za-z0-9._-] that start with a letter or digit (so `.`,
// `..` and hidden names cannot occur), at most 512 characters: the same string is a safe relative
// file path here and a safe object key there.
import { randomBytes } from 'node:crypto'
import { mkdir, open, readFile, rename, rm, unlink } from 'node:fs/promises'
import path from 'node:path'

export interface StoredBlob {
  readonly data: Buffer
  readonly contentType: string
  readonly bytes: number
}

export interface BlobStore {
  /** Stores `data` under `key`, replacing any previous blob atomically (readers see old or new, never half). */
  put(key: string, data: Buffer, contentType: string): Promise<{ key: string; bytes: number }>
  /** The blob, or undefined when there is none. */
  get(key: string): Promise<StoredBlob | undefined>
  /** Removes the blob; removing a missing key is not an error. */
  delete(key: string): Promise<void>
}

export const MAX_BLOB_KEY_LENGTH = 512
const SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/
const CONTENT_TYPE = /^[\x21-\x7e][\x20-\x7e]{0,254}$/

/** Throws a RangeError naming the problem unless `key` is a valid blob key (see header). */
export function assertBlobKey(key: string): void {
  if (typeof key !== 'string' || key.length === 0 || key.length > MAX_BLOB_KEY_LENGTH) {
    throw new RangeError(`blob key must be 1 to ${MAX_BLOB_KEY_LENGTH} characters`)
  }
  for (const segment of key.split('/')) {
    if (!SEGMENT.test(segment)) {
      throw new RangeError(`blob key ${JSON.stringify(key)} has an invalid segment ${JSON.stringify(segment)} (use [A-Za-z0-9._-], starting with a letter or digit)`)
    }
  }
}

export function isBlobKey(key: string): boolean {
  try {
    assertBlobKey(key)
    return true
  } catch {
    return false
  }
}

function assertContentType(contentType: string): void {
  if (typeof contentType !== 'string' || !CONTENT_TYPE.test(contentType)) {
    throw new RangeError('content type must be 1 to 255 printable ASCII characters')
  }
}

// File layout: key `a/b/c` is the file `<dir>/a.d/b.d/c.blob`, holding one header line
// `agw-blob 1 <content type>\n` and then the bytes, so data and content type change together with
// one rename. Directories end in `.d`, blobs in `.blob` and temp files in `.tmp`, so no key can
// collide with another key's directory or an in-flight write (key `a` and key `a/b` coexist).
const MAGIC = 'agw-blob 1 '

export class LocalBlobStore implements BlobStore {
  readonly dir: string

  constructor(dir: string) {
    this.dir = path.resolve(dir)
  }

  private fileOf(key: string): string {
    assertBlobKey(key)
    const segments = key.split('/')
    const last = segments.pop()!
    const file = path.join(this.dir, ...segments.map((s) => `${s}.d`), `${last}.blob`)
    // Belt and braces: the key grammar already rules out leaving the directory.
    if (!file.startsWith(this.dir + path.sep)) throw new RangeError(`blob key ${JSON.stringify(key)} leaves the store`)
    return file
  }

  async put(key: string, data: Buffer, contentType: string): Promise<{ key: string; bytes: number }> {
    const file = this.fileOf(key)
    assertContentType(contentType)
    await mkdir(path.dirname(file), { recursive: true })
    const temp = `${file}.${randomBytes(6).toString('hex')}.tmp`
    const handle = await open(temp, 'wx', 0o644)
    try {
      await handle.writeFile(Buffer.concat([Buffer.from(`${MAGIC}${contentType}\n`, 'latin1'), data]))
      await handle.sync() // the rename must not expose a file whose bytes are still in flight
    } catch (err) {
      await handle.close()
      await rm(temp, { force: true })
      throw err
    }
    await handle.close()
    try {
      await rename(temp, file)
    } catch (err) {
      await rm(temp, { force: true })
      throw err
    }
    return { key, bytes: data.length }
  }

  async get(key: string): Promise<StoredBlob | undefined> {
    const file = this.fileOf(key)
    let raw: Buffer
    try {
      raw = await readFile(file)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined
      throw err
    }
    const newline = raw.indexOf(0x0a)
    const header = newline < 0 ? '' : raw.subarray(0, newline).toString('latin1')
    if (!header.startsWith(MAGIC)) throw new Error(`blob ${key} is corrupt (no header)`)
    const data = raw.subarray(newline + 1)
    return { data, contentType: header.slice(MAGIC.length), bytes: data.length }
  }

  async delete(key: string): Promise<void> {
    const file = this.fileOf(key)
    try {
      await unlink(file)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err
    }
  }
}

/** The embedded default: blobs under `dir` (DATA_DIR/blobs). */
export function createLocalBlobStore(dir: string): BlobStore {
  return new LocalBlobStore(dir)
}
