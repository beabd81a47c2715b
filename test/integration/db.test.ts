// One behavioural suite for the Db port, run against every backend:
// PGlite in memory, PGlite on a temp directory, and a real Postgres (throw-away database).

import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { DbError, isUniqueViolation, openDb, pgErrorCode, toJson } from '../../src/platform/db/index.ts'
import type { Db, Queryable } from '../../src/platform/db/index.ts'
import { migrate } from '../../src/platform/db/migrate.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

const BIG = 9007199254740993n // 2^53 + 1: not representable as a JS number
const INT8_MIN = -9223372036854775808n
const INT8_MAX = 9223372036854775807n

interface Backend {
  name: string
  kind: Db['kind']
  /** Opens a handle on this backend's storage (a new, empty db for PGlite in memory). */
  open(): Promise<Db>
  /** Data written through one handle is visible to a later handle. */
  persistent: boolean
  /** Several handles may be open on the same storage at once. */
  multiHandle: boolean
}

async function tempDir(t: Test, label: string): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), `ag-${label}-`))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function writeMigrations(dir: string, files: Record<string, string>): Promise<void> {
  for (const [name, sql] of Object.entries(files)) await writeFile(path.join(dir, name), sql)
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected the promise to reject')
}

async function suite(t: Test, backend: Backend): Promise<void> {
  const db = await backend.open()
  let mainClosed = false
  t.teardown(async () => {
    if (!mainClosed) await db.close()
  })

  await t.test('kind and ping', async (t) => {
    t.equal(db.kind, backend.kind)
    t.equal(await db.ping(), true)
  })

  // First, so that on a fresh database both runners also race to create schema_migrations.
  await t.test('concurrent migrate applies each file once', async (t) => {
    const dir = await tempDir(t, 'conc')
    const ids = ['0001_conc_a', '0002_conc_b', '0003_conc_c', '0004_conc_d', '0005_conc_e']
    // No IF NOT EXISTS: a second application of 0001 would fail.
    await writeMigrations(dir, {
      '0001_conc_a.sql': "create table conc_log (name text not null);\ninsert into conc_log values ('a');",
      '0002_conc_b.sql': "insert into conc_log values ('b');",
      '0003_conc_c.sql': "insert into conc_log values ('c');",
      '0004_conc_d.sql': "insert into conc_log values ('d');",
      '0005_conc_e.sql': "select pg_sleep(0.05); insert into conc_log values ('e');",
    })
    const handles = backend.multiHandle ? [db, await backend.open(), await backend.open()] : [db, db, db]
    try {
      const results = await Promise.all(handles.map((h) => migrate(h, dir)))
      t.strictSame(results.flat().sort(), ids, 'every file applied by exactly one runner')
      const rows = await db.query<{ name: string }>('select name from conc_log order by name')
      t.strictSame(
        rows.map((r) => r.name),
        ['a', 'b', 'c', 'd', 'e'],
      )
      const recorded = await db.query<{ n: bigint }>("select count(*) as n from schema_migrations where id like '%_conc_%'")
      t.equal(recorded[0]?.n, 5n)
    } finally {
      for (const h of new Set(handles)) if (h !== db) await h.close()
    }
  })

  await t.test('int8 / bigint round trip', async (t) => {
    await db.exec('create table t_int8 (id int4 primary key, v int8 not null)')
    await db.query('insert into t_int8 (id, v) values ($1, $2), ($3, $4), ($5, $6), ($7, $8)', [1, BIG, 2, 5n, 3, INT8_MIN, 4, INT8_MAX])
    await db.query('insert into t_int8 (id, v) values ($1, $2)', [5, 42]) // JS number into int8
    const rows = await db.query<{ id: number; v: bigint }>('select id, v from t_int8 order by id')
    t.strictSame(
      rows.map((r) => r.v),
      [BIG, 5n, INT8_MIN, INT8_MAX, 42n],
    )
    t.ok(
      rows.every((r) => typeof r.v === 'bigint'),
      'small int8 values are bigint too, never number',
    )
    t.ok(
      rows.every((r) => typeof r.id === 'number'),
      'int4 is number',
    )
    const above = await db.query<{ id: number }>('select id from t_int8 where v > $1 order by id', [BIG - 1n])
    t.strictSame(
      above.map((r) => r.id),
      [1, 4],
      'bigint params compare exactly',
    )
    const [calc] = await db.query<{ x: bigint; y: bigint }>('select $1::int8 + 1 as x, $2::bigint as y', [BIG, -1n])
    t.equal(calc?.x, BIG + 1n)
    t.equal(calc?.y, -1n)
    const [agg] = await db.query<{ n: bigint; s: string; m: bigint; si: bigint }>(
      'select count(*) as n, sum(v) as s, max(v) as m, sum(v)::int8 as si from t_int8 where id in (1, 2, 5)',
    )
    t.equal(agg?.n, 5n - 2n, 'count(*) is int8 → bigint')
    t.equal(agg?.s, (BIG + 5n + 42n).toString(), 'sum(int8) is numeric → string')
    t.equal(agg?.m, BIG)
    t.equal(agg?.si, BIG + 47n, 'sum(int8)::int8 → bigint')
  })

  await t.test('other scalar types', async (t) => {
    await db.exec(`create table t_scalar (
      id int4 primary key, small int2, dec numeric(20, 4), flag bool, bytes bytea, label text,
      ratio float8, day date, uid uuid, chars varchar(10)
    )`)
    const bytes = Uint8Array.from([0, 1, 127, 128, 255, 92, 34])
    await db.query('insert into t_scalar values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', [
      1,
      7,
      '12.34',
      true,
      bytes,
      'héllo "world" \\ ✓',
      0.25,
      '2024-02-29',
      '6f1c1a44-3e2b-4c1e-9a7e-0a1b2c3d4e5f',
      'abc',
    ])
    await db.query('insert into t_scalar (id, flag, bytes, dec) values ($1, $2, $3, $4)', [2, false, Buffer.from('hi'), 123456789012345n])
    await db.query('insert into t_scalar (id) values ($1)', [3])
    const rows = await db.query('select * from t_scalar order by id')
    const [r1, r2, r3] = rows
    t.equal(r1?.small, 7)
    t.equal(r1?.dec, '12.3400', 'numeric → exact string')
    t.equal(r1?.flag, true)
    t.ok(r1?.bytes instanceof Uint8Array, 'bytea → Uint8Array (Buffer)')
    t.strictSame([...(r1?.bytes as Uint8Array)], [...bytes])
    t.equal(r1?.label, 'héllo "world" \\ ✓')
    t.equal(r1?.ratio, 0.25)
    t.equal(r1?.day, '2024-02-29', 'date → YYYY-MM-DD string')
    t.equal(r1?.uid, '6f1c1a44-3e2b-4c1e-9a7e-0a1b2c3d4e5f')
    t.equal(r1?.chars, 'abc')
    t.equal(r2?.flag, false)
    t.equal(Buffer.from(r2?.bytes as Uint8Array).toString(), 'hi')
    t.equal(r2?.dec, '123456789012345.0000', 'bigint param into numeric')
    t.equal(r3?.flag, null)
    t.equal(r3?.bytes, null)
    t.equal(r3?.label, null)
    const [misc] = await db.query('select 1.5::float4 as f4, 2::int2 as i2, $1::bool as b, null::int8 as n', ['false'])
    t.strictSame(misc, { f4: 1.5, i2: 2, b: false, n: null })
  })

  await t.test('timestamptz → Date', async (t) => {
    await db.exec('create table t_ts (id int4 primary key, at timestamptz not null, naive timestamp)')
    const at = new Date('2024-05-06T07:08:09.123Z')
    await db.query('insert into t_ts values ($1, $2, $3)', [1, at, '2024-05-06 07:08:09.123'])
    const [row] = await db.query<{ at: Date; naive: Date }>('select at, naive from t_ts where id = 1')
    t.ok(row?.at instanceof Date)
    t.equal(row?.at.getTime(), at.getTime())
    t.ok(row?.naive instanceof Date)
    t.equal(row?.naive.getTime(), at.getTime(), 'timestamp without time zone is read as UTC')

    const [now] = await db.query<{ now: Date }>('select now() as now')
    t.ok(now?.now instanceof Date)
    t.ok(Math.abs((now?.now.getTime() ?? 0) - Date.now()) < 60_000, 'now() is close to the local clock')

    const [micro] = await db.query<{ x: Date }>("select '2024-01-02 03:04:05.123999+00'::timestamptz as x")
    t.equal(micro?.x.toISOString(), '2024-01-02T03:04:05.123Z', 'microseconds are truncated')

    // Server renders timestamptz in the session time zone; the parser must honour every offset form.
    const cases: [zone: string, iso: string][] = [
      ['Asia/Kolkata', '2024-06-01T12:00:00.500Z'], // +05:30
      ['America/St_Johns', '2024-01-15T23:59:59.000Z'], // -03:30
      ['Pacific/Kiritimati', '2024-06-01T00:00:00.000Z'], // +14
      ['Europe/Amsterdam', '1850-01-01T00:00:00.000Z'], // LMT offset with seconds
      ['America/Los_Angeles', '0005-06-01T00:00:00.000Z'], // 4-digit small year, LMT
    ]
    await db.transaction(async (tx) => {
      for (const [zone, iso] of cases) {
        await tx.query("select set_config('TimeZone', $1, true)", [zone])
        const [r] = await tx.query<{ x: Date; text: string }>('select $1::timestamptz as x, $1::timestamptz::text as text', [new Date(iso)])
        t.equal(r?.x.toISOString(), iso, `${zone}: ${r?.text}`)
      }
    })
    const [special] = await db.query<{ bc: Date; inf: unknown; ninf: unknown; arr: unknown[] }>(
      "select '0044-03-15 12:00:00+00 BC'::timestamptz as bc, 'infinity'::timestamptz as inf, '-infinity'::timestamptz as ninf, array[$1::timestamptz, null] as arr",
      [at],
    )
    t.equal(special?.bc.getUTCFullYear(), -43, '44 BC is astronomical year -43')
    t.equal(special?.inf, Infinity)
    t.equal(special?.ninf, -Infinity)
    t.strictSame(special?.arr, [at, null])
  })

  await t.test('json and jsonb', async (t) => {
    await db.exec('create table t_json (id int4 primary key, doc jsonb, raw json)')
    await db.query('insert into t_json values ($1, $2, $3)', [1, { a: 1, nested: { list: [1, 'x', null, true] }, amount: BIG }, { z: true }])
    await db.query('insert into t_json (id, doc) values ($1, $2)', [2, toJson([1, 2, 3])])
    await db.query('insert into t_json (id, doc) values ($1, $2)', [3, '"just a string"'])
    await db.query('insert into t_json (id, doc, raw) values ($1, $2, $3)', [4, null, 'null'])
    const rows = await db.query<{ id: number; doc: unknown; raw: unknown }>('select id, doc, raw from t_json order by id')
    t.strictSame(rows[0]?.doc, { a: 1, amount: '9007199254740993', nested: { list: [1, 'x', null, true] } }, 'bigint inside JSON → string')
    t.strictSame(rows[0]?.raw, { z: true })
    t.strictSame(rows[1]?.doc, [1, 2, 3], 'JSON array via toJson()')
    t.equal(rows[2]?.doc, 'just a string')
    t.equal(rows[3]?.doc, null, 'SQL NULL')
    t.equal(rows[3]?.raw, null, "JSON 'null' also parses to null")
    const [picked] = await db.query<{ amount: string; n: number }>("select doc->>'amount' as amount, jsonb_array_length(doc->'nested'->'list') as n from t_json where id = 1")
    t.strictSame(picked, { amount: '9007199254740993', n: 4 })
    const [arr] = await db.query<{ docs: unknown[] }>('select array_agg(doc order by id) as docs from t_json where id < 3')
    t.strictSame(arr?.docs, [rows[0]?.doc, [1, 2, 3]], 'jsonb[]')
  })

  await t.test('arrays', async (t) => {
    const texts = ['a', 'b,c', 'q"uote', 'back\\slash', null, '', 'NULL', '{braces}', ' spaced ']
    const [r] = await db.query<{ ints: unknown; texts: unknown; grid: unknown; hit: boolean; empty: unknown }>(
      'select $1::int8[] as ints, $2::text[] as texts, array[[1, 2], [3, 4]]::int4[] as grid, $3::int8 = any($1::int8[]) as hit, $4::int4[] as empty',
      [[1n, BIG, null], texts, BIG, []],
    )
    t.strictSame(r?.ints, [1n, BIG, null])
    t.strictSame(r?.texts, texts)
    t.strictSame(r?.grid, [
      [1, 2],
      [3, 4],
    ])
    t.equal(r?.hit, true)
    t.strictSame(r?.empty, [])
  })

  await t.test('errors surface the SQLSTATE', async (t) => {
    await db.exec('create table t_uniq (id int4 primary key, email text not null constraint t_uniq_email_key unique)')
    await db.query('insert into t_uniq values ($1, $2)', [1, 'a@example.com'])
    const err = await rejection(db.query('insert into t_uniq values ($1, $2)', [2, 'a@example.com']))
    t.ok(isUniqueViolation(err))
    t.ok(err instanceof DbError)
    const e = err as DbError
    t.equal(e.code, '23505')
    t.equal(e.constraint, 't_uniq_email_key')
    t.equal(e.table, 't_uniq')
    t.match(e.message, /duplicate key value violates unique constraint/)
    t.match(e.detail, /a@example\.com/)

    const inTx = await rejection(db.transaction((tx) => tx.query('insert into t_uniq values (1, $1)', ['b@example.com'])))
    t.ok(isUniqueViolation(inTx), 'same inside a transaction')

    const notNull = await rejection(db.query('insert into t_uniq (id) values (3)'))
    t.equal(pgErrorCode(notNull), '23502')
    t.notOk(isUniqueViolation(notNull))
    t.equal(pgErrorCode(await rejection(db.query('selec 1'))), '42601')
    t.equal(pgErrorCode(await rejection(db.query('select 1/0'))), '22012')
    t.equal(pgErrorCode(await rejection(db.query('select * from no_such_table'))), '42P01')
    t.equal(pgErrorCode(await rejection(db.query('select 1; select 2'))), '42601', 'query() takes a single statement on both adapters')
    t.notOk(isUniqueViolation(new Error('x')))
    t.notOk(isUniqueViolation(null))
    t.notOk(isUniqueViolation({ code: 'ECONNREFUSED' }))
  })

  await t.test('transactions commit and roll back', async (t) => {
    await db.exec('create table t_tx (id int4 primary key, v text)')
    const seen = await db.transaction(async (tx) => {
      await tx.query('insert into t_tx values (1, $1)', ['one'])
      await tx.exec("insert into t_tx values (10, 'ten'); insert into t_tx values (11, 'eleven')")
      return (await tx.query('select count(*) as n from t_tx')).length
    })
    t.equal(seen, 1, 'returns the callback value')

    const boom = new Error('boom')
    t.equal(
      await rejection(
        db.transaction(async (tx) => {
          await tx.query('insert into t_tx values (2, $1)', ['two'])
          throw boom
        }),
      ),
      boom,
      'rethrows the callback error unchanged',
    )

    const dup = await rejection(
      db.transaction(async (tx) => {
        await tx.query('insert into t_tx values (3, $1)', ['three'])
        await tx.query('insert into t_tx values (1, $1)', ['dup'])
      }),
    )
    t.ok(isUniqueViolation(dup))

    const swallowed = await rejection(
      db.transaction(async (tx) => {
        await tx.query('insert into t_tx values (4, $1)', ['four'])
        await tx.query('select * from no_such_table').catch(() => undefined)
      }),
    )
    t.equal(pgErrorCode(swallowed), '25P02', 'COMMIT of an aborted transaction rejects')

    const ids = await db.query<{ id: number }>('select id from t_tx order by id')
    t.strictSame(
      ids.map((r) => r.id),
      [1, 10, 11],
      'only the committed transaction left rows',
    )

    await t.rejects(
      db.transaction(async () => db.query('select 1')),
      /use the tx argument/,
      'db.query inside a transaction callback is refused (it would deadlock PGlite)',
    )
    await t.rejects(
      db.transaction(async () => db.transaction(async () => 1)),
      /Nested/,
    )
    let leaked: Queryable | undefined
    await db.transaction(async (tx) => {
      leaked = tx
    })
    await t.rejects(
      async () => {
        await leaked?.query('select 1')
      },
      /closed/,
      'tx is unusable after the transaction',
    )
    t.equal(await db.ping(), true, 'still healthy')
  })

  await t.test('concurrent transactions do not interleave', async (t) => {
    await db.exec('create table t_counter (id int4 primary key, n int8 not null)')
    await db.query('insert into t_counter values (1, 0)')
    const increments = Array.from({ length: 20 }, () =>
      db.transaction(async (tx) => {
        const [row] = await tx.query<{ n: bigint }>('select n from t_counter where id = 1 for update')
        await new Promise((resolve) => setImmediate(resolve)) // give others a chance to interleave
        await tx.query('update t_counter set n = $1 where id = 1', [(row?.n ?? 0n) + 1n])
      }),
    )
    // Plain queries alongside open transactions must neither fail nor deadlock.
    const plain = Array.from({ length: 5 }, () => db.query('select n from t_counter'))
    await Promise.all([...increments, ...plain])
    const [row] = await db.query<{ n: bigint }>('select n from t_counter where id = 1')
    t.equal(row?.n, 20n)
  })

  await t.test('migrate applies files in order, once', async (t) => {
    const dir = await tempDir(t, 'mig')
    await writeMigrations(dir, {
      '0002_mig_b.sql': "insert into mig_log (name) values ('b');",
      '0001_mig_a.sql': 'create table mig_log (seq serial primary key, name text not null);\n' + "insert into mig_log (name) values ('a');",
      '0010_mig_c.sql': "-- several statements\ninsert into mig_log (name) values ('c1');\ninsert into mig_log (name) values ('c2');",
      'README.md': 'not a migration',
      '0003_notes.txt': 'not a migration either',
    })
    t.strictSame(await migrate(db, dir), ['0001_mig_a', '0002_mig_b', '0010_mig_c'])
    t.strictSame(await migrate(db, dir), [], 'second run is a no-op')
    const names = async (): Promise<string[]> => (await db.query<{ name: string }>('select name from mig_log order by seq')).map((r) => r.name)
    t.strictSame(await names(), ['a', 'b', 'c1', 'c2'])
    const recorded = await db.query<{ id: string; applied_at: Date }>("select id, applied_at from schema_migrations where id like '%_mig_%' order by id")
    t.strictSame(
      recorded.map((r) => r.id),
      ['0001_mig_a', '0002_mig_b', '0010_mig_c'],
    )
    t.ok(recorded.every((r) => r.applied_at instanceof Date))

    await writeMigrations(dir, { '0011_mig_bad.sql': "insert into mig_log (name) values ('d');\nselect * from no_such_table;" })
    const err = await rejection(migrate(db, dir))
    t.equal(pgErrorCode(err), '42P01')
    t.match((err as Error).message, /0011_mig_bad/)
    t.strictSame(await names(), ['a', 'b', 'c1', 'c2'], 'failed migration rolled back')
    await writeMigrations(dir, { '0011_mig_bad.sql': "insert into mig_log (name) values ('d');" })
    t.strictSame(await migrate(db, dir), ['0011_mig_bad'], 'applied once fixed')
    t.strictSame(await names(), ['a', 'b', 'c1', 'c2', 'd'])

    const dupDir = await tempDir(t, 'dup')
    await writeMigrations(dupDir, { '0001_x.sql': 'select 1;', '0001_y.sql': 'select 1;' })
    await t.rejects(migrate(db, dupDir), /share number 1/)
    const badNameDir = await tempDir(t, 'badname')
    await writeMigrations(badNameDir, { '0001_ok.sql': 'select 1;', '2_short.sql': 'select 1;' })
    await t.rejects(migrate(db, badNameDir), /2_short\.sql/, 'a .sql file with a bad name is an error, not skipped')
  })

  await t.test('platform migrations (src/migrations)', async (t) => {
    const applied = await migrate(db)
    t.ok(applied.includes('0001_platform'))
    t.strictSame(await migrate(db), [], 'idempotent')
    await db.query(
      `insert into service_meta (key, value) values ($1, $2)
       on conflict (key) do update set value = excluded.value, updated_at = now()`,
      ['instance', { id: 'i-1', startedAt: new Date(0), epoch: 1n }],
    )
    const [meta] = await db.query<{ value: unknown; updated_at: Date }>('select value, updated_at from service_meta where key = $1', ['instance'])
    t.strictSame(meta?.value, { id: 'i-1', startedAt: '1970-01-01T00:00:00.000Z', epoch: '1' })
    t.ok(meta?.updated_at instanceof Date)
  })

  await t.test('close', async (t) => {
    await db.close()
    mainClosed = true
    t.equal(await db.ping(), false)
    await t.rejects(db.query('select 1'))
    await db.close() // idempotent
  })

  if (backend.persistent) {
    await t.test('data survives close and reopen', async (t) => {
      const first = await backend.open()
      if (!backend.multiHandle) await t.rejects(backend.open(), /already open/, 'one handle per directory')
      await first.transaction(async (tx) => {
        await tx.query('insert into service_meta (key, value) values ($1, $2)', ['persist', { n: BIG }])
      })
      await first.query('insert into t_int8 (id, v) values ($1, $2)', [99, INT8_MAX])
      await first.close()

      const second = await backend.open()
      try {
        t.strictSame(await migrate(second), [], 'nothing to migrate after reopen')
        const [meta] = await second.query('select value from service_meta where key = $1', ['persist'])
        t.strictSame(meta?.value, { n: BIG.toString() })
        const [big] = await second.query('select v from t_int8 where id = 99')
        t.equal(big?.v, INT8_MAX)
        const [count] = await second.query<{ n: bigint }>('select count(*) as n from mig_log')
        t.equal(count?.n, 5n)
      } finally {
        await second.close()
      }
    })
  }
}

t.test('pglite (memory://)', async (t) => {
  await suite(t, {
    name: 'pglite-memory',
    kind: 'pglite',
    open: () => openDb({ kind: 'pglite', dataDir: 'memory://' }),
    persistent: false,
    multiHandle: false,
  })
})

t.test('pglite (directory)', async (t) => {
  const root = await tempDir(t, 'pglite')
  const dataDir = path.join(root, 'nested', 'pgdata') // parent does not exist yet
  await suite(t, {
    name: 'pglite-dir',
    kind: 'pglite',
    open: () => openDb({ kind: 'pglite', dataDir }),
    persistent: true,
    multiHandle: false,
  })
})

t.test('postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (!url) return
  await suite(t, {
    name: 'postgres',
    kind: 'postgres',
    open: () => openDb({ kind: 'postgres', url, poolMax: 5 }),
    persistent: true,
    multiHandle: true,
  })
})
