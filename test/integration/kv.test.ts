// One behavioural suite for the KeyValue port, run against the in-process backend (fake clock)
// and a real Redis (real, short TTLs; random key prefix, cleaned up afterwards).

import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import type { KeyValue } from '../../src/platform/kv/index.ts'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

interface Backend {
  kind: KeyValue['kind']
  kv: KeyValue
  /** Lets `ms` of backend time pass (fake clock for memory, real sleep for Redis). */
  advance(ms: number): Promise<void>
  /** Key under this run's prefix; every key handed out is deleted at the end. */
  key(name: string): string
}

async function suite(t: Test, backend: Backend): Promise<void> {
  const { kv, advance, key } = backend

  await t.test('kind and ping', async (t) => {
    t.equal(kv.kind, backend.kind)
    t.equal(await kv.ping(), true)
  })

  await t.test('get / set / del', async (t) => {
    const k = key('basic')
    t.equal(await kv.get(k), null)
    t.equal(await kv.set(k, 'v1'), true)
    t.equal(await kv.get(k), 'v1')
    t.equal(await kv.set(k, 'v2 ✓ "quoted"'), true, 'plain SET overwrites')
    t.equal(await kv.get(k), 'v2 ✓ "quoted"')
    t.equal(await kv.del(k), 1)
    t.equal(await kv.del(k), 0)
    t.equal(await kv.get(k), null)
    const empty = key('empty')
    await kv.set(empty, '')
    t.equal(await kv.get(empty), '', 'empty string is a value, not null')
  })

  await t.test('SET NX (onlyIfAbsent)', async (t) => {
    const k = key('nx')
    t.equal(await kv.set(k, 'first', { onlyIfAbsent: true }), true)
    t.equal(await kv.set(k, 'second', { onlyIfAbsent: true }), false)
    t.equal(await kv.get(k), 'first', 'loser does not overwrite')
    const winners = await Promise.all(Array.from({ length: 10 }, (_, i) => kv.set(key('nx-race'), `w${i}`, { onlyIfAbsent: true })))
    t.equal(winners.filter(Boolean).length, 1, 'exactly one concurrent SET NX wins')
    await kv.del(k)
    t.equal(await kv.set(k, 'third', { onlyIfAbsent: true }), true, 'free again after del')
  })

  await t.test('TTL expiry', async (t) => {
    const k = key('ttl')
    t.equal(await kv.set(k, 'short-lived', { ttlMs: 400 }), true)
    await advance(100)
    t.equal(await kv.get(k), 'short-lived', 'alive before the TTL')
    t.equal(await kv.set(k, 'nope', { onlyIfAbsent: true, ttlMs: 400 }), false)
    await advance(400)
    t.equal(await kv.get(k), null, 'gone after the TTL')
    t.equal(await kv.set(k, 'again', { onlyIfAbsent: true, ttlMs: 400 }), true, 'SET NX succeeds on an expired key')
    t.equal(await kv.del(k), 1)

    const plain = key('ttl-reset')
    await kv.set(plain, 'a', { ttlMs: 300 })
    await kv.set(plain, 'b') // like Redis SET: drops the TTL
    await advance(400)
    t.equal(await kv.get(plain), 'b', 'a plain SET clears the previous TTL')

    const deleted = key('ttl-del')
    await kv.set(deleted, 'x', { ttlMs: 100 })
    await advance(200)
    t.equal(await kv.del(deleted), 0, 'del of an expired key counts 0')

    await t.rejects(kv.set(k, 'x', { ttlMs: 0 }), RangeError)
    await t.rejects(kv.set(k, 'x', { ttlMs: -5 }), RangeError)
    await t.rejects(kv.set(k, 'x', { ttlMs: Number.NaN }), RangeError)
  })

  await t.test('incr', async (t) => {
    const k = key('counter')
    t.equal(await kv.incr(k), 1, 'missing key starts at 0')
    t.equal(await kv.incr(k, 5), 6)
    t.equal(await kv.incr(k, -2), 4)
    t.equal(await kv.get(k), '4', 'stored as a decimal string')
    const results = await Promise.all(Array.from({ length: 25 }, () => kv.incr(k)))
    t.equal(Math.max(...results), 29, 'concurrent increments are atomic')
    t.equal(new Set(results).size, 25)

    const text = key('not-a-number')
    await kv.set(text, 'abc')
    await t.rejects(kv.incr(text), /not an integer/)
    t.equal(await kv.get(text), 'abc')
    await t.rejects(kv.incr(k, 1.5), RangeError)
    await t.rejects(kv.incr(k, 1, 0), RangeError)
  })

  await t.test('incr with ttl: fixed window', async (t) => {
    const k = key('window')
    t.equal(await kv.incr(k, 1, 600), 1, 'first hit opens the window')
    await advance(200)
    t.equal(await kv.incr(k, 1, 600), 2)
    await advance(200)
    t.equal(await kv.incr(k, 1, 600), 3, 'later hits do not extend the window')
    await advance(300) // 700 ms after the first hit
    t.equal(await kv.get(k), null, 'window closed')
    t.equal(await kv.incr(k, 2, 600), 2, 'a new window starts from scratch')

    const persistent = key('window-existing')
    await kv.set(persistent, '10')
    t.equal(await kv.incr(persistent, 1, 100), 11)
    await advance(200)
    t.equal(await kv.get(persistent), '11', 'ttl is only applied to a key the incr created')
  })
}

t.test('memory', async (t) => {
  let now = 1_700_000_000_000
  const kv = await openKeyValue({ kind: 'memory' }, () => now)
  await suite(t, {
    kind: 'memory',
    kv,
    advance: async (ms) => {
      now += ms
    },
    key: (name) => `test:${name}`,
  })
  await t.test('clock is injected, not read from Date.now', async (t) => {
    await kv.set('clock', 'v', { ttlMs: 10 })
    await sleep(30)
    t.equal(await kv.get('clock'), 'v', 'real time passing does not expire keys')
    now += 10
    t.equal(await kv.get('clock'), null)
  })
  await t.test('close', async (t) => {
    await kv.close()
    t.equal(await kv.ping(), false)
    await t.rejects(kv.get('x'), /closed/)
    await kv.close()
  })
})

t.test('redis', async (t) => {
  let kv: KeyValue
  try {
    kv = await openKeyValue({ kind: 'redis', url: REDIS_URL })
  } catch (err) {
    const reason = `Redis unreachable at ${REDIS_URL} (${(err as Error).message || String(err)}); set TEST_REDIS_URL`
    t.comment(reason)
    t.skip(reason, () => {})
    return
  }
  const prefix = `ag_test:${randomBytes(6).toString('hex')}:`
  const used = new Set<string>()
  t.comment(`using key prefix ${prefix}`)
  let closed = false
  t.teardown(async () => {
    if (closed) return
    for (const k of used) await kv.del(k)
    await kv.close()
  })
  await suite(t, {
    kind: 'redis',
    kv,
    advance: (ms) => sleep(ms),
    key: (name) => {
      const k = prefix + name
      used.add(k)
      return k
    },
  })
  await t.test('cleanup and close', async (t) => {
    for (const k of used) await kv.del(k)
    for (const k of used) t.equal(await kv.get(k), null, `${k} removed`)
    await kv.close()
    closed = true
    t.equal(await kv.ping(), false)
    await kv.close()
  })
  await t.test('unreachable server fails fast on open', async (t) => {
    const started = Date.now()
    await t.rejects(openKeyValue({ kind: 'redis', url: 'redis://127.0.0.1:1' }))
    t.ok(Date.now() - started < 6000)
  })
})
