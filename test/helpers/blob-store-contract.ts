// The BlobStore port's contract (src/platform/blobs.ts), run against every adapter: the local
// directory and S3 (test/integration/blobs-s3.test.ts, on a real S3-compatible server). The same
// behaviours the local store's own tests pin down: round trips of any bytes with their content
// type, replacement, missing keys, keys with slashes and a key beside its "children", the key
// grammar, content types, and the optional stat and ranged reads.
import type { Test } from 'tap'
import { isBlobKey, type BlobStore } from '../../src/platform/blobs.ts'

export interface BlobStoreContractOptions {
  /**
   * Whether getRange on an empty blob is checked. s3rver answers a ranged GET of an empty object
   * with a 206 announcing one byte it never sends (the socket is then reset); AWS S3 answers 416
   * InvalidRange, which the S3 adapter turns into an empty range.
   */
  emptyBlobRanges?: boolean
  /**
   * Whether a blob's bytes and content type are replaced as one (AWS S3, the local store). s3rver
   * writes an object's file and its metadata file apart, so concurrent writers can leave the bytes
   * of one and the content type of another: there only "the bytes are one whole version" holds.
   */
  atomicMetadata?: boolean
}

/** Runs the contract as subtests of `t`; `open` gives a store (each subtest uses its own keys). */
export function blobStoreContract(t: Test, open: () => BlobStore | Promise<BlobStore>, options: BlobStoreContractOptions = {}): void {
  const { emptyBlobRanges = true, atomicMetadata = true } = options
  let counter = 0
  const unique = (name: string) => `contract-${++counter}-${Date.now().toString(36)}/${name}`

  t.test('round trip: bytes (newlines, NUL, 0xff) and content type', async (t) => {
    const blobs = await open()
    const key = unique('report.bin')
    const data = Buffer.from([0, 1, 2, 10, 13, 255, 10])
    t.same(await blobs.put(key, data, 'application/octet-stream'), { key, bytes: 7 })
    const got = await blobs.get(key)
    t.ok(got?.data.equals(data), 'the same bytes')
    t.equal(got?.contentType, 'application/octet-stream')
    t.equal(got?.bytes, 7)
  })

  t.test('a content type with parameters, and an empty blob', async (t) => {
    const blobs = await open()
    const key = unique('empty.txt')
    await blobs.put(key, Buffer.alloc(0), 'text/plain; charset=utf-8')
    t.same(await blobs.get(key), { data: Buffer.alloc(0), contentType: 'text/plain; charset=utf-8', bytes: 0 })
    if (blobs.stat) t.same(await blobs.stat(key), { contentType: 'text/plain; charset=utf-8', bytes: 0 })
    if (blobs.getRange && emptyBlobRanges) {
      t.same(await blobs.getRange(key, 0, 10), { data: Buffer.alloc(0), contentType: 'text/plain; charset=utf-8', start: 0, bytes: 0 }, 'no bytes in any range')
    }
  })

  t.test('a larger binary blob comes back whole', async (t) => {
    const blobs = await open()
    const key = unique('song.mp3')
    const data = Buffer.alloc(3 * 1024 * 1024 + 17)
    for (let i = 0; i < data.length; i++) data[i] = (i * 7919) & 0xff
    await blobs.put(key, data, 'audio/mpeg')
    const got = await blobs.get(key)
    t.equal(got?.bytes, data.length)
    t.ok(got?.data.equals(data), 'every byte')
  })

  t.test('put replaces the bytes and the content type', async (t) => {
    const blobs = await open()
    const key = unique('a')
    await blobs.put(key, Buffer.from('first, and longer than the second'), 'text/plain')
    await blobs.put(key, Buffer.from('second'), 'text/html')
    t.same(await blobs.get(key), { data: Buffer.from('second'), contentType: 'text/html', bytes: 6 })
    if (blobs.stat) t.same(await blobs.stat(key), { contentType: 'text/html', bytes: 6 })
  })

  t.test('keys with slashes; a key and its "children" coexist', async (t) => {
    const blobs = await open()
    const base = unique('a')
    const keys = [base, `${base}/b`, `${base}/b/c.txt`, `${base}.d`, `${base}/x-1_y.z`]
    for (const [i, key] of keys.entries()) await blobs.put(key, Buffer.from(`blob ${i}`), 'text/plain')
    for (const [i, key] of keys.entries()) t.equal((await blobs.get(key))?.data.toString(), `blob ${i}`, key)
    await blobs.delete(`${base}/b`)
    t.equal(await blobs.get(`${base}/b`), undefined)
    t.equal((await blobs.get(`${base}/b/c.txt`))?.data.toString(), 'blob 2', 'deleting a key leaves its "children"')
  })

  t.test('missing keys: get/stat/getRange answer undefined, delete is fine', async (t) => {
    const blobs = await open()
    const key = unique('never/written')
    t.equal(await blobs.get(key), undefined)
    if (blobs.stat) t.equal(await blobs.stat(key), undefined)
    if (blobs.getRange) t.equal(await blobs.getRange(key, 0, 10), undefined)
    await blobs.delete(key)
    t.pass('deleting a missing key is not an error')
  })

  t.test('delete removes, and a second delete is fine', async (t) => {
    const blobs = await open()
    const key = unique('gone')
    await blobs.put(key, Buffer.from('x'), 'text/plain')
    await blobs.delete(key)
    t.equal(await blobs.get(key), undefined)
    await blobs.delete(key)
    t.pass('deleted twice')
  })

  t.test('stat: content type and size without the bytes', async (t) => {
    const blobs = await open()
    t.ok(blobs.stat, 'the adapter implements stat')
    if (!blobs.stat) return
    const key = unique('clip.wav')
    await blobs.put(key, Buffer.alloc(1234, 1), 'audio/wav')
    t.same(await blobs.stat(key), { contentType: 'audio/wav', bytes: 1234 })
  })

  t.test('getRange: inclusive ranges, cut at the end, empty past it', async (t) => {
    const blobs = await open()
    t.ok(blobs.getRange, 'the adapter implements getRange')
    if (!blobs.getRange) return
    const key = unique('range.bin')
    const data = Buffer.from(Array.from({ length: 100 }, (_, i) => i))
    await blobs.put(key, data, 'audio/mpeg')
    const cases: [number, number, number, number][] = [
      [0, 0, 0, 1],
      [0, 9, 0, 10],
      [10, 19, 10, 10],
      [90, 99, 90, 10],
      [95, 500, 95, 5],
      [0, 99, 0, 100],
      [99, 99, 99, 1],
    ]
    for (const [start, end, from, length] of cases) {
      const part = await blobs.getRange(key, start, end)
      t.same(part, { data: data.subarray(from, from + length), contentType: 'audio/mpeg', start, bytes: 100 }, `${start}-${end}`)
    }
    for (const start of [100, 1000])
      t.same(await blobs.getRange(key, start, start + 10), { data: Buffer.alloc(0), contentType: 'audio/mpeg', start, bytes: 100 }, `${start}-: past the end`)
    await t.rejects(blobs.getRange(key, 5, 4), RangeError, 'end before start')
    await t.rejects(blobs.getRange(key, -1, 4), RangeError, 'negative start')
    await t.rejects(blobs.getRange(key, 0.5, 4), RangeError, 'not an integer')
  })

  t.test('the key grammar and content types are enforced before any I/O', async (t) => {
    const blobs = await open()
    const bad = ['', '../x', 'a/../../x', '/etc/passwd', 'a//b', 'a/./b', '.hidden', 'a/.x', 'a\\b', 'a\0b', 'a b', 'é', 'a/', 'x'.repeat(513)]
    for (const key of bad) {
      t.notOk(isBlobKey(key))
      await t.rejects(blobs.put(key, Buffer.from('x'), 'text/plain'), RangeError, `put ${JSON.stringify(key.slice(0, 20))}`)
      await t.rejects(blobs.get(key), RangeError, `get ${JSON.stringify(key.slice(0, 20))}`)
      await t.rejects(blobs.delete(key), RangeError, `delete ${JSON.stringify(key.slice(0, 20))}`)
      if (blobs.stat) await t.rejects(blobs.stat(key), RangeError)
      if (blobs.getRange) await t.rejects(blobs.getRange(key, 0, 1), RangeError)
    }
    await t.rejects(blobs.put(unique('k'), Buffer.from('x'), ''), RangeError, 'empty content type')
    await t.rejects(blobs.put(unique('k'), Buffer.from('x'), 'text/plain\nx-injected: 1'), RangeError, 'a newline in the content type')
  })

  t.test('concurrent writes of one key leave one whole version', async (t) => {
    const blobs = await open()
    const key = unique('race')
    const versions = Array.from({ length: 8 }, (_, i) => Buffer.alloc(64 * 1024 + i, String.fromCharCode(65 + i)))
    await Promise.all(versions.map((v, i) => blobs.put(key, v, `application/x-v${i}`)))
    const got = await blobs.get(key)
    t.ok(
      versions.some((version) => got?.data.equals(version)),
      'the stored bytes are one whole version',
    )
    if (!atomicMetadata) return
    const i = Number(/x-v(\d+)$/.exec(got?.contentType ?? '')?.[1])
    t.ok(got?.data.equals(versions[i] ?? Buffer.alloc(0)), 'the stored bytes are exactly the version its content type names')
  })
}
