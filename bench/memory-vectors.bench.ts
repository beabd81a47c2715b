// Memory recall vector search micro-benchmark (tinybench, one thread): the per-owner VectorStore
// (sign codes → Hamming histogram selection → int8 rescoring) against float brute force, on
// clustered 384-d unit vectors (200 Gaussian clusters, as in test/unit/memory-search.test.ts).
// Queries cycle through a pool: "near" ones drawn like the data, "uniform" ones near nothing
// (the store's slowest case: it rescores the most candidates), and near ones under a filter that
// allows 10 % of the positions. Recall@10 against brute force is printed beside the latencies.
//   node bench/memory-vectors.bench.ts             (BENCH_SIZES=10000,100000 BENCH_TIME_MS=2000)
import { Bench } from 'tinybench'
import { exactTopK, VectorStore } from '../src/memory/search/vectors.ts'
import { seededRandom } from '../test/helpers/signals.ts'

const sizes = (process.env.BENCH_SIZES ?? '10000,100000').split(',').map(Number)
const time = Number(process.env.BENCH_TIME_MS ?? 2000)
const dims = 384
const k = 10

const rnd = seededRandom(1)
function gauss(): number {
  let u = 0
  while (u === 0) u = rnd()
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rnd())
}
function unit(v: Float32Array): Float32Array {
  let s = 0
  for (const x of v) s += x * x
  const inv = 1 / Math.sqrt(s)
  for (let i = 0; i < v.length; i++) v[i]! *= inv
  return v
}
const randomUnit = (): Float32Array => unit(Float32Array.from({ length: dims }, gauss))
const centres = Array.from({ length: 200 }, randomUnit)
const spread = centres.map(() => 0.5 + rnd() * 0.7)
function around(c: number): Float32Array {
  const v = new Float32Array(dims)
  const s = spread[c]! / Math.sqrt(dims)
  for (let d = 0; d < dims; d++) v[d] = centres[c]![d]! + s * gauss()
  return unit(v)
}

function cycle<T>(items: T[]): () => T {
  let i = 0
  return () => items[i++ % items.length]!
}

function recall(store: VectorStore, matrix: Float32Array, queries: Float32Array[], allowed?: Uint8Array): number {
  let hits = 0
  for (const q of queries) {
    const got = new Set(store.search(q, k, { allowed }).positions)
    hits += exactTopK(matrix, dims, q, k, allowed).positions.filter((p) => got.has(p)).length
  }
  return hits / (queries.length * k)
}

console.log(`node ${process.version}, ${process.platform}-${process.arch}, ${dims} dims, top ${k}, ${time} ms per task`)
const rows: Record<string, string | number>[] = []
for (const n of sizes) {
  const started = performance.now()
  const matrix = new Float32Array(n * dims)
  const store = new VectorStore(dims)
  for (let i = 0; i < n; i++) {
    const v = around(Math.floor(200 * rnd() ** 1.5))
    matrix.set(v, i * dims)
    store.add(v)
  }
  const near = Array.from({ length: 200 }, () => around(Math.floor(rnd() * 200)))
  const uniform = Array.from({ length: 50 }, randomUnit)
  const allowed = new Uint8Array(n)
  for (let i = 0; i < n; i++) allowed[i] = rnd() < 0.1 ? 1 : 0
  store.search(near[0]!, k) // codes are made by the first search
  console.log(
    `n = ${n}: built in ${(performance.now() - started).toFixed(0)} ms, store ≈ ${(store.bytes() / 2 ** 20).toFixed(1)} MiB (float copy ${((n * dims * 4) / 2 ** 20).toFixed(1)} MiB)`,
  )
  const recalls: Record<string, number> = {
    near: recall(store, matrix, near.slice(0, 50)),
    uniform: recall(store, matrix, uniform.slice(0, 20)),
    'near, 10 % allowed': recall(store, matrix, near.slice(0, 50), allowed),
  }
  const bench = new Bench({ time, warmupTime: 300, retainSamples: true })
  const nextNear = cycle(near)
  const nextUniform = cycle(uniform)
  const nextFiltered = cycle(near)
  const nextExact = cycle(near)
  bench
    .add(`store ${n}: near`, () => {
      store.search(nextNear(), k)
    })
    .add(`store ${n}: uniform`, () => {
      store.search(nextUniform(), k)
    })
    .add(`store ${n}: near, 10 % allowed`, () => {
      store.search(nextFiltered(), k, { allowed })
    })
    .add(`float brute force ${n}`, () => {
      exactTopK(matrix, dims, nextExact(), k)
    })
  await bench.run()
  for (const task of bench.tasks) {
    const latency = (task.result as unknown as { latency?: { p50: number; samples?: ArrayLike<number> } }).latency
    const samples = latency?.samples
    const p95 = samples !== undefined && samples.length > 0 ? samples[Math.min(samples.length - 1, Math.floor(samples.length * 0.95))]! : Number.NaN
    const kind = task.name.split(': ')[1]
    rows.push({
      task: task.name,
      'p50 ms': Number((latency?.p50 ?? Number.NaN).toFixed(2)),
      'p95 ms': Number(p95.toFixed(2)),
      samples: samples?.length ?? 0,
      'recall@10': kind !== undefined ? Number(recalls[kind]!.toFixed(3)) : 1,
    })
  }
}
console.table(rows)
