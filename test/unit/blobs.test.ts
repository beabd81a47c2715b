// The local-filesystem BlobStore: round trips, replacement, key rules (no way out of the
// directory), atomic writes (no partial file, no temp left behind).
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { LocalBlobStore, assertBlobKey, isBlobKey } from '../../src/platform/blobs.ts'

async function store(t: Test): Promise<{ blobs: LocalBlobStore; dir: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-blobs-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return { blobs: new LocalBlobStore(path.join(dir, 'store')), dir }
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true })
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    .sort()
}

t.test('put, get and delete round-trip bytes and content type', async (t) => {
  const { blobs } = await store(t)
  const data = Buffer.from([0, 1, 2, 10, 13, 255, 10])
  t.same(await blobs.put('artifacts/t1/report.bin', data, 'application/octet-stream'), { key: 'artifacts/t1/report.bin', bytes: 7 })
  const got = await blobs.get('artifacts/t1/report.bin')
  t.ok(got)
  t.ok(got!.data.equals(data), 'bytes (including newlines) come back unchanged')
  t.equal(got!.contentType, 'application/octet-stream')
  t.equal(got!.bytes, 7)
  await blobs.delete('artifacts/t1/report.bin')
  t.equal(await blobs.get('artifacts/t1/report.bin'), undefined)
  await blobs.delete('artifacts/t1/report.bin') // missing: not an error
  t.equal(await blobs.get('never/written'), undefined)
})

t.test('an empty blob and a content type with parameters', async (t) => {
  const { blobs } = await store(t)
  await blobs.put('empty', Buffer.alloc(0), 'text/plain; charset=utf-8')
  t.same(await blobs.get('empty'), { data: Buffer.alloc(0), contentType: 'text/plain; charset=utf-8', bytes: 0 })
})

t.test('put replaces, and a key and its "children" coexist', async (t) => {
  const { blobs } = await store(t)
  await blobs.put('a', Buffer.from('first'), 'text/plain')
  await blobs.put('a', Buffer.from('second, longer'), 'text/html')
  await blobs.put('a/b', Buffer.from('child'), 'text/plain')
  await blobs.put('a.d', Buffer.from('looks like a directory'), 'text/plain')
  t.equal((await blobs.get('a'))!.data.toString(), 'second, longer')
  t.equal((await blobs.get('a'))!.contentType, 'text/html')
  t.equal((await blobs.get('a/b'))!.data.toString(), 'child')
  t.equal((await blobs.get('a.d'))!.data.toString(), 'looks like a directory')
})

t.test('keys cannot leave the directory or name hidden files', async (t) => {
  const { blobs, dir } = await store(t)
  const bad = ['', '../x', 'a/../../x', '/etc/passwd', 'a//b', 'a/./b', '.hidden', 'a/.x', 'a\\b', 'a\0b', 'a b', 'é', 'a/', 'x'.repeat(513)]
  for (const key of bad) {
    t.notOk(isBlobKey(key), `${JSON.stringify(key.slice(0, 20))} is refused`)
    await t.rejects(blobs.put(key, Buffer.from('x'), 'text/plain'), RangeError)
    await t.rejects(blobs.get(key), RangeError)
    await t.rejects(blobs.delete(key), RangeError)
  }
  for (const key of ['a', 'A-1_b.c', 'cdn/t1/logo.png', 'x'.repeat(512)]) t.doesNotThrow(() => assertBlobKey(key), key.slice(0, 20))
  t.same(await filesUnder(dir), [], 'nothing was written anywhere')
})

t.test('content types are validated', async (t) => {
  const { blobs } = await store(t)
  await t.rejects(blobs.put('k', Buffer.from('x'), ''), RangeError)
  await t.rejects(blobs.put('k', Buffer.from('x'), 'text/plain\nx-injected: 1'), RangeError)
})

t.test('concurrent writes of one key leave one whole version and no temp files', async (t) => {
  const { blobs, dir } = await store(t)
  const versions = Array.from({ length: 20 }, (_, i) => Buffer.alloc(64 * 1024 + i, String.fromCharCode(65 + i)))
  await Promise.all(versions.map((v, i) => blobs.put('race/key', v, `application/x-v${i}`)))
  const got = (await blobs.get('race/key'))!
  const i = Number(/x-v(\d+)$/.exec(got.contentType)![1])
  t.ok(got.data.equals(versions[i]!), 'the stored bytes are exactly the version its content type names')
  t.same(await filesUnder(dir), ['store/race.d/key.blob'], 'only the blob file remains')
})
