// The S3 blob store against a real S3-compatible server (s3rver, in this process, on a random
// port): the BlobStore contract (test/helpers/blob-store-contract.ts) that the local store meets
// too, with and without a key prefix and through openBlobStore(loadConfig(...)); then what only S3
// has: where the prefix puts objects, the object's Content-Type, and errors that are not "missing".
import { mkdtemp, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { openBlobStore, s3BlobStoreOptions } from '../../src/platform/blob-store.ts'
import { LocalBlobStore } from '../../src/platform/blobs.ts'
import { S3BlobStore, normalizeS3Prefix } from '../../src/platform/blobs-s3.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { blobStoreContract } from '../helpers/blob-store-contract.ts'

// s3rver is CommonJS without types: the little of it used here.
interface S3rverInstance {
  run(): Promise<{ address: string; port: number }>
  close(): Promise<void>
}
type S3rverClass = new (options: { address: string; port: number; silent: boolean; directory: string; configureBuckets: { name: string; configs: string[] }[] }) => S3rverInstance
const S3rver = createRequire(import.meta.url)('s3rver') as S3rverClass

const BUCKET = 'agw-test'
const CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } // s3rver's fixed pair

const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-s3rver-'))
const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: path.join(dir, 's3'), configureBuckets: [{ name: BUCKET, configs: [] }] })
const { port } = await server.run()
const endpoint = `http://127.0.0.1:${port}`
const stores: S3BlobStore[] = []
t.teardown(async () => {
  for (const store of stores) store.close()
  await server.close()
  await rm(dir, { recursive: true, force: true })
})

function s3(options: { prefix?: string; credentials?: { accessKeyId: string; secretAccessKey: string } } = {}): S3BlobStore {
  const store = new S3BlobStore({ bucket: BUCKET, endpoint, forcePathStyle: true, credentials: CREDENTIALS, ...options })
  stores.push(store)
  return store
}

// s3rver: no empty-object ranges, and bytes and metadata written apart (see BlobStoreContractOptions).
const s3rverQuirks = { emptyBlobRanges: false, atomicMetadata: false }

t.test('contract: the local store (the reference)', async (t) => {
  const local = new LocalBlobStore(path.join(dir, 'local'))
  blobStoreContract(t, () => local)
})

t.test('contract: S3, bucket root', async (t) => {
  const store = s3()
  blobStoreContract(t, () => store, s3rverQuirks)
})

t.test('contract: S3 under a prefix', async (t) => {
  const store = s3({ prefix: 'tenant-1/agw' })
  blobStoreContract(t, () => store, s3rverQuirks)
})

t.test('contract: openBlobStore with BLOB_STORE=s3 (the lazily loaded adapter)', async (t) => {
  const config = loadConfig({
    BLOB_STORE: 's3',
    S3_BUCKET: BUCKET,
    S3_ENDPOINT: endpoint,
    S3_FORCE_PATH_STYLE: 'true',
    S3_PREFIX: 'via-config/',
    S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
    S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
  })
  t.same(s3BlobStoreOptions(config), { bucket: BUCKET, region: 'us-east-1', endpoint, prefix: 'via-config', forcePathStyle: true, credentials: CREDENTIALS })
  const store = openBlobStore(config)
  t.notOk(store instanceof LocalBlobStore)
  blobStoreContract(t, () => store, s3rverQuirks)
})

t.test('openBlobStore: local by default, under BLOB_DIR', async (t) => {
  const store = openBlobStore(loadConfig({ DATA_DIR: path.join(dir, 'data') }))
  t.ok(store instanceof LocalBlobStore)
  t.equal((store as LocalBlobStore).dir, path.join(dir, 'data', 'blobs'))
})

t.test('the prefix is the object key prefix; the key is the rest', async (t) => {
  const prefixed = s3({ prefix: '/media-tenant/' })
  t.equal(prefixed.prefix, 'media-tenant/', 'slashes normalised')
  const root = s3()
  await prefixed.put('audio/abc.mp3', Buffer.from('ID3'), 'audio/mpeg')
  t.same(await root.get('media-tenant/audio/abc.mp3'), { data: Buffer.from('ID3'), contentType: 'audio/mpeg', bytes: 3 }, 'the object sits at prefix + key')
  t.equal(await root.get('audio/abc.mp3'), undefined, 'not at the bucket root')
  await prefixed.delete('audio/abc.mp3')
  t.equal(await root.get('media-tenant/audio/abc.mp3'), undefined)

  t.equal(normalizeS3Prefix(undefined), '')
  t.equal(normalizeS3Prefix('/'), '')
  t.equal(normalizeS3Prefix('a/b'), 'a/b/')
  for (const bad of ['../x', 'a//b', '.hidden', 'a b']) t.throws(() => normalizeS3Prefix(bad), RangeError, bad)
})

t.test('errors other than "missing" are thrown, never read as an absent blob', async (t) => {
  const stranger = s3({ credentials: { accessKeyId: 'NOT-S3RVER', secretAccessKey: 'whatever' } })
  await t.rejects(stranger.get('anything'), 'an access key the server refuses is an error')
  await t.rejects(stranger.put('anything', Buffer.from('x'), 'text/plain'))
  const noBucket = new S3BlobStore({ bucket: 'no-such-bucket', endpoint, forcePathStyle: true, credentials: CREDENTIALS })
  stores.push(noBucket)
  await t.rejects(noBucket.get('k'), { name: 'NoSuchBucket' }, 'a missing bucket is a configuration error, not a missing key')
  await t.rejects(noBucket.getRange('k', 0, 1), { name: 'NoSuchBucket' })
  await t.rejects(noBucket.put('k', Buffer.from('x'), 'text/plain'), 'a missing bucket is an error on put')
  t.throws(() => new S3BlobStore({ bucket: '' }), RangeError)
})
