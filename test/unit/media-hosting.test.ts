// Audio hosting (src/media/hosting.ts) on the platform's fastify app over a LocalBlobStore in a
// temp dir: 200/HEAD with their headers, 304, single ranges and 416, the ranges that are ignored
// (multiple, malformed, If-Range mismatch: 200 with the whole file), and every path outside the
// audio/ namespace (other keys, traversal, encoded traversal, NUL) a 404 problem, never a 5xx.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { AUDIO_KEY_PATTERN, audioKeyFor, audioUrl, parseRange, registerAudioHosting } from '../../src/media/hosting.ts'
import type { BlobStore } from '../../src/platform/blobs.ts'
import { LocalBlobStore } from '../../src/platform/blobs.ts'
import { createHttpApp } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'

const PROBLEM = 'application/problem+json; charset=utf-8'
const AUDIO = Buffer.from(Array.from({ length: 1000 }, (_, i) => i % 251))

async function world(t: Test, options: { prefix?: string; wrap?: (store: LocalBlobStore) => BlobStore } = {}) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-hosting-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const local = new LocalBlobStore(dir)
  const app = createHttpApp({ name: 'media', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 16 })
  registerAudioHosting(app, { blobs: options.wrap ? options.wrap(local) : local, ...(options.prefix ? { prefix: options.prefix } : {}) })
  t.teardown(() => app.close())
  await app.ready()
  const key = audioKeyFor(AUDIO, 'mp3')
  await local.put(key, AUDIO, 'audio/mpeg')
  const hash = AUDIO_KEY_PATTERN.exec(key)![1]!
  return { app, local, key, hash, url: `${(options.prefix ?? '/media').replace(/\/+$/, '')}/${key}` }
}

t.test('audioKeyFor and audioUrl: content-addressed keys under audio/', async (t) => {
  const key = audioKeyFor(Buffer.from('abc'), 'wav')
  t.equal(key, 'audio/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.wav')
  t.equal(audioKeyFor(Buffer.from('abc'), 'mp3').replace(/mp3$/, 'wav'), key, 'same bytes, same hash')
  t.equal(audioUrl('https://agents.example.com/', key), `https://agents.example.com/media/${key}`)
  t.equal(audioUrl('https://cdn.example.com/x', key, '/audio-files/'), `https://cdn.example.com/x/audio-files/${key}`)
  t.throws(() => audioUrl('https://a.example', 'artifacts/t/x.mp3'), RangeError)
})

t.test('GET: 200 with the bytes and every header', async (t) => {
  const { app, url, hash } = await world(t)
  const response = await app.inject({ method: 'GET', url })
  t.equal(response.statusCode, 200)
  t.ok(response.rawPayload.equals(AUDIO), 'the stored bytes')
  t.equal(response.headers['content-type'], 'audio/mpeg')
  t.equal(response.headers['content-length'], '1000')
  t.equal(response.headers['accept-ranges'], 'bytes')
  t.equal(response.headers.etag, `"${hash}"`, 'strong ETag: the content address')
  t.equal(response.headers['cache-control'], 'public, max-age=31536000, immutable')
  t.equal(response.headers['x-content-type-options'], 'nosniff')
  t.equal(response.headers['content-disposition'], 'inline')
  t.ok(response.headers['x-request-id'], 'the platform request id')
})

t.test('HEAD: the same headers, no body', async (t) => {
  const { app, url, hash } = await world(t)
  const response = await app.inject({ method: 'HEAD', url })
  t.equal(response.statusCode, 200)
  t.equal(response.rawPayload.length, 0)
  t.equal(response.headers['content-length'], '1000', 'the size of the file, not of the empty body')
  t.equal(response.headers['content-type'], 'audio/mpeg')
  t.equal(response.headers.etag, `"${hash}"`)
  t.equal(response.headers['accept-ranges'], 'bytes')
  const ranged = await app.inject({ method: 'HEAD', url, headers: { range: 'bytes=0-9' } })
  t.equal(ranged.statusCode, 200, 'Range is defined for GET only: HEAD ignores it')
  t.equal(ranged.headers['content-length'], '1000')
})

t.test('HEAD and GET work on a store without stat/getRange (whole-blob fallback)', async (t) => {
  const { app, url } = await world(t, { wrap: (local) => ({ put: local.put.bind(local), get: local.get.bind(local), delete: local.delete.bind(local) }) })
  const head = await app.inject({ method: 'HEAD', url })
  t.equal(head.statusCode, 200)
  t.equal(head.headers['content-length'], '1000')
  const range = await app.inject({ method: 'GET', url, headers: { range: 'bytes=10-19' } })
  t.equal(range.statusCode, 206)
  t.ok(range.rawPayload.equals(AUDIO.subarray(10, 20)))
  t.equal((await app.inject({ method: 'GET', url, headers: { range: 'bytes=2000-' } })).statusCode, 416)
})

t.test('If-None-Match: 304 without a body', async (t) => {
  const { app, url, hash } = await world(t)
  for (const value of [`"${hash}"`, `W/"${hash}"`, `"other", "${hash}"`, '*']) {
    const response = await app.inject({ method: 'GET', url, headers: { 'if-none-match': value } })
    t.equal(response.statusCode, 304, value)
    t.equal(response.rawPayload.length, 0)
    t.equal(response.headers.etag, `"${hash}"`)
    t.equal(response.headers['cache-control'], 'public, max-age=31536000, immutable')
  }
  t.equal((await app.inject({ method: 'GET', url, headers: { 'if-none-match': '"other"' } })).statusCode, 200)
  t.equal((await app.inject({ method: 'HEAD', url, headers: { 'if-none-match': `"${hash}"` } })).statusCode, 304)
  t.equal((await app.inject({ method: 'GET', url, headers: { 'if-none-match': `"${hash}"`, range: 'bytes=0-1' } })).statusCode, 304, 'If-None-Match before Range')
})

t.test('Range: one range is a 206 with Content-Range', async (t) => {
  const { app, url, hash } = await world(t)
  const cases: [string, number, number][] = [
    ['bytes=0-99', 0, 99],
    ['bytes=100-100', 100, 100],
    ['bytes=990-5000', 990, 999], // the end is cut at the file's end
    ['bytes=500-', 500, 999],
    ['bytes=-10', 990, 999],
    ['bytes=-5000', 0, 999], // a suffix longer than the file is the whole file
    ['BYTES = 1 - 2', 1, 2], // unit case-insensitive, spaces tolerated
  ]
  for (const [range, start, end] of cases) {
    const response = await app.inject({ method: 'GET', url, headers: { range } })
    t.equal(response.statusCode, 206, range)
    t.equal(response.headers['content-range'], `bytes ${start}-${end}/1000`, `${range}: Content-Range`)
    t.equal(response.headers['content-length'], String(end - start + 1), `${range}: Content-Length`)
    t.ok(response.rawPayload.equals(AUDIO.subarray(start, end + 1)), `${range}: the bytes`)
    t.equal(response.headers['content-type'], 'audio/mpeg')
    t.equal(response.headers.etag, `"${hash}"`)
  }
  const ifRange = await app.inject({ method: 'GET', url, headers: { range: 'bytes=0-9', 'if-range': `"${hash}"` } })
  t.equal(ifRange.statusCode, 206, 'If-Range with our ETag: the range')
})

t.test('Range: unsatisfiable is a 416 with Content-Range: bytes */size', async (t) => {
  const { app, url } = await world(t)
  for (const range of ['bytes=1000-', 'bytes=1000-2000', 'bytes=5000-6000', 'bytes=-0', 'bytes=99999999999999999999999-']) {
    const response = await app.inject({ method: 'GET', url, headers: { range } })
    t.equal(response.statusCode, 416, range)
    t.equal(response.headers['content-range'], 'bytes */1000')
    t.equal(response.headers['content-type'], PROBLEM)
    t.match(response.json(), { status: 416, field: 'header.range' })
    t.notOk(response.headers['cache-control'], 'an error is not cached for a year')
  }
})

t.test('Range: an empty file satisfies no range', async (t) => {
  const { app, local } = await world(t)
  const key = audioKeyFor(Buffer.alloc(0), 'wav')
  await local.put(key, Buffer.alloc(0), 'audio/wav')
  t.equal((await app.inject({ method: 'GET', url: `/media/${key}` })).statusCode, 200)
  for (const range of ['bytes=0-', 'bytes=-1', 'bytes=0-0']) {
    const response = await app.inject({ method: 'GET', url: `/media/${key}`, headers: { range } })
    t.equal(response.statusCode, 416, range)
    t.equal(response.headers['content-range'], 'bytes */0')
  }
})

t.test('Range: ignored (200, the whole file) when several, malformed, or If-Range does not match', async (t) => {
  const { app, url } = await world(t)
  const ignored = ['bytes=0-1,5-6', 'bytes=5-2', 'items=0-1', 'bytes=', 'bytes=-', 'bytes=a-b', 'bytes=1.5-2', 'garbage', `bytes=0-${'9'.repeat(300)}`]
  for (const range of ignored) {
    const response = await app.inject({ method: 'GET', url, headers: { range } })
    t.equal(response.statusCode, 200, JSON.stringify(range))
    t.ok(response.rawPayload.equals(AUDIO))
    t.notOk(response.headers['content-range'])
  }
  const stale = await app.inject({ method: 'GET', url, headers: { range: 'bytes=0-9', 'if-range': '"another-version"' } })
  t.equal(stale.statusCode, 200, 'If-Range with another ETag: the whole file')
  const dated = await app.inject({ method: 'GET', url, headers: { range: 'bytes=0-9', 'if-range': 'Wed, 21 Oct 2015 07:28:00 GMT' } })
  t.equal(dated.statusCode, 200, 'If-Range with a date: the whole file (no Last-Modified to compare)')
})

t.test('parseRange', async (t) => {
  t.same(parseRange('bytes=0-0', 1), { start: 0, end: 0 })
  t.same(parseRange('bytes=-1', 1), { start: 0, end: 0 })
  t.equal(parseRange('bytes=1-', 1), 'unsatisfiable')
  t.equal(parseRange(undefined, 10), undefined)
  t.equal(parseRange('bytes=3-1', 10), undefined)
})

t.test('only content-addressed audio keys are reachable: everything else is a 404 problem', async (t) => {
  const { app, local, hash } = await world(t)
  // Blobs that exist but are not hosted audio.
  await local.put('artifacts/t1/secret.txt', Buffer.from('secret'), 'text/plain')
  await local.put(`audio/${hash}.txt`, Buffer.from('not audio'), 'text/plain')
  await local.put('audio/short.mp3', Buffer.from('not a content address'), 'audio/mpeg')
  const paths = [
    '/media/artifacts/t1/secret.txt',
    `/media/audio/${hash}.txt`,
    '/media/audio/short.mp3',
    `/media/audio/${hash.toUpperCase()}.mp3`,
    `/media/audio/x/${hash}.mp3`,
    '/media/',
    '/media/audio',
    '/media/audio/',
    `/media/audio/../artifacts/t1/secret.txt`,
    `/media/audio/%2e%2e/artifacts/t1/secret.txt`,
    `/media/audio/%2E%2E%2Fartifacts%2Ft1%2Fsecret.txt`,
    `/media/..%2fartifacts%2ft1%2fsecret.txt`,
    `/media/audio/${hash}.mp3%00`,
    `/media/audio/${hash}%00.mp3`,
    '/media/audio/%00',
    `/media/audio/${hash}.mp3%20`,
    `/media/audio/${'a'.repeat(5000)}.mp3`,
  ]
  for (const url of paths) {
    for (const method of ['GET', 'HEAD'] as const) {
      const response = await app.inject({ method, url })
      t.ok(response.statusCode < 500, `${method} ${url.slice(0, 90)}: ${response.statusCode}, not a 5xx`)
      t.equal(response.statusCode, 404, `${method} ${url.slice(0, 90)}: 404`)
      t.equal(response.headers['content-type'], PROBLEM)
      if (method === 'GET') t.match(response.json(), { status: 404, code: 'not_found' })
      t.notOk(response.headers['cache-control'])
    }
  }
  const slash = await app.inject({ method: 'GET', url: `/media/audio/${hash}.mp3/` })
  t.equal(slash.statusCode, 200, 'a trailing slash is ignored, as on every route of the platform (ignoreTrailingSlash)')
  const encoded = await app.inject({ method: 'GET', url: `/media/audio%2f${hash}.mp3` })
  t.equal(encoded.statusCode, 200, 'an encoded / decodes to the same key: the decoded key is what is checked')
  const missing = await app.inject({ method: 'GET', url: `/media/audio/${'0'.repeat(64)}.mp3` })
  t.equal(missing.statusCode, 404, 'a well-formed key with no blob')
  t.equal(missing.headers['content-type'], PROBLEM)
  const post = await app.inject({ method: 'POST', url: `/media/audio/${hash}.mp3` })
  t.ok(post.statusCode === 404 || post.statusCode === 405, `POST: ${post.statusCode}`)
})

t.test('bad percent-encoding is refused by the router (400), never a 5xx', async (t) => {
  const { app } = await world(t)
  const response = await app.inject({ method: 'GET', url: '/media/audio/%ff%fe.mp3' })
  t.ok(response.statusCode === 400 || response.statusCode === 404, `status ${response.statusCode}`)
  t.equal(response.headers['content-type'], PROBLEM)
})

t.test('another prefix', async (t) => {
  const { app, url, key } = await world(t, { prefix: '/hosted/audio-files/' })
  t.equal(url, `/hosted/audio-files/${key}`)
  t.equal((await app.inject({ method: 'GET', url: `/hosted/audio-files/${key}` })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: `/media/${key}` })).statusCode, 404)
  t.throws(() => registerAudioHosting(app, { blobs: new LocalBlobStore(os.tmpdir()), prefix: 'media' }), RangeError)
})
