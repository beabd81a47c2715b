// The blob store port: named byte strings with a content type (artifacts, CDN files, screenshots,
// run logs). The embedded default keeps them under a local directory; in a cluster an S3 (or any
// object store) adapter (src/platform/blobs-s3.ts) implements the same calls with the key as the
// object key and the content type as the object's Content-Type, so callers never see which one
// they have. `stat` and `getRange` let hosting answer HEAD and Range requests without reading a
// whole file; both adapters implement them, so callers may rely on them after checking.
//
// Keys are `/`-separated segments of [A-Za-z0-9._-] that start with a letter or digit (so `.`,
// `..` and hidden names cannot occur), at most 512 characters: the same string is a safe relative
// file path here and a safe object key there.
import { randomBytes } from 'node:crypto'
import { mkdir, open, readFile, rename, rm, unlink, type FileHandle } from 'node:fs/promises'
import path from 'node:path'

export interface StoredBlob {
  readonly data: Buffer
  readonly contentType: string
  readonly bytes: number
}

export interface BlobStat {
  readonly contentType: string
  /** Size of the whole blob. */
  readonly bytes: number
}

/** Part of a blob: `data` is bytes `start` .. `start + data.length - 1` of a blob of `bytes` bytes. */
export interface BlobRange {
  readonly data: Buffer
  readonly contentType: string
  readonly start: number
  /** Size of the whole blob (the `/size` of a Content-Range). */
  readonly bytes: number
}

export interface BlobStore {
  /** Stores `data` under `key`, replacing any previous blob atomically (readers see old or new, never half). */
  put(key: string, data: Buffer, contentType: string): Promise<{ key: string; bytes: number }>
  /** The blob, or undefined when there is none. */
  get(key: string): Promise<StoredBlob | undefined>
  /** Removes the blob; removing a missing key is not an error. */
  delete(key: string): Promise<void>
  /** Content type and size without the bytes, or undefined when there is none. */
  stat?(key: string): Promise<BlobStat | undefined>
  /**
   * Bytes `start` to `endInclusive` (cut at the blob's end; empty when `start` is past it), or
   * undefined when there is no blob. Throws a RangeError unless 0 <= start <= endInclusive.
   */
  getRange?(key: string, start: number, endInclusive: number): Promise<BlobRange | undefined>
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

/** Throws a RangeError unless `contentType` can be stored (1 to 255 printable ASCII characters). */
export function assertContentType(contentType: string): void {
  if (typeof contentType !== 'string' || !CONTENT_TYPE.test(contentType)) {
    throw new RangeError('content type must be 1 to 255 printable ASCII characters')
  }
}

/** Throws a RangeError unless `start`..`endInclusive` is a byte range (non-negative safe integers, in order). */
export function assertByteRange(start: number, endInclusive: number): void {
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(endInclusive) || start < 0 || endInclusive < start) {
    throw new RangeError(`byte range ${start}-${endInclusive} is not 0 <= start <= end`)
  }
}

// File layout: key `a/b/c` is the file `<dir>/a.d/b.d/c.blob`, holding one header line
// `agw-blob 1 <content type>\n` and then the bytes, so data and content type change together with
// one rename. Directories end in `.d`, blobs in `.blob` and temp files in `.tmp`, so no key can
// collide with another key's directory or an in-flight write (key `a` and key `a/b` coexist).
const MAGIC = 'agw-blob 1 '
/** The longest header: MAGIC, a 255-character content type and the newline. */
const MAX_HEADER = MAGIC.length + 255 + 1

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

  async stat(key: string): Promise<BlobStat | undefined> {
    return this.withFile(key, async (_handle, header, size) => ({ contentType: header.contentType, bytes: size - header.length }))
  }

  async getRange(key: string, start: number, endInclusive: number): Promise<BlobRange | undefined> {
    assertByteRange(start, endInclusive)
    return this.withFile(key, async (handle, header, size) => {
      const bytes = size - header.length
      const length = start >= bytes ? 0 : Math.min(endInclusive, bytes - 1) - start + 1
      const data = Buffer.alloc(length)
      let read = 0
      while (read < length) {
        const { bytesRead } = await handle.read(data, read, length - read, header.length + start + read)
        if (bytesRead === 0) break
        read += bytesRead
      }
      return { data: data.subarray(0, read), contentType: header.contentType, start, bytes }
    })
  }

  /**
   * Opens the blob and reads its header only; `use` gets the handle, the header and the file size.
   * One open file for the whole call: a concurrent put renames a new file in, this one stays whole.
   */
  private async withFile<T>(key: string, use: (handle: FileHandle, header: { contentType: string; length: number }, size: number) => Promise<T>): Promise<T | undefined> {
    const file = this.fileOf(key)
    let handle: FileHandle
    try {
      handle = await open(file, 'r')
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT' || code === 'ENOTDIR') return undefined
      throw err
    }
    try {
      const { size } = await handle.stat()
      const head = Buffer.alloc(Math.min(MAX_HEADER, size))
      const { bytesRead } = await handle.read(head, 0, head.length, 0)
      const newline = head.subarray(0, bytesRead).indexOf(0x0a)
      const header = newline < 0 ? '' : head.subarray(0, newline).toString('latin1')
      if (!header.startsWith(MAGIC)) throw new Error(`blob ${key} is corrupt (no header)`)
      return await use(handle, { contentType: header.slice(MAGIC.length), length: newline + 1 }, size)
    } finally {
      await handle.close()
    }
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
