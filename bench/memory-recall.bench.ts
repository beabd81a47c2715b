// Memory recall at 10,000 and 100,000 memories of ONE owner (384-d vectors) on real Postgres, through
// the real path (createMemoryService → recall: owner keys, the recall cache's version check, blind
// query terms, BM25 + vectors fused by RRF, content rows read and decrypted), against peers on THE
// SAME data in the same run:
//   - pgvector in PGlite (plaintext vectors): exact (`ORDER BY embedding <=> $1 LIMIT 10`, no index)
//     and HNSW (default m / ef_construction; hnsw.ef_search 40 and 100);
//   - Postgres full-text search (plaintext): tsvector GIN + websearch_to_tsquery (the query's words
//     OR'd: BM25 is disjunctive too) + ts_rank_cd LIMIT 10, in the same Postgres.
// All systems answer each query in turn (the order rotating), so a change of machine load hits all
// alike; pgvector's exact scan, too slow for that, is measured alone. Also measured: remember
// throughput through the service's write path (prepare + rememberOnDeposit: seal, seq, ledger), the
// cold first recall, and the index's size (index.bytes(), heap, and the RSS of a child process that
// only loads it). Corpus, embedder and queries: bench/memory-corpus.ts.
//   npm run bench:memory    (BENCH_SIZES=10000,100000 BENCH_QUERIES=200 BENCH_ROUNDS=2 BENCH_WRITES=5000;
//                            Postgres at BENCH_DATABASE_URL / TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test)
// pgvector for PGlite is the package @electric-sql/pglite-pgvector, which this repo does not depend
// on: BENCH_PGVECTOR_MODULE names its directory (docs/BENCHMARKS.md "Memory"); without it the
// pgvector rows are skipped with the reason.
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { PGlite } from '@electric-sql/pglite'
import { staticKeyRing } from '../src/memory/crypto/keyring.ts'
import { createOwnerKeyStore } from '../src/memory/crypto/owner-keys.ts'
import { queryTerms } from '../src/memory/records.ts'
import { exactTopK } from '../src/memory/search/vectors.ts'
import type { Embedder } from '../src/memory/types.ts'
import { type Db, openDb } from '../src/platform/db/index.ts'
import { migrate } from '../src/platform/db/migrate.ts'
import {
  benchService,
  bulkLoad,
  buildCorpus,
  rememberAll,
  throwaway,
  type Corpus,
  depositFor,
  DIMS,
  log,
  mib,
  percentile,
  type Query,
  syntheticEmbedder,
  timeEach,
} from './memory-corpus.ts'

const SIZES = (process.env.BENCH_SIZES ?? '10000,100000').split(',').map(Number)
const QUERIES = Number(process.env.BENCH_QUERIES ?? 200)
const WARMUP = 30
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2)
const WRITES = Number(process.env.BENCH_WRITES ?? 5000)
const CONCURRENCY = 8
const K = 10
const OWNER = `0x${'b3'.repeat(20)}`

interface Row {
  system: string
  n: number
  p50: number
  p95: number
  queries: number
  vectorRecall?: number
  overlap?: number
}
const rows: Row[] = []
const facts: string[] = []
/** Service-assigned record id → corpus doc id (records written through the service get fresh ids). */
const alias = new Map<string, string>()
const docId = (id: string): string => alias.get(id) ?? id

function rowOf(system: string, n: number, samples: number[], extra: Partial<Row> = {}): Row {
  const row = { system, n, p50: percentile(samples, 50), p95: percentile(samples, 95), queries: samples.length, ...extra }
  rows.push(row)
  log(`  ${system} @ ${n}: p50 ${row.p50.toFixed(2)} ms, p95 ${row.p95.toFixed(2)} ms (${samples.length} queries)`)
  return row
}
const load = (): string => os.loadavg()[0]!.toFixed(2)
const gc = (): void => global.gc?.()

/** Exact cosine top-10 ids over the first n docs' float vectors (ground truth). */
function exactIds(corpus: Corpus, n: number, q: Query): string[] {
  return [...exactTopK(corpus.matrix.subarray(0, n * DIMS), DIMS, q.vector, K).positions].map((p) => corpus.docs[p]!.id)
}
function overlapOf(got: string[][], truth: string[][]): number {
  let hits = 0
  for (let i = 0; i < got.length; i++) hits += got[i]!.filter((id) => truth[i]!.includes(id)).length
  return hits / (truth.length * K)
}

// ------------------------------------------------------------------ ours

interface System {
  name: string
  /** Untimed, before each call (a session setting). */
  before?: () => Promise<unknown>
  /** One query; the corpus ids it returned, best first. */
  run: (q: Query) => Promise<string[]>
  /** Report the share of exact cosine's top 10 it returns as its vector recall@10. */
  vector?: boolean
}

/** A fresh service (cold cache) loads the whole index on its first recall: timed, with the memory it took. */
async function prepareOurs(
  db: Db,
  keys: ReturnType<typeof createOwnerKeyStore>,
  embedder: Embedder,
  corpus: Corpus,
  n: number,
): Promise<{ systems: System[]; report: () => void }> {
  gc()
  const before = process.memoryUsage()
  let dbMs = 0 // the recall's statements, timed by a wrapper of the Db
  const timed: Db = {
    kind: db.kind,
    exec: (sql) => db.exec(sql),
    transaction: (fn) => db.transaction(fn),
    ping: () => db.ping(),
    close: () => db.close(),
    async query(sql, params) {
      const started = performance.now()
      try {
        return await db.query(sql, params)
      } finally {
        dbMs += performance.now() - started
      }
    },
  } as Db
  const svc = benchService(timed, keys, embedder, 2048 * 1024 * 1024)
  const coldStarted = performance.now()
  await svc.recall(OWNER, { query: corpus.queries[0]!.text, limit: K })
  const cold = performance.now() - coldStarted
  gc()
  const after = process.memoryUsage()
  const { bytes } = svc.cache.stats()
  const heap = after.heapUsed + after.arrayBuffers - (before.heapUsed + before.arrayBuffers)
  facts.push(
    `n = ${n}: cold first recall (fresh service: whole index loaded, decrypted, built) ${cold.toFixed(0)} ms; index.bytes() ${mib(bytes)} ` +
      `(${mib((bytes * 100_000) / n)} per 100k); heap + array buffers after GC +${mib(heap)}`,
  )
  log(`  ${facts.at(-1)}`)
  const ownerKeys = (await keys.keysOf(db, OWNER))!
  const index = (await svc.cache.indexOf(OWNER, ownerKeys))!
  const terms = new Map(corpus.queries.map((q) => [q.text, queryTerms(ownerKeys, q.text)]))
  const ids = (hits: { id: string }[]) => hits.map((h) => docId(h.id))
  const dbSamples: number[] = []
  const report = () => void rowOf('ours: of which its SQL (one statement: content rows + owner version)', n, dbSamples.slice(WARMUP))
  const systems: System[] = [
    {
      name: 'ours: service.recall (hybrid, Postgres, decrypt)',
      async run(q) {
        dbMs = 0
        const result = await svc.recall(OWNER, { query: q.text, limit: K })
        dbSamples.push(dbMs)
        return ids(result.results)
      },
    },
    { name: 'ours: index.search only (in process)', run: async (q) => ids(index.search({ terms: terms.get(q.text)!, vector: q.vector, limit: K })) },
    { name: 'ours: vector half only', vector: true, run: async (q) => ids(index.search({ terms: [], vector: q.vector, limit: K })) },
    { name: 'ours: BM25 half only', run: async (q) => ids(index.search({ terms: terms.get(q.text)!, vector: null, limit: K })) },
    {
      name: 'ours: index.bytes() (counted once per index load, not per recall)',
      async run() {
        index.bytes()
        return []
      },
    },
  ]
  return { systems, report }
}

// ------------------------------------------------------------------ peers

async function prepareFts(db: Db, corpus: Corpus, from: number, n: number): Promise<System> {
  if (from === 0) {
    await db.exec(`create table fts_peer (id uuid primary key, content text not null, tsv tsvector generated always as (to_tsvector('english', content)) stored);
                   create index fts_peer_tsv on fts_peer using gin (tsv)`)
  }
  for (let start = from; start < n; start += 1000) {
    const batch = corpus.docs.slice(start, Math.min(n, start + 1000))
    await db.query(`insert into fts_peer (id, content) select * from unnest($1::uuid[], $2::text[])`, [batch.map((d) => d.id), batch.map((d) => d.text)])
  }
  await db.exec('vacuum analyze fts_peer')
  const sql = `select id, content, ts_rank_cd(tsv, q) as rank from fts_peer, websearch_to_tsquery('english', $1) q where tsv @@ q order by rank desc limit ${K}`
  return {
    name: 'Postgres FTS: GIN + websearch_to_tsquery (OR) + ts_rank_cd',
    run: async (q) => (await db.query<{ id: string }>(sql, [q.words.join(' or ')])).map((r) => r.id),
  }
}

async function pgvectorExtension(): Promise<unknown> {
  const where = process.env.BENCH_PGVECTOR_MODULE
  const specifier = where ? pathToFileURL(path.join(path.resolve(where), 'dist', 'index.js')).href : '@electric-sql/pglite-pgvector'
  try {
    return ((await import(specifier)) as { vector: unknown }).vector
  } catch (err) {
    const reason = `pgvector peer skipped: cannot import ${specifier} (${(err as Error).message.split('\n')[0]}); see docs/BENCHMARKS.md "Memory" for BENCH_PGVECTOR_MODULE`
    facts.push(reason)
    log(reason)
    return undefined
  }
}

const literal = (v: Float32Array): string => `[${Array.from(v).join(',')}]`

/** Loads rows up to n, measures exact search (no index, sequentially: it is slow), builds HNSW. */
async function preparePgvector(pg: PGlite, corpus: Corpus, from: number, n: number, measured: Query[], truth: string[][]): Promise<System[]> {
  if (from === 0) await pg.exec(`create table peer (id uuid primary key, content text not null, embedding vector(${DIMS}) not null)`)
  await pg.exec('drop index if exists peer_hnsw')
  const loadStarted = performance.now()
  for (let start = from; start < n; start += 500) {
    const batch = corpus.docs.slice(start, Math.min(n, start + 500))
    const params: unknown[] = []
    const values = batch.map((doc, i) => {
      params.push(doc.id, doc.text, literal(corpus.matrix.subarray((start + i) * DIMS, (start + i + 1) * DIMS)))
      return `($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3}::vector)`
    })
    await pg.query(`insert into peer (id, content, embedding) values ${values.join(', ')}`, params)
  }
  await pg.exec('analyze peer')
  log(`  pgvector: ${n - from} rows loaded in ${((performance.now() - loadStarted) / 1000).toFixed(1)} s`)
  const sql = `select id, content from peer order by embedding <=> $1::vector limit ${K}`
  const vectors = new Map(corpus.queries.map((q) => [q.text, literal(q.vector)]))
  const search = async (q: Query) => (await pg.query<{ id: string }>(sql, [vectors.get(q.text)])).rows.map((r) => r.id)
  // Exact (no index yet): a full scan per query; 40 samples at 100k keep the run short.
  const exactCount = n > 20_000 ? 40 : measured.length
  await search(measured[0]!)
  const got: string[][] = []
  const exact = await timeEach(measured.slice(0, exactCount), async (q) => got.push(await search(q)))
  const agree = overlapOf(got, truth.slice(0, exactCount))
  rowOf('pgvector (PGlite): exact, no index (measured alone)', n, exact, { vectorRecall: agree, overlap: agree })
  await pg.exec("set maintenance_work_mem = '1GB'")
  const buildStarted = performance.now()
  await pg.exec('create index peer_hnsw on peer using hnsw (embedding vector_cosine_ops)')
  const build = (performance.now() - buildStarted) / 1000
  const sizes = (await pg.query<{ heap: number; hnsw: number }>(`select pg_table_size('peer')::float8 as heap, pg_relation_size('peer_hnsw')::float8 as hnsw`)).rows[0]!
  facts.push(`n = ${n}: pgvector HNSW build (m 16, ef_construction 64, one thread) ${build.toFixed(1)} s; table ${mib(sizes.heap)} (plaintext), HNSW index ${mib(sizes.hnsw)}`)
  log(`  ${facts.at(-1)}`)
  const plan = (await pg.query<{ 'QUERY PLAN': string }>(`explain ${sql.replace('$1::vector', `'${vectors.get(measured[0]!.text)}'::vector`)}`)).rows
  if (!plan.some((r) => r['QUERY PLAN'].includes('peer_hnsw'))) throw new Error('the pgvector query does not use the HNSW index')
  return [40, 100].map((ef) => ({ name: `pgvector (PGlite): HNSW, ef_search ${ef}`, vector: true, before: () => pg.exec(`set hnsw.ef_search = ${ef}`), run: search }))
}

/** Every system on every query, interleaved (the order rotates per query), so load changes hit all alike. */
async function interleaved(n: number, systems: System[], warmup: Query[], measured: Query[], truth: string[][]): Promise<void> {
  for (const system of systems) {
    for (const q of warmup) {
      await system.before?.()
      await system.run(q)
    }
  }
  const samples = systems.map((): number[] => [])
  const got = systems.map((): string[][] => [])
  for (let round = 0; round < ROUNDS; round++) {
    for (const [qi, q] of measured.entries()) {
      for (let j = 0; j < systems.length; j++) {
        const si = (j + qi) % systems.length
        const system = systems[si]!
        await system.before?.()
        const started = performance.now()
        const ids = await system.run(q)
        samples[si]!.push(performance.now() - started)
        if (round === 0) got[si]!.push(ids)
      }
    }
  }
  const vectorHalf = systems.findIndex((s) => s.name === 'ours: vector half only')
  systems.forEach((system, si) => {
    const recall = system.vector ? overlapOf(got[si]!, truth) : si === 0 && vectorHalf >= 0 ? overlapOf(got[vectorHalf]!, truth) : undefined
    const overlap = got[si]!.some((ids) => ids.length > 0) ? overlapOf(got[si]!, truth) : undefined
    rowOf(system.name, n, samples[si]!, { vectorRecall: recall, overlap })
  })
}

// ------------------------------------------------------------------ RSS of the index, in a process holding nothing else

/** Runs this file as a child that loads the owner's index cold and reports its RSS before and after. */
async function rssProbe(url: string, kek: Buffer, n: number): Promise<void> {
  const child = spawnSync(process.execPath, ['--expose-gc', fileURLToPath(import.meta.url)], {
    env: { ...process.env, BENCH_PROBE: JSON.stringify({ url, kek: kek.toString('hex'), owner: OWNER }) },
    encoding: 'utf8',
  })
  const probe = JSON.parse(child.stdout.trim().split('\n').at(-1) || '{}') as { rss?: number[]; ms?: number; bytes?: number }
  if (probe.rss === undefined) throw new Error(`rss probe failed: ${child.stderr}`)
  const [before, after] = probe.rss as [number, number]
  facts.push(
    `n = ${n}: a process that only loads the index (cold, ${probe.ms!.toFixed(0)} ms): RSS ${mib(before)} → ${mib(after)} after GC, ` +
      `+${mib(after - before)} (index.bytes() ${mib(probe.bytes!)})`,
  )
  log(`  ${facts.at(-1)}`)
}

async function probeChild(spec: { url: string; kek: string; owner: string }): Promise<void> {
  const db = await openDb({ kind: 'postgres', url: spec.url, poolMax: 2 })
  const keys = createOwnerKeyStore({ ring: staticKeyRing('bench', { bench: Buffer.from(spec.kek, 'hex') }) })
  const embedder: Embedder = { id: 'bench-synthetic-384', mode: 'local-model', dims: DIMS, description: 'probe', embed: async () => ({ vectors: [] }) }
  const svc = benchService(db, keys, embedder, 2048 * 1024 * 1024)
  const ownerKeys = (await keys.keysOf(db, spec.owner))!
  await db.query('select 1')
  gc()
  const before = process.memoryUsage().rss
  const started = performance.now()
  await svc.cache.indexOf(spec.owner, ownerKeys)
  const ms = performance.now() - started
  gc()
  gc()
  console.log(JSON.stringify({ rss: [before, process.memoryUsage().rss], ms, bytes: svc.cache.stats().bytes }))
  await db.close()
}

// ------------------------------------------------------------------ the run

async function main(): Promise<void> {
  const maxN = Math.max(...SIZES)
  log(`memory recall bench: node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, load ${load()}; sizes ${SIZES.join(', ')}, ${QUERIES} queries`)
  const corpus = buildCorpus({ size: maxN, queries: 1 + WARMUP + QUERIES })
  log(`corpus: ${maxN} docs, ${corpus.queries.length} queries built`)
  const embedder = syntheticEmbedder(corpus)
  const { url, drop } = await throwaway()
  const db = await openDb({ kind: 'postgres', url, poolMax: 10 })
  let pg: PGlite | undefined
  try {
    await migrate(db)
    const kek = randomBytes(32)
    const keys = createOwnerKeyStore({ ring: staticKeyRing('bench', { bench: kek }) })
    const writer = benchService(db, keys, embedder, 2048 * 1024 * 1024)
    const others = Array.from(
      { length: CONCURRENCY },
      (_, i) =>
        `0x${String(i + 1)
          .padStart(2, '0')
          .repeat(20)}`,
    )
    for (const owner of [OWNER, ...others]) await depositFor(db, owner, 1_000_000_000_000n)

    // Remember throughput, through the service (the first WRITES docs of the benchmark owner).
    const writes = Math.min(WRITES, maxN)
    log(`remember: ${writes} writes to one owner, concurrency ${CONCURRENCY} (load ${load()})`)
    const one = await rememberAll(writer, [OWNER], corpus.docs.slice(0, writes), CONCURRENCY, alias)
    const spread = await rememberAll(writer, others, corpus.docs.slice(0, Math.min(2000, writes)), CONCURRENCY, alias)
    const first = one.perWrite.slice(0, 500)
    const last = one.perWrite.slice(-500)
    facts.push(
      `remember (prepare + rememberOnDeposit, concurrency ${CONCURRENCY}): one owner ${writes} writes in ${one.seconds.toFixed(1)} s = ${(writes / one.seconds).toFixed(0)} writes/s ` +
        `(latency p50 ${percentile(one.perWrite, 50).toFixed(1)} ms, p95 ${percentile(one.perWrite, 95).toFixed(1)} ms; p50 of the first 500 ${percentile(first, 50).toFixed(1)} ms, of the last 500 ${percentile(last, 50).toFixed(1)} ms); ` +
        `${CONCURRENCY} owners ${spread.perWrite.length} writes = ${(spread.perWrite.length / spread.seconds).toFixed(0)} writes/s (p50 ${percentile(spread.perWrite, 50).toFixed(1)} ms)`,
    )
    log(facts.at(-1)!)

    const ownerKeys = (await keys.keysOf(db, OWNER))!
    const vector = await pgvectorExtension()
    if (vector !== undefined) pg = await PGlite.create('memory://', { extensions: { vector } } as never)
    if (pg !== undefined) {
      await pg.exec('create extension vector')
      const version = (await pg.query<{ v: string; pg: string }>(`select extversion as v, version() as pg from pg_extension where extname = 'vector'`)).rows[0]!
      facts.push(`pgvector ${version.v} in ${version.pg.split(' on ')[0]}`)
    }
    let loaded = writes
    let peersAt = 0
    for (const n of SIZES) {
      const bulkStarted = performance.now()
      await bulkLoad(db, ownerKeys, OWNER, corpus.docs.slice(loaded, n), embedder, corpus)
      const bulk = (performance.now() - bulkStarted) / 1000
      if (n > loaded) facts.push(`bulk load ${loaded}..${n}: ${(n - loaded) / bulk > 0 ? ((n - loaded) / bulk).toFixed(0) : 0} sealed records/s (multi-row inserts of 400)`)
      loaded = Math.max(loaded, n)
      await db.exec('vacuum analyze memory_records')
      log(`n = ${n} (load ${load()})`)
      const warmup = corpus.queries.slice(1, 1 + WARMUP)
      const measured = corpus.queries.slice(1 + WARMUP)
      const truth = measured.map((q) => exactIds(corpus, n, q))
      await rssProbe(url, kek, n)
      const { systems, report } = await prepareOurs(db, keys, embedder, corpus, n)
      systems.push(await prepareFts(db, corpus, peersAt, n))
      if (pg !== undefined) systems.push(...(await preparePgvector(pg, corpus, peersAt, n, measured, truth)))
      peersAt = n
      log(`  measuring ${systems.length} systems, interleaved, ${ROUNDS} × ${measured.length} queries (load ${load()})`)
      await interleaved(n, systems, warmup, measured, truth)
      report()
      log(`  load ${load()}`)
    }
  } finally {
    await pg?.close()
    await db.close()
    await drop()
  }

  // The report.
  const hnsw = (n: number, ef: number) => rows.find((r) => r.n === n && r.system === `pgvector (PGlite): HNSW, ef_search ${ef}`)
  const ours = (n: number) => rows.find((r) => r.n === n && r.system.startsWith('ours: service.recall'))
  const f = (x: number | undefined, digits = 2) => (x === undefined || Number.isNaN(x) ? '–' : x.toFixed(digits))
  console.log(`\n| System | memories | p50 ms | p95 ms | queries | vector recall@10 vs exact cosine | top-10 ∩ exact cosine |`)
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  for (const r of rows) console.log(`| ${r.system} | ${r.n.toLocaleString('en')} | ${f(r.p50)} | ${f(r.p95)} | ${r.queries} | ${f(r.vectorRecall, 3)} | ${f(r.overlap, 3)} |`)
  console.log('')
  for (const n of SIZES) {
    const o = ours(n)
    for (const ef of [40, 100]) {
      const h = hnsw(n, ef)
      if (h && o) console.log(`n = ${n}: ours / pgvector HNSW (ef ${ef}): p50 ${(o.p50 / h.p50).toFixed(2)}×, p95 ${(o.p95 / h.p95).toFixed(2)}×`)
    }
    if (o && n === 100_000)
      console.log(
        `target at 100k (p50 < 10 ms, p95 < 25 ms): p50 ${o.p50.toFixed(2)} ms ${o.p50 < 10 ? 'met' : 'MISSED'}, p95 ${o.p95.toFixed(2)} ms ${o.p95 < 25 ? 'met' : 'MISSED'}`,
      )
  }
  for (const fact of facts) console.log(`- ${fact}`)
  console.log(
    `- load average at the end ${os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' / ')}`,
  )
}

if (process.env.BENCH_PROBE) await probeChild(JSON.parse(process.env.BENCH_PROBE))
else await main()
