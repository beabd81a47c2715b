// The BlobStore port over S3 or any S3-compatible object store (MinIO, R2, Ceph, s3rver): the
// blob key is the object key (under an optional prefix) and the content type the object's
// Content-Type. A PutObject is atomic (readers see the old object or the new one), as the port asks.
//
// Credentials: the given access key pair, else the SDK's default chain (environment, web identity
// such as EKS IRSA, instance metadata). On AWS, grant s3:ListBucket as well as Get/Put/DeleteObject:
// without it a missing key reads as 403 AccessDenied rather than 404, and get() throws instead of
// answering undefined.
import { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client, type S3ClientConfig } from '@aws-sdk/client-s3'
import { assertBlobKey, assertByteRange, assertContentType, type BlobRange, type BlobStat, type BlobStore, type StoredBlob } from './blobs.ts'

export interface S3BlobStoreOptions {
  bucket: string
  /** Default us-east-1 (MinIO and s3rver accept any region). */
  region?: string | undefined
  /** Base URL of an S3-compatible server (MinIO, R2, s3rver); unset = AWS S3. */
  endpoint?: string | undefined
  /** Key prefix of every object, e.g. `agent-gateway/` (a trailing `/` is added when missing). */
  prefix?: string | undefined
  /** Path-style URLs (`endpoint/bucket/key`), which MinIO and s3rver need. */
  forcePathStyle?: boolean | undefined
  /** Static credentials; unset = the SDK's default chain. */
  credentials?: { accessKeyId: string; secretAccessKey: string } | undefined
}

const DEFAULT_CONTENT_TYPE = 'application/octet-stream'

/** `prefix` as stored: '' or segments of the key grammar ending in `/`. Throws a RangeError otherwise. */
export function normalizeS3Prefix(prefix: string | undefined): string {
  const trimmed = (prefix ?? '').replace(/^\/+/, '').replace(/\/+$/, '')
  if (trimmed === '') return ''
  assertBlobKey(trimmed)
  return `${trimmed}/`
}

interface SdkError {
  name?: string
  Code?: string
  $metadata?: { httpStatusCode?: number }
}

function status(err: unknown): number | undefined {
  return (err as SdkError | undefined)?.$metadata?.httpStatusCode
}

/** A missing key (never a missing bucket: that is a configuration error, thrown). HEAD answers carry no error code, so a 404 of HEAD counts as a missing key. */
function isMissing(err: unknown): boolean {
  const name = (err as SdkError | undefined)?.name
  return name === 'NoSuchKey' || (status(err) === 404 && name !== 'NoSuchBucket')
}

function isUnsatisfiable(err: unknown): boolean {
  return (err as SdkError | undefined)?.name === 'InvalidRange' || status(err) === 416
}

/** The body of a GetObject answer, read fully. */
async function bodyOf(body: { transformToByteArray(): Promise<Uint8Array> } | undefined): Promise<Buffer> {
  if (body === undefined) return Buffer.alloc(0)
  const bytes = await body.transformToByteArray()
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

export class S3BlobStore implements BlobStore {
  readonly bucket: string
  readonly prefix: string
  readonly client: S3Client

  constructor(options: S3BlobStoreOptions) {
    if (!options.bucket) throw new RangeError('S3BlobStore needs a bucket')
    this.bucket = options.bucket
    this.prefix = normalizeS3Prefix(options.prefix)
    const config: S3ClientConfig = {
      region: options.region || 'us-east-1',
      forcePathStyle: options.forcePathStyle === true,
    }
    if (options.endpoint) {
      config.endpoint = options.endpoint
      // The SDK's default CRC32 checksums (aws-chunked trailers) are refused by several
      // S3-compatible servers; S3-compatible endpoints get checksums only where an operation needs one.
      config.requestChecksumCalculation = 'WHEN_REQUIRED'
      config.responseChecksumValidation = 'WHEN_REQUIRED'
    }
    if (options.credentials) config.credentials = { accessKeyId: options.credentials.accessKeyId, secretAccessKey: options.credentials.secretAccessKey }
    this.client = new S3Client(config)
  }

  private objectKey(key: string): string {
    assertBlobKey(key)
    return this.prefix + key
  }

  async put(key: string, data: Buffer, contentType: string): Promise<{ key: string; bytes: number }> {
    const Key = this.objectKey(key)
    assertContentType(contentType)
    await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key, Body: data, ContentType: contentType, ContentLength: data.length }))
    return { key, bytes: data.length }
  }

  async get(key: string): Promise<StoredBlob | undefined> {
    const Key = this.objectKey(key)
    try {
      const answer = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key }))
      const data = await bodyOf(answer.Body)
      return { data, contentType: answer.ContentType || DEFAULT_CONTENT_TYPE, bytes: data.length }
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  async stat(key: string): Promise<BlobStat | undefined> {
    const Key = this.objectKey(key)
    try {
      const answer = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key }))
      return { contentType: answer.ContentType || DEFAULT_CONTENT_TYPE, bytes: answer.ContentLength ?? 0 }
    } catch (err) {
      if (isMissing(err)) return undefined
      throw err
    }
  }

  async getRange(key: string, start: number, endInclusive: number): Promise<BlobRange | undefined> {
    const Key = this.objectKey(key)
    assertByteRange(start, endInclusive)
    try {
      const answer = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key, Range: `bytes=${start}-${endInclusive}` }))
      const data = await bodyOf(answer.Body)
      const contentType = answer.ContentType || DEFAULT_CONTENT_TYPE
      const length = endInclusive - start + 1
      const range = /^bytes (\d+)-\d+\/(\d+)$/.exec(answer.ContentRange ?? '')
      // Cut to what was asked even when a server sends more (a whole object for Range ignored,
      // s3rver's `bytes=0-0`).
      if (range) return { data: data.subarray(start - Number(range[1]), start - Number(range[1]) + length), contentType, start, bytes: Number(range[2]) }
      return { data: data.subarray(start, start + length), contentType, start, bytes: data.length }
    } catch (err) {
      if (isMissing(err)) return undefined
      if (!isUnsatisfiable(err)) throw err
      // `start` is past the end (or the object is empty): the port answers an empty range.
      const stat = await this.stat(key)
      return stat === undefined ? undefined : { data: Buffer.alloc(0), contentType: stat.contentType, start, bytes: stat.bytes }
    }
  }

  async delete(key: string): Promise<void> {
    const Key = this.objectKey(key)
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key }))
    } catch (err) {
      // S3 answers 204 for a missing key; some compatible servers say 404.
      if (!isMissing(err)) throw err
    }
  }

  /** Closes the client's sockets (tests; a server keeps its store for its lifetime). */
  close(): void {
    this.client.destroy()
  }
}
