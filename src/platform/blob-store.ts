// The blob store of this process, chosen by configuration: the local directory (the embedded
// default, BLOB_DIR) or S3 (BLOB_STORE=s3), so every replica of a role sees the same blobs.
import type { BlobRange, BlobStat, BlobStore, StoredBlob } from './blobs.ts'
import { createLocalBlobStore } from './blobs.ts'
import type { S3BlobStoreOptions } from './blobs-s3.ts'
import type { Config } from './config.ts'

type S3Settings = Pick<Config, 's3Bucket' | 's3Endpoint' | 's3Region' | 's3Prefix' | 's3ForcePathStyle' | 's3AccessKeyId' | 's3SecretAccessKey'>

/** S3BlobStore options from the S3_* variables (loadConfig has checked them). */
export function s3BlobStoreOptions(config: S3Settings): S3BlobStoreOptions {
  if (!config.s3Bucket) throw new RangeError('S3_BUCKET is required when BLOB_STORE is s3')
  return {
    bucket: config.s3Bucket,
    region: config.s3Region,
    endpoint: config.s3Endpoint,
    prefix: config.s3Prefix,
    forcePathStyle: config.s3ForcePathStyle,
    credentials: config.s3AccessKeyId && config.s3SecretAccessKey ? { accessKeyId: config.s3AccessKeyId, secretAccessKey: config.s3SecretAccessKey } : undefined,
  }
}

export function openBlobStore(config: Pick<Config, 'blobStore' | 'blobDir'> & S3Settings): BlobStore {
  if (config.blobStore === 's3') return lazyS3BlobStore(s3BlobStoreOptions(config))
  return createLocalBlobStore(config.blobDir)
}

/**
 * An S3BlobStore whose module (and the AWS SDK behind it) is loaded on first use: processes on
 * the local store never pay for loading the SDK, and opening stays synchronous.
 */
function lazyS3BlobStore(options: S3BlobStoreOptions): BlobStore {
  let store: Promise<BlobStore> | undefined
  const open = () => (store ??= import('./blobs-s3.ts').then(({ S3BlobStore }) => new S3BlobStore(options)))
  return {
    put: async (key: string, data: Buffer, contentType: string) => (await open()).put(key, data, contentType),
    get: async (key: string): Promise<StoredBlob | undefined> => (await open()).get(key),
    delete: async (key: string) => (await open()).delete(key),
    stat: async (key: string): Promise<BlobStat | undefined> => (await open()).stat!(key),
    getRange: async (key: string, start: number, endInclusive: number): Promise<BlobRange | undefined> => (await open()).getRange!(key, start, endInclusive),
  }
}
