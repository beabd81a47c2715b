// Per-owner data keys and KEK rotation (src/memory/crypto) against PGlite in memory and a real
// Postgres (throw-away database): concurrent creators agree on one key, a rolled-back key is never
// cached, rotation rewraps under the new KEK while other stores keep reading, is resumable,
// idempotent and shareable between concurrent runs, and never changes a data key.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { addKeyToRingFile, createOwnerKeyStore, ensureEmbeddedKeyRing, fileKeyRing, rotateKek, staticKeyRing } from '../../src/memory/crypto/index.ts'
import type { KeyRing, OwnerKeys } from '../../src/memory/types.ts'
import { openDb } from '../../src/platform/db/index.ts'
import type { Db, Queryable } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

interface Backend {
  name: string
  /** Another handle on the same database (a separate process's pool), or the same one for PGlite. */
  open(poolMax?: number): Promise<Db>
  multiHandle: boolean
}

const RECORD = '0b5e1f2a-8d3c-4e6f-9a7b-1c2d3e4f5a6b'
const uniqueOwner = (label: string): string => `agent:${label}-${randomBytes(4).toString('hex')}`

async function addOwner(q: Queryable, owner: string): Promise<void> {
  await q.query('insert into memory_owners (owner) values ($1) on conflict do nothing', [owner])
}

async function keyRows(q: Queryable): Promise<Map<string, { kek: string; wrapped: Buffer }>> {
  const rows = await q.query<{ owner: string; kek_version: string; wrapped_dek: Buffer }>('select owner, kek_version, wrapped_dek from memory_owner_keys')
  return new Map(rows.map((r) => [r.owner, { kek: r.kek_version, wrapped: r.wrapped_dek }]))
}

const sameKeys = (a: OwnerKeys, b: OwnerKeys): boolean => a.blindKey.equals(b.blindKey) && a.dedupeKey.equals(b.dedupeKey)

async function suite(t: Test, backend: Backend): Promise<void> {
  const db = await backend.open()
  t.teardown(() => db.close())
  await migrate(db)
  const dir = await mkdtemp(path.join(tmpdir(), `ag-memkeys-${backend.name}-`))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  // The embedded default's ring file: rotation adds to it, other stores reload it on a miss.
  const ring = await ensureEmbeddedKeyRing(dir)
  const ringFile = path.join(dir, 'memory-keys.json')
  const firstKek = ring.activeId
  // Three other "processes" (separate pools on Postgres; PGlite has one handle).
  const others = backend.multiHandle ? [await backend.open(4), await backend.open(4), await backend.open(4)] : [db, db, db]
  t.teardown(async () => {
    if (backend.multiHandle) for (const h of others) await h.close()
  })

  await t.test('10 concurrent creators of one owner agree on one key', async (t) => {
    const owner = uniqueOwner('conc')
    await addOwner(db, owner)
    const handles = Array.from({ length: 10 }, (_, i) => (i < 7 ? db : others[i % 3]!))
    // Separate stores (no shared cache), each creating inside its own transaction.
    const created = await Promise.all(handles.map((h) => h.transaction((tx) => createOwnerKeyStore({ ring }).keysOf(tx, owner, { create: true }))))
    const first = created[0]!
    for (const keys of created) t.ok(keys && sameKeys(keys, first), 'same derived keys')
    const rows = await db.query<{ n: bigint }>('select count(*) as n from memory_owner_keys where owner = $1', [owner])
    t.equal(rows[0]?.n, 1n, 'one row')
    const state = await db.query<{ active_kek: string }>('select active_kek from memory_kek_state')
    t.same(
      state.map((s) => s.active_kek),
      [firstKek],
      'the ring active id became the database active KEK',
    )
    // Autocommit creators too (the caller's Queryable is the Db itself).
    const owner2 = uniqueOwner('conc-auto')
    await addOwner(db, owner2)
    const auto = await Promise.all(handles.map((h) => createOwnerKeyStore({ ring }).keysOf(h, owner2, { create: true })))
    for (const keys of auto) t.ok(keys && sameKeys(keys, auto[0]!))
    t.equal(await createOwnerKeyStore({ ring }).keysOf(db, uniqueOwner('none')), undefined, 'no key and no create: undefined')
  })

  await t.test('a key created in a rolled-back transaction is never served from the cache', async (t) => {
    const store = createOwnerKeyStore({ ring })
    const owner = uniqueOwner('rollback')
    await addOwner(db, owner)
    let lost: OwnerKeys | undefined
    await t.rejects(
      db.transaction(async (tx) => {
        lost = await store.keysOf(tx, owner, { create: true })
        const again = await store.keysOf(tx, owner, { create: true })
        t.ok(again && lost && sameKeys(again, lost), 'the same transaction sees its key')
        throw new Error('roll back')
      }),
      /roll back/,
    )
    t.equal(store.size, 0, 'nothing cached from the uncommitted transaction')
    t.equal(await store.keysOf(db, owner), undefined, 'the key is gone with the transaction')
    const kept = await db.transaction((tx) => store.keysOf(tx, owner, { create: true }))
    t.notOk(sameKeys(kept!, lost!), 'a new key replaced it')
    const read = await store.keysOf(db, owner)
    t.ok(read && sameKeys(read, kept!))
    t.equal(store.size, 1, 'cached once read after commit')
  })

  await t.test('the cache is a bounded, expiring LRU', async (t) => {
    let now = 0
    const store = createOwnerKeyStore({ ring, maxCached: 2, ttlMs: 1000, clock: () => now })
    const owners = [uniqueOwner('lru'), uniqueOwner('lru'), uniqueOwner('lru')]
    for (const o of owners) {
      await addOwner(db, o)
      await store.keysOf(db, o, { create: true })
      await store.keysOf(db, o) // cached on this committed read
    }
    t.equal(store.size, 2, 'bounded')
    const cached = await store.keysOf(db, owners[2]!)
    t.equal(await store.keysOf(db, owners[2]!), cached, 'a hit returns the cached object')
    now += 1001
    t.not(await store.keysOf(db, owners[2]!), cached, 'expired: unwrapped again')
    store.forget(owners[2]!)
    store.clear()
    t.equal(store.size, 0)
  })

  // Owners with keys and a ciphertext each, written before any rotation.
  const owners: string[] = []
  const before = new Map<string, Buffer>()
  const writer = createOwnerKeyStore({ ring })
  for (let i = 0; i < 23; i++) {
    const owner = uniqueOwner(`rot${i}`)
    await addOwner(db, owner)
    const keys = await db.transaction((tx) => writer.keysOf(tx, owner, { create: true }))
    before.set(owner, keys!.cipher.encrypt('content', RECORD, Buffer.from(`note of ${owner}`)))
    owners.push(owner)
  }

  const checkAllDecrypt = async (t: Test, q: Queryable, store: ReturnType<typeof createOwnerKeyStore>, label: string): Promise<void> => {
    let ok = 0
    for (const owner of owners) {
      const keys = await store.keysOf(q, owner)
      if (keys?.cipher.decrypt('content', RECORD, before.get(owner)!).toString() === `note of ${owner}`) ok++
    }
    t.equal(ok, owners.length, label)
  }

  await t.test('rotation while another store keeps reading; ciphertexts survive', async (t) => {
    const readerDb = others[0]!
    // Another "process": its own ring instance (loaded before the new key existed) and store.
    const readerRing = await fileKeyRing(ringFile)
    const reader = createOwnerKeyStore({ ring: readerRing, ttlMs: 0 })
    const newKek = await addKeyToRingFile(ringFile)
    const rotationRing = await fileKeyRing(ringFile)
    t.equal(rotationRing.activeId, newKek)
    let reading = true
    let reads = 0
    let failures = 0
    const readLoop = (async () => {
      while (reading) {
        for (const owner of owners) {
          const keys = await reader.keysOf(readerDb, owner) // ttl 0: unwraps every time
          if (keys?.cipher.decrypt('content', RECORD, before.get(owner)!).toString() !== `note of ${owner}`) failures++
          reads++
        }
      }
    })()
    const batches: number[] = []
    const result = await rotateKek({ db, ring: rotationRing, toKekId: newKek, batchSize: 5, onProgress: (p) => void batches.push(p.batch) })
    reading = false
    await readLoop
    t.ok(reads >= owners.length, `the reader kept reading (${reads} reads)`)
    t.equal(failures, 0, 'every read during the rotation decrypted')
    t.ok(result.rewrapped >= owners.length, `rewrapped ${result.rewrapped}`)
    t.ok(batches.every((n) => n <= 5))
    const rows = await keyRows(db)
    t.ok(
      [...rows.values()].every((r) => r.kek === newKek),
      'every row under the new KEK',
    )
    t.same(readerRing.ids().sort(), rotationRing.ids().sort(), 'the reader reloaded its ring on the miss')
    await checkAllDecrypt(t, readerDb, createOwnerKeyStore({ ring: readerRing }), 'pre-rotation ciphertexts decrypt (fresh store)')
    await checkAllDecrypt(t, db, writer, 'and through keys cached before the rotation')
    // New data keys now use the new KEK.
    const fresh = uniqueOwner('after')
    await addOwner(db, fresh)
    await writer.keysOf(db, fresh, { create: true })
    t.equal((await keyRows(db)).get(fresh)?.kek, newKek)
    const [state] = await db.query<{ active_kek: string }>('select active_kek from memory_kek_state')
    t.equal(state?.active_kek, newKek)

    const again = await rotateKek({ db, ring: rotationRing, toKekId: newKek })
    t.same(again, { rewrapped: 0, alreadyCurrent: rows.size + 1 }, 'a second run is a no-op')
    const after = await keyRows(db)
    for (const [owner, row] of rows) t.ok(after.get(owner)?.wrapped.equals(row.wrapped), 'unchanged bytes')
  })

  await t.test('a stopped rotation resumes where it was', async (t) => {
    const kek3 = await addKeyToRingFile(ringFile)
    const rotationRing = await fileKeyRing(ringFile)
    const total = (await keyRows(db)).size
    await t.rejects(
      rotateKek({
        db,
        ring: rotationRing,
        toKekId: kek3,
        batchSize: 4,
        onProgress: () => {
          throw new Error('killed after one batch')
        },
      }),
      /killed after one batch/,
    )
    const partial = [...(await keyRows(db)).values()]
    t.equal(partial.filter((r) => r.kek === kek3).length, 4, 'the first batch committed')
    // Mid-rotation, readers work with rows under both KEKs.
    await checkAllDecrypt(t, db, createOwnerKeyStore({ ring: await fileKeyRing(ringFile) }), 'mixed KEKs decrypt')
    const result = await rotateKek({ db, ring: rotationRing, toKekId: kek3, batchSize: 4 })
    t.same(result, { rewrapped: total - 4, alreadyCurrent: 4 })
    t.ok([...(await keyRows(db)).values()].every((r) => r.kek === kek3))
    await checkAllDecrypt(t, db, createOwnerKeyStore({ ring: rotationRing }), 'after resuming')
  })

  await t.test('concurrent rotations to the same KEK share the work', async (t) => {
    const kek4 = await addKeyToRingFile(ringFile)
    const rings = await Promise.all([fileKeyRing(ringFile), fileKeyRing(ringFile), fileKeyRing(ringFile)])
    const total = (await keyRows(db)).size
    const results = await Promise.all(rings.map((r, i) => rotateKek({ db: others[i]!, ring: r, toKekId: kek4, batchSize: 3 })))
    t.equal(
      results.reduce((n, r) => n + r.rewrapped, 0),
      total,
      'each row rewrapped exactly once',
    )
    t.ok([...(await keyRows(db)).values()].every((r) => r.kek === kek4))
    await checkAllDecrypt(t, db, createOwnerKeyStore({ ring: rings[0]! }), 'after concurrent runs')
  })

  await t.test('refusals: unknown target, missing old KEK, superseded run', async (t) => {
    await t.rejects(rotateKek({ db, ring, toKekId: 'k-not-there' }), /cannot rotate to key-encryption key "k-not-there"/)
    await t.rejects(rotateKek({ db, ring, toKekId: 'bad id!' }), /1-64 characters/)
    const current = (await db.query<{ active_kek: string }>('select active_kek from memory_kek_state'))[0]!.active_kek
    // A ring lacking the KEK rows are wrapped under: a clear error naming the missing id.
    const lonely: KeyRing = staticKeyRing('other', { other: randomBytes(32) })
    const message = await createOwnerKeyStore({ ring: lonely })
      .keysOf(db, owners[0]!)
      .then(
        () => '',
        (err: Error) => err.message,
      )
    t.match(message, `key-encryption key "${current}" is not in the key ring (it holds other)`)
    // Other bytes under the old id: refused before the switch (the active KEK stays).
    await t.rejects(rotateKek({ db, ring: staticKeyRing('other', { other: randomBytes(32), [current]: randomBytes(32) }), toKekId: 'other' }), /failed to unwrap/)
    await t.rejects(rotateKek({ db, ring: lonely, toKekId: 'other' }), new RegExp(`"${current}" is not in the key ring`))
    const [still] = await db.query<{ active_kek: string }>('select active_kek from memory_kek_state')
    t.equal(still?.active_kek, current, 'a refused rotation switched nothing')
    // A rotation to another KEK started meanwhile stops this one (no ping-pong between two targets).
    const a = await addKeyToRingFile(ringFile)
    const b = await addKeyToRingFile(ringFile)
    const full = await fileKeyRing(ringFile)
    await t.rejects(
      rotateKek({ db, ring: full, toKekId: a, batchSize: 2, onProgress: () => db.query('update memory_kek_state set active_kek = $1', [b]).then(() => {}) }),
      new RegExp(`rotation to "${a}" superseded: the active key-encryption key is now "${b}"`),
    )
    const done = await rotateKek({ db, ring: full, toKekId: b })
    t.equal(done.rewrapped + done.alreadyCurrent, (await keyRows(db)).size)
    await checkAllDecrypt(t, db, createOwnerKeyStore({ ring: full }), 'after a superseded run and the winner')
  })
}

t.test('pglite (memory://)', async (t) => {
  let shared: Db | undefined
  await suite(t, {
    name: 'pglite',
    open: async () => (shared ??= await openDb({ kind: 'pglite', dataDir: 'memory://' })),
    multiHandle: false,
  })
})

t.test('postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  await suite(t, {
    name: 'postgres',
    open: (poolMax = 10) => openDb({ kind: 'postgres', url, poolMax }),
    multiHandle: true,
  })
})
