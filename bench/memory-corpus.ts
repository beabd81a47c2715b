// The synthetic memory corpus of bench/memory-recall.bench.ts, and what the memory benches share: the
// service as the memory role builds it, deposits, writing the corpus (through the service, or bulk),
// a throw-away Postgres database, percentiles.
//
// Vectors (384 dims, unit length) are not uniform: a few hundred clusters of Zipf-like sizes around
// a direction every text shares (real sentence embeddings have one), each cluster with its own
// low-rank spread (12 directions of decreasing variance) plus isotropic noise of its own size.
// Texts give BM25 work: pseudo-words with Zipf–Mandelbrot frequencies (the head words land in
// a quarter of the records, as "user" does in real memories), a few topic words per cluster, and
// English stopwords in between. Queries sit near held-out documents (drawn like the corpus, never
// stored): the query vector is the held-out vector plus noise (cosine ≈ 0.85), the query text a
// few of its words in a question frame.
// The embedder is a lookup of the vectors the corpus made (mode 'local-model', id
// 'bench-synthetic-384'): embedding costs nothing here, which a real model would add to a recall.
import { findService } from '../src/catalog/registry.ts'
import type { createOwnerKeyStore } from '../src/memory/crypto/owner-keys.ts'
import { countTokens } from '../src/memory/embeddings/tokens.ts'
import { createMemoryService, type MemoryService } from '../src/memory/service.ts'
import { randomBytes } from 'node:crypto'
import { embeddingCostMicros } from '../src/memory/limits.ts'
import { sealRecord } from '../src/memory/records.ts'
import { ensureOwner, lockOwner } from '../src/memory/store.ts'
import type { Embedder, OwnerKeys } from '../src/memory/types.ts'
import { systemClock } from '../src/platform/clock.ts'
import { type Db, openDb, pgErrorCode } from '../src/platform/db/index.ts'
import { createLogger } from '../src/platform/logger.ts'
import { seededRandom } from '../test/helpers/signals.ts'

export const DIMS = 384

export interface Doc {
  id: string
  text: string
  cluster: number
}

export interface Query {
  text: string
  /** The content words taken from the held-out document (FTS builds its OR query from them). */
  words: string[]
  vector: Float32Array
  cluster: number
}

export interface Corpus {
  docs: Doc[]
  /** size × DIMS, row i = docs[i]'s vector. */
  matrix: Float32Array
  queries: Query[]
  vectorOf(text: string): Float32Array | undefined
}

export interface CorpusOptions {
  size: number
  queries: number
  clusters?: number
  vocabulary?: number
  seed?: number
}

const STOPWORDS = ['the', 'a', 'to', 'and', 'of', 'in', 'is', 'for', 'my', 'with', 'on', 'that', 'it', 'was', 'we']
const FRAMES = ['', 'what did I note about ', 'remind me: ', 'anything on ', 'what do we know about ', 'the bit about ']
const RANK = 12 // low-rank directions per cluster
const TOPIC_WORDS = 8

export function buildCorpus(options: CorpusOptions): Corpus {
  const rnd = seededRandom(options.seed ?? 42)
  const K = options.clusters ?? 300
  const V = options.vocabulary ?? 20_000
  const gauss = (): number => {
    let u = 0
    while (u === 0) u = rnd()
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rnd())
  }
  const randomUnit = (): Float32Array => normalise(Float32Array.from({ length: DIMS }, gauss))

  // Vocabulary: distinct pronounceable pseudo-words, rank 0 most frequent.
  const consonants = 'bcdfghjklmnprstvz'
  const vowels = 'aeiou'
  const words: string[] = []
  const seen = new Set<string>(STOPWORDS)
  while (words.length < V) {
    let w = ''
    const syllables = 2 + Math.floor(rnd() * 3)
    for (let s = 0; s < syllables; s++) w += consonants[Math.floor(rnd() * consonants.length)]! + vowels[Math.floor(rnd() * vowels.length)]!
    if (rnd() < 0.4) w += consonants[Math.floor(rnd() * consonants.length)]!
    if (!seen.has(w)) {
      seen.add(w)
      words.push(w)
    }
  }
  // Zipf–Mandelbrot p(r) ∝ 1/(r + 10)^1.1, sampled through its CDF.
  const cdf = new Float64Array(V)
  let total = 0
  for (let r = 0; r < V; r++) cdf[r] = total += 1 / (r + 10) ** 1.1
  const background = (): string => {
    const x = rnd() * total
    let lo = 0
    let hi = V - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cdf[mid]! < x) lo = mid + 1
      else hi = mid
    }
    return words[lo]!
  }

  // Clusters: centre, low-rank directions with decreasing spread, isotropic noise level, topic words.
  const common = randomUnit()
  const centres = Array.from({ length: K }, randomUnit)
  const directions = Array.from({ length: K }, () => Array.from({ length: RANK }, randomUnit))
  const spreads = Array.from({ length: RANK }, (_, j) => 0.5 / Math.sqrt(j + 1))
  const noise = Array.from({ length: K }, () => 0.45 + 0.45 * rnd())
  const topics = Array.from({ length: K }, () => Array.from({ length: TOPIC_WORDS }, () => words[500 + Math.floor(rnd() * (V - 500))]!))
  const pickCluster = (): number => Math.min(K - 1, Math.floor(K * rnd() ** 1.5))

  const sample = (cluster: number, out: Float32Array): Float32Array => {
    const c = centres[cluster]!
    const sigma = noise[cluster]! / Math.sqrt(DIMS)
    for (let d = 0; d < DIMS; d++) out[d] = 0.6 * common[d]! + c[d]! + sigma * gauss()
    for (let j = 0; j < RANK; j++) {
      const z = spreads[j]! * gauss()
      const u = directions[cluster]![j]!
      for (let d = 0; d < DIMS; d++) out[d]! += z * u[d]!
    }
    return normalise(out)
  }
  const text = (cluster: number): { text: string; content: string[] } => {
    const length = 8 + Math.floor(rnd() * 16)
    const out: string[] = []
    const content: string[] = []
    for (let i = 0; i < length; i++) {
      if (rnd() < 0.25) out.push(STOPWORDS[Math.floor(rnd() * STOPWORDS.length)]!)
      // Topic word i of the cluster with weight 1/(i+1), else a background word.
      let w: string
      if (rnd() < 0.35) {
        let t = 0
        while (t < TOPIC_WORDS - 1 && rnd() < 0.45) t++
        w = topics[cluster]![t]!
      } else {
        w = background()
      }
      out.push(w)
      content.push(w)
    }
    const sentence = out.join(' ')
    return { text: `${sentence[0]!.toUpperCase()}${sentence.slice(1)}.`, content }
  }
  const uuid = (): string => {
    const hex = Array.from({ length: 32 }, () => Math.floor(rnd() * 16).toString(16))
    hex[12] = '4'
    hex[16] = '89ab'[Math.floor(rnd() * 4)]!
    const h = hex.join('')
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
  }

  const registry = new Map<string, Float32Array>()
  const matrix = new Float32Array(options.size * DIMS)
  const docs: Doc[] = []
  while (docs.length < options.size) {
    const cluster = pickCluster()
    const { text: t } = text(cluster)
    if (registry.has(t)) continue
    const row = matrix.subarray(docs.length * DIMS, (docs.length + 1) * DIMS)
    sample(cluster, row)
    registry.set(t, row)
    docs.push({ id: uuid(), text: t, cluster })
  }
  const queries: Query[] = []
  const scratch = new Float32Array(DIMS)
  while (queries.length < options.queries) {
    const cluster = pickCluster()
    const held = sample(cluster, scratch)
    const vector = new Float32Array(DIMS)
    const tau = 0.62 / Math.sqrt(DIMS)
    for (let d = 0; d < DIMS; d++) vector[d] = held[d]! + tau * gauss()
    normalise(vector)
    const { content } = text(cluster)
    const distinct = [...new Set(content)]
    const picked: string[] = []
    while (picked.length < Math.min(4, distinct.length)) picked.push(distinct.splice(Math.floor(rnd() * distinct.length), 1)[0]!)
    const q = `${FRAMES[Math.floor(rnd() * FRAMES.length)]!}${picked.join(' ')}`
    if (registry.has(q)) continue
    registry.set(q, vector)
    queries.push({ text: q, words: picked, vector, cluster })
  }
  return { docs, matrix, queries, vectorOf: (t) => registry.get(t) }
}

function normalise(v: Float32Array): Float32Array {
  let s = 0
  for (let d = 0; d < v.length; d++) s += v[d]! * v[d]!
  const inv = 1 / Math.sqrt(s)
  for (let d = 0; d < v.length; d++) v[d]! *= inv
  return v
}

/** An Embedder over the corpus's vectors (a text it did not make is an error). */
export function syntheticEmbedder(corpus: Pick<Corpus, 'vectorOf'>): Embedder {
  return {
    id: 'bench-synthetic-384',
    mode: 'local-model',
    dims: DIMS,
    description: 'synthetic clustered 384-d vectors (benchmark)',
    async embed(texts) {
      return {
        vectors: texts.map((t) => {
          const v = corpus.vectorOf(t)
          if (v === undefined) throw new Error(`synthetic embedder: unknown text ${JSON.stringify(t.slice(0, 60))}`)
          return v
        }),
        tokens: undefined,
      }
    },
  }
}

// ------------------------------------------------------------------ the service, as the memory role builds it

/** createMemoryService with the registry's memory plans and price, a silent logger, dreaming off. */
export function benchService(db: Db, keys: ReturnType<typeof createOwnerKeyStore>, embedder: Embedder, cacheBytes: number): MemoryService {
  const spec = findService('memory')!
  return createMemoryService({
    db,
    clock: systemClock,
    logger: createLogger('silent'),
    keys,
    embedder,
    countTokens,
    plans: spec.plans.filter((plan) => plan.covers.includes('memory')),
    unitPriceMicros: spec.meter!.unitPriceMicros,
    cacheBytes,
    dreaming: () => ({ enabled: false, detail: 'off' }),
    publicUrl: 'http://127.0.0.1:4022',
  })
}

/** A direct-rail owner with a settled deposit (a ledger row, as a decided deposit leaves). */
export async function depositFor(db: Db, owner: string, micros: bigint): Promise<void> {
  await ensureOwner(db, owner, 'direct')
  await db.query(`insert into memory_ledger (owner, kind, amount_micros, replay_key) values ($1, 'deposit', $2, $3)`, [owner, micros, `bench:${owner}`])
}

// ------------------------------------------------------------------ writing the corpus

/** Writes through the service's direct rail (embed, count tokens, lock, balance, seal, seq, record, debit); alias maps the record ids to the docs'. */
export async function rememberAll(
  svc: MemoryService,
  owners: string[],
  docs: Doc[],
  concurrency: number,
  alias: Map<string, string>,
): Promise<{ seconds: number; perWrite: number[] }> {
  let next = 0
  const perWrite: number[] = []
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < docs.length; i = next++) {
        const t = performance.now()
        const prepared = await svc.prepare({ content: docs[i]!.text })
        const view = await svc.rememberOnDeposit(owners[i % owners.length]!, prepared, undefined)
        alias.set(view.id, docs[i]!.id)
        perWrite.push(performance.now() - t)
      }
    }),
  )
  return { seconds: (performance.now() - started) / 1000, perWrite }
}

/** Multi-row inserts of sealed records, seq numbered under the owner lock as nextSeq would. */
export async function bulkLoad(db: Db, keys: OwnerKeys, owner: string, docs: Doc[], embedder: Embedder, corpus: Corpus): Promise<void> {
  const BATCH = 400
  for (let start = 0; start < docs.length; start += BATCH) {
    const batch = docs.slice(start, start + BATCH)
    const sealed = batch.map((doc) => sealRecord(keys, doc.id, { content: doc.text }, corpus.vectorOf(doc.text)!))
    await db.transaction(async (tx) => {
      const version = (await lockOwner(tx, owner))!.version
      const params: unknown[] = []
      const values = batch.map((doc, i) => {
        const s = sealed[i]!
        const tokens = countTokens(doc.text)
        const p = params.length
        params.push(
          doc.id,
          owner,
          version + BigInt(i + 1),
          s.dek_version,
          s.content_ct,
          s.vector_ct,
          s.blind_terms,
          s.doc_length,
          s.content_mac,
          embedder.id,
          tokens,
          embeddingCostMicros(tokens),
        )
        return `($${p + 1}, $${p + 2}, $${p + 3}, 'raw', 'active', 'direct', $${p + 4}, $${p + 5}, $${p + 6}, $${p + 7}, $${p + 8}, $${p + 9}, $${p + 10}, ${DIMS}, $${p + 11}, $${p + 12})`
      })
      await tx.query(
        `insert into memory_records (id, owner, seq, kind, state, rail, dek_version, content_ct, vector_ct, blind_terms, doc_length, content_mac, embedder, dims, tokens, charged_micros)
         values ${values.join(', ')}`,
        params,
      )
      await tx.query('update memory_owners set version = $2 where owner = $1', [owner, version + BigInt(batch.length)])
    })
  }
}

// ------------------------------------------------------------------ Postgres: a throw-away database

export const PG_URL = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** A fresh database on the bench's Postgres, and how to drop it. */
export async function throwaway(): Promise<{ url: string; drop: () => Promise<void> }> {
  let admin: Db
  try {
    admin = await openDb({ kind: 'postgres', url: PG_URL, poolMax: 1 })
  } catch (err) {
    if (pgErrorCode(err) !== '3D000') throw err
    const fallback = new URL(PG_URL)
    fallback.pathname = '/postgres'
    admin = await openDb({ kind: 'postgres', url: fallback.toString(), poolMax: 1 })
  }
  const name = `ag_bench_${randomBytes(5).toString('hex')}`
  await admin.exec(`create database ${name}`)
  const url = new URL(PG_URL)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    drop: async () => {
      await admin.exec(`drop database if exists ${name} with (force)`)
      await admin.close()
    },
  }
}

// ------------------------------------------------------------------ measuring

/** Nearest-rank percentile of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}

/** Milliseconds of each call, in order. */
export async function timeEach<T>(items: readonly T[], fn: (item: T) => unknown): Promise<number[]> {
  const out: number[] = []
  for (const item of items) {
    const started = performance.now()
    await fn(item)
    out.push(performance.now() - started)
  }
  return out
}

export const log = (msg: string): void => {
  process.stdout.write(`[${new Date().toISOString().slice(11, 19)}] ${msg}\n`)
}
export const mib = (bytes: number): string => `${(bytes / 1048576).toFixed(1)} MiB`
