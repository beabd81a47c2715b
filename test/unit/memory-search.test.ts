// Recall: BM25 over blind terms (scores by the formula, ranks, filters), reciprocal rank fusion
// (the arithmetic and its tie rule), the vector store (exact on small sets, recall@10 against
// float brute force on clustered vectors and on lexical-embedder vectors), the lexical embedder
// (a paraphrase sharing stems outranks unrelated text) and the owner index that combines them.
import t from 'tap'
import { createLexicalEmbedder, LexicalEncoder, lexicalEmbedderId } from '../../src/memory/embeddings/lexical.ts'
import { FUSION_DEPTH, RRF_K } from '../../src/memory/limits.ts'
import { blindQueryTerms, blindTerms, blindValue } from '../../src/memory/search/blind-index.ts'
import { Bm25Index } from '../../src/memory/search/bm25.ts'
import { reciprocalRankFusion } from '../../src/memory/search/fusion.ts'
import { createOwnerIndex } from '../../src/memory/search/owner-index.ts'
import { termsOf } from '../../src/memory/search/text.ts'
import { TopK } from '../../src/memory/search/top-k.ts'
import { EXACT_BELOW, exactTopK, VectorStore } from '../../src/memory/search/vectors.ts'
import type { BlindTerms, IndexedRecord } from '../../src/memory/types.ts'
import { seededRandom } from '../helpers/signals.ts'

const key = Buffer.alloc(32, 7)
const blind = (text: string): BlindTerms => blindTerms(key, termsOf(text))
const query = (text: string): string[] => blindQueryTerms(key, termsOf(text))

function unit(v: Float32Array): Float32Array {
  let s = 0
  for (const x of v) s += x * x
  const k = 1 / Math.sqrt(s)
  for (let i = 0; i < v.length; i++) v[i]! *= k
  return v
}

function recallAt10(store: VectorStore, matrix: Float32Array, dims: number, q: Float32Array): number {
  const truth = exactTopK(matrix, dims, q, 10).positions
  const got = new Set(store.search(q, 10).positions)
  return truth.filter((p) => got.has(p)).length / truth.length
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

// ------------------------------------------------------------------ top-k and fusion

t.test('TopK keeps the best, ties to the higher position', async (t) => {
  const top = new TopK(3)
  for (const [score, position] of [
    [0.5, 0],
    [0.9, 1],
    [0.5, 2],
    [0.1, 3],
    [0.9, 4],
    [0.5, 5],
  ] as const)
    top.push(score, position)
  t.same([...top.sorted().positions], [4, 1, 5])
  t.same([...new TopK(0).sorted().positions], [])
})

t.test('reciprocal rank fusion: Σ 1/(k + rank), ties to the newer position', async (t) => {
  const fused = reciprocalRankFusion([
    [10, 20, 30],
    [30, 10, 40],
  ])
  const byPosition = new Map(fused.map((f) => [f.position, f]))
  t.equal(byPosition.get(10)!.score, 1 / (RRF_K + 1) + 1 / (RRF_K + 2))
  t.equal(byPosition.get(30)!.score, 1 / (RRF_K + 3) + 1 / (RRF_K + 1))
  t.equal(byPosition.get(20)!.score, 1 / (RRF_K + 2))
  t.same(byPosition.get(40)!.ranks, [null, 3])
  t.same(
    fused.map((f) => f.position),
    [10, 30, 20, 40],
  )
  // Equal scores (rank 1 in one list each): the higher position first.
  t.same(
    reciprocalRankFusion([[5], [9]]).map((f) => f.position),
    [9, 5],
  )
  // Depth: ranks past it are not read.
  t.same(
    reciprocalRankFusion([[1, 2, 3]], { depth: 2 }).map((f) => f.position),
    [1, 2],
  )
})

// ------------------------------------------------------------------ BM25

t.test('BM25 scores by the formula (k1 1.2, b 0.75, Lucene idf)', async (t) => {
  const index = new Bm25Index()
  const a = 'a'.repeat(24)
  const b = 'b'.repeat(24)
  const c = 'c'.repeat(24)
  index.add({
    terms: new Map([
      [a, 2],
      [b, 1],
    ]),
    length: 3,
  })
  index.add({ terms: new Map([[a, 1]]), length: 1 })
  index.add({ terms: new Map([[c, 1]]), length: 1 })
  const avgdl = 5 / 3
  const idf = (df: number): number => Math.log(1 + (3 - df + 0.5) / (df + 0.5))
  const part = (tf: number, dl: number): number => (tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * dl) / avgdl))
  const hits = index.search([a])
  t.same([...hits.positions], [1, 0], 'the short document with the term wins')
  t.equal(hits.scores[0], idf(2) * part(1, 1))
  t.ok(Math.abs(hits.scores[1]! - idf(2) * part(2, 3)) < 1e-12)
  // A repeated query term counts twice; an unknown term adds nothing.
  const twice = index.search([a, a, 'f'.repeat(24)])
  t.ok(Math.abs(twice.scores[0]! - 2 * hits.scores[0]!) < 1e-12)
  // The rare term outweighs the common one.
  t.same([...index.search([a, c]).positions].slice(0, 1), [2])
  t.equal(index.search(['z'.repeat(24)]).positions.length, 0, 'no shared term, no hit')
  t.equal(index.search([]).positions.length, 0)
  // The allowed mask.
  t.same([...index.search([a], 10, Uint8Array.from([1, 0, 1])).positions], [0])
  t.equal(index.df(a), 2)
})

t.test('BM25 returns FUSION_DEPTH at most, newest first on ties', async (t) => {
  const index = new Bm25Index()
  for (let i = 0; i < 250; i++) index.add(blind('alpha beta'))
  const hits = index.search(query('alpha'))
  t.equal(hits.positions.length, FUSION_DEPTH)
  t.same([...hits.positions.slice(0, 3)], [249, 248, 247])
})

t.test('BM25 ranks the document sharing more (and rarer) stems first', async (t) => {
  const index = new Bm25Index()
  const docs = [
    'The user prefers dark mode in the code editor',
    'The user likes light themes',
    'Deploys to the Kubernetes cluster every Friday',
    'The editor font is Fira Code at 14 points',
    'Dark chocolate is the user favourite',
  ]
  for (const d of docs) index.add(blind(d))
  t.equal(index.search(query('which editor mode does the user prefer')).positions[0], 0)
  t.equal(index.search(query('kubernetes deployment day')).positions[0], 2)
  t.equal(index.search(query('fonts in the editor')).positions[0], 3)
})

// ------------------------------------------------------------------ vectors

t.test('the vector store is exact (int8) on small sets and honours the allowed mask', async (t) => {
  const rnd = seededRandom(3)
  const dims = 64
  const n = 500
  const matrix = new Float32Array(n * dims)
  const store = new VectorStore(dims)
  for (let i = 0; i < n; i++) {
    const v = unit(Float32Array.from({ length: dims }, () => rnd() - 0.5))
    matrix.set(v, i * dims)
    t.equal(store.add(v), i)
  }
  t.equal(store.size, n)
  let agree = 0
  for (let qi = 0; qi < 20; qi++) {
    const q = unit(Float32Array.from({ length: dims }, () => rnd() - 0.5))
    const got = store.search(q, 10)
    const truth = exactTopK(matrix, dims, q, 10)
    agree += truth.positions.filter((p) => got.positions.includes(p)).length
    for (let i = 0; i < got.positions.length; i++) {
      const exact = exactTopK(matrix.subarray(got.positions[i]! * dims, (got.positions[i]! + 1) * dims), dims, q, 1).scores[0]!
      if (Math.abs(exact - got.scores[i]!) > 0.01) t.fail(`int8 cosine ${got.scores[i]} vs float ${exact}`)
    }
  }
  t.ok(agree / 200 >= 0.97, `top-10 agreement with float ${agree / 200}`)
  t.equal(store.lastRescored, n, 'a small set is scored outright')
  const allowed = new Uint8Array(n)
  for (let i = 0; i < n; i += 7) allowed[i] = 1
  const q = unit(Float32Array.from({ length: dims }, () => rnd() - 0.5))
  const filtered = store.search(q, 10, { allowed })
  t.ok(filtered.positions.length === 10 && filtered.positions.every((p) => p % 7 === 0), 'only allowed positions')
  t.same([...filtered.positions], [...exactTopK(matrix, dims, q, 10, allowed).positions])
  // Edges: a zero query, k = 0, dims mismatch, non-finite input, a short mask.
  t.equal(store.search(new Float32Array(dims), 10).positions.length, 0)
  t.equal(store.search(q, 0).positions.length, 0)
  t.throws(() => store.search(new Float32Array(dims + 1), 10), RangeError)
  t.throws(() => store.add(new Float32Array(dims).fill(Number.NaN)), RangeError)
  t.throws(() => store.search(q, 10, { allowed: new Uint8Array(3) }), RangeError)
  const position = store.add(new Float32Array(dims))
  t.ok(store.search(q, n + 1).positions.includes(position), 'a zero vector is stored and scores 0')
  const back = store.vectorAt(0)
  let err = 0
  for (let d = 0; d < dims; d++) err = Math.max(err, Math.abs(back[d]! - matrix[d]!))
  t.ok(err < 0.01, `dequantised within ${err}`)
})

t.test('recall@10 ≥ 0.95 against float brute force: 20k clustered 384-d vectors', async (t) => {
  const rnd = seededRandom(42)
  const gauss = (): number => {
    let u = 0
    while (u === 0) u = rnd()
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rnd())
  }
  const dims = 384
  const n = 20_000
  const clusters = 200
  const randomUnit = (): Float32Array => unit(Float32Array.from({ length: dims }, gauss))
  const centres = Array.from({ length: clusters }, randomUnit)
  // Noise of each cluster, relative to its centre's unit length; cluster sizes are skewed.
  const spread = Array.from({ length: clusters }, () => 0.5 + rnd() * 0.7)
  const around = (centre: Float32Array, noise: number): Float32Array => {
    const v = new Float32Array(dims)
    const s = noise / Math.sqrt(dims)
    for (let d = 0; d < dims; d++) v[d] = centre[d]! + s * gauss()
    return unit(v)
  }
  const matrix = new Float32Array(n * dims)
  const store = new VectorStore(dims)
  for (let i = 0; i < n; i++) {
    const c = Math.floor(clusters * rnd() ** 1.5)
    const v = around(centres[c]!, spread[c]!)
    matrix.set(v, i * dims)
    store.add(v)
  }
  const pick = (): number => Math.floor(rnd() * clusters)
  const kinds: [string, () => Float32Array][] = [
    // Drawn as the data are: inside a cluster.
    [
      'near',
      () => {
        const c = pick()
        return around(centres[c]!, spread[c]!)
      },
    ],
    // Between two clusters.
    [
      'between',
      () => {
        const a = centres[pick()]!
        const b = centres[pick()]!
        return around(unit(a.map((x, d) => x + b[d]!)), 0.8)
      },
    ],
    // Outside a cluster's shell: its own direction plus three times the cluster's noise.
    [
      'far',
      () => {
        const c = pick()
        return around(centres[c]!, 3 * spread[c]!)
      },
    ],
  ]
  const all: number[] = []
  for (const [kind, make] of kinds) {
    const recalls: number[] = []
    const times: number[] = []
    const rescored: number[] = []
    for (let i = 0; i < 60; i++) {
      const q = make()
      const started = performance.now()
      recalls.push(recallAt10(store, matrix, dims, q))
      times.push(performance.now() - started)
      rescored.push(store.lastRescored)
    }
    all.push(...recalls)
    t.comment(`${kind}: recall@10 ${mean(recalls).toFixed(3)} (min ${Math.min(...recalls)}), rescored ${median(rescored)}`)
    t.ok(mean(recalls) >= 0.95, `${kind} queries: recall@10 ${mean(recalls).toFixed(3)} ≥ 0.95`)
  }
  t.ok(mean(all) >= 0.95, `all: recall@10 ${mean(all).toFixed(3)}`)
  // Queries uniformly at random near nothing: their true top 10 sit ~3σ above the bulk of the
  // cosines (noise), the hardest case for sign codes; reported, held to a lower bar.
  const uniform: number[] = []
  for (let i = 0; i < 40; i++) uniform.push(recallAt10(store, matrix, dims, randomUnit()))
  t.comment(`uniform random queries: recall@10 ${mean(uniform).toFixed(3)} (rescored ${store.lastRescored})`)
  t.ok(mean(uniform) >= 0.7, `uniform random queries: recall@10 ${mean(uniform).toFixed(3)} ≥ 0.7`)
  // Latency at 20k (the bench measures 100k).
  const q = around(centres[0]!, spread[0]!)
  const times: number[] = []
  for (let i = 0; i < 30; i++) {
    const started = performance.now()
    store.search(q, 10)
    times.push(performance.now() - started)
  }
  t.comment(`search p50 at 20k × 384: ${median(times).toFixed(2)} ms`)
})

t.test('recall@10 ≥ 0.95 against float brute force: lexical-embedder vectors of a synthetic corpus', async (t) => {
  // Pseudo-words from syllables with English suffixes, grouped into 150 topics: documents of a
  // topic share stems and word forms, as notes about one subject do.
  const rnd = seededRandom(7)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!
  const consonants = [...'bcdfghjklmnprstvwz']
  const vowels = [...'aeiou']
  const suffixes = ['', 's', 'ing', 'ed', 'er', 'ation', 'ly']
  const roots = Array.from({ length: 3000 }, () => {
    let w = ''
    for (let s = 2 + Math.floor(rnd() * 2); s > 0; s--) w += pick(consonants) + pick(vowels)
    return w + pick(consonants)
  })
  const topics = Array.from({ length: 150 }, () => Array.from({ length: 25 }, () => Math.floor(rnd() * roots.length)))
  const text = (topic: number, words: number): string => {
    const out: string[] = []
    for (let i = 0; i < words; i++) {
      const root = rnd() < 0.8 ? topics[topic]![Math.floor(rnd() ** 2 * 25)]! : Math.floor(rnd() * roots.length)
      out.push(roots[root]! + pick(suffixes))
    }
    return out.join(' ')
  }
  const encoder = new LexicalEncoder()
  const dims = encoder.dims
  const n = 12_000
  const matrix = new Float32Array(n * dims)
  const store = new VectorStore(dims)
  for (let i = 0; i < n; i++) {
    const v = encoder.encode(text(Math.floor(rnd() * 150), 8 + Math.floor(rnd() * 16)))
    matrix.set(v, i * dims)
    store.add(v)
  }
  const recalls: number[] = []
  for (let i = 0; i < 100; i++) recalls.push(recallAt10(store, matrix, dims, encoder.encode(text(Math.floor(rnd() * 150), 4 + Math.floor(rnd() * 6)))))
  t.comment(`lexical corpus (${n} documents): recall@10 ${mean(recalls).toFixed(3)} (min ${Math.min(...recalls)})`)
  t.ok(mean(recalls) >= 0.95, `recall@10 ${mean(recalls).toFixed(3)} ≥ 0.95`)
  t.ok(n > EXACT_BELOW, 'the set is large enough for the Hamming stage')
})

// ------------------------------------------------------------------ the lexical embedder

t.test('the lexical embedder: unit vectors, deterministic, paraphrases sharing stems rank first', async (t) => {
  const embedder = createLexicalEmbedder()
  t.equal(embedder.id, lexicalEmbedderId(384))
  t.equal(embedder.id, 'lexical-ngram-v1-384')
  t.equal(embedder.mode, 'lexical')
  t.equal(embedder.dims, 384)
  const memories = [
    'The user prefers dark mode in their code editor',
    'Deployments to the Kubernetes cluster happen every Friday afternoon',
    'She is training for a marathon and runs every morning',
    'The shipping address is 42 Baker Street, London',
    'Favourite pizza topping is pineapple with extra cheese',
    'The quarterly tax filing deadline is the 15th of April',
    'Prefers green tea over coffee in the afternoon',
    'Allergic to peanuts and shellfish',
  ]
  const paraphrases = [
    'Which editor mode does the user prefer? Dark',
    'When does the team deploy to kubernetes clusters?',
    'running in the mornings, marathon trainer',
    'What is the address for shipments?',
    'pizza toppings they like',
    'deadlines for filing taxes each quarter',
    'tea preference',
    'allergies: peanut, shellfish',
  ]
  const { vectors, tokens } = await embedder.embed([...memories, ...paraphrases, '', 'the of and'])
  t.equal(tokens, undefined, 'token counts are left to countTokens')
  for (const v of vectors) {
    let norm = 0
    for (const x of v) norm += x * x
    t.ok(v.length === 384 && Math.abs(norm - 1) < 1e-5, 'unit length')
  }
  t.same(vectors[16], vectors[17], 'texts without terms share one fixed unit vector')
  const again = (await embedder.embed([memories[0]!])).vectors[0]!
  t.same(again, vectors[0], 'deterministic')
  const cosine = (a: Float32Array, b: Float32Array): number => a.reduce((s, x, d) => s + x * b[d]!, 0)
  for (let p = 0; p < paraphrases.length; p++) {
    const scores = memories.map((_, m) => cosine(vectors[memories.length + p]!, vectors[m]!))
    const best = scores.indexOf(Math.max(...scores))
    t.equal(best, p, `"${paraphrases[p]}" → "${memories[best]}" (${scores[p]!.toFixed(3)} vs next ${[...scores].sort((a, b) => b - a)[1]!.toFixed(3)})`)
  }
  t.ok(cosine(vectors[0]!, vectors[3]!) < 0.2, 'unrelated text scores near 0')
  const controller = new AbortController()
  controller.abort()
  await t.rejects(embedder.embed(['x'], { signal: controller.signal }))
})

// ------------------------------------------------------------------ the owner index

function record(seq: number, text: string, options: Partial<IndexedRecord> = {}): IndexedRecord {
  return { seq, id: `m${seq}`, kind: 'raw', context: null, tags: [], blind: blind(text), vector: encoder.encode(text), ...options }
}
const encoder = new LexicalEncoder()
const mac = (kind: 'context' | 'tag', value: string): string => blindValue(key, kind, value).toString('hex')

t.test('the owner index fuses BM25 and vectors; vector-less records take part lexically', async (t) => {
  const index = createOwnerIndex(384)
  t.equal(index.dims, 384)
  index.add([
    record(1, 'The user prefers dark mode in the code editor'),
    record(2, 'Deploys to the Kubernetes cluster every Friday'),
    record(3, 'The editor font is Fira Code', { vector: null }),
    record(5, 'Lunch is usually at noon'),
  ])
  t.equal(index.size, 4)
  t.equal(index.maxSeq, 5)
  const q = 'dark editor preference'
  const hits = index.search({ terms: query(q), vector: encoder.encode(q), limit: 10 })
  t.equal(hits[0]!.id, 'm1')
  t.equal(hits[0]!.score, 1 / (RRF_K + hits[0]!.lexicalRank!) + 1 / (RRF_K + hits[0]!.vectorRank!))
  const font = hits.find((h) => h.id === 'm3')!
  t.equal(font.vectorRank, null, 'no vector: lexical only')
  t.ok(font.lexicalRank !== null)
  t.ok(
    hits.every((h, i) => i === 0 || hits[i - 1]!.score >= h.score),
    'sorted by fused score',
  )
  t.equal(index.search({ terms: query(q), vector: encoder.encode(q), limit: 1 }).length, 1, 'limit')
  t.same(index.search({ terms: [], vector: null, limit: 5 }), [], 'nothing to match')
  // A vector of other dimensions (another embedder) is ignored, the lexical list still answers.
  t.equal(index.search({ terms: query(q), vector: new Float32Array(8), limit: 3 })[0]!.id, 'm1')
})

t.test('the owner index: seq order, atomic validation, ties to the newer record', async (t) => {
  const index = createOwnerIndex(384)
  index.add([record(10, 'alpha beta'), record(11, 'alpha beta')])
  index.add([record(9, 'stale'), record(11, 'duplicate')])
  t.equal(index.size, 2, 'records at or below maxSeq are skipped')
  t.throws(() => index.add([record(12, 'fine'), record(13, 'bad', { vector: new Float32Array(3) })]), RangeError)
  t.throws(() => index.add([record(Number.NaN, 'bad')]), RangeError)
  t.equal(index.size, 2, 'a bad batch adds nothing')
  t.equal(index.maxSeq, 11)
  const hits = index.search({ terms: query('alpha'), vector: encoder.encode('alpha beta'), limit: 2 })
  t.same(
    hits.map((h) => h.id),
    ['m11', 'm10'],
    'equal scores: the newer first',
  )
  const before = index.bytes()
  index.add(Array.from({ length: 300 }, (_, i) => record(20 + i, `note number ${i} about topic ${i % 7}`)))
  t.ok(index.bytes() > before && before > 0, `bytes() grows (${before} → ${index.bytes()})`)
})

t.test('the owner index filters by context and by every tag, in both lists', async (t) => {
  const index = createOwnerIndex(384)
  const records: IndexedRecord[] = []
  for (let i = 0; i < 3000; i++) {
    const context = i % 10 === 0 ? mac('context', 'work') : i % 10 === 1 ? mac('context', 'home') : null
    const tags = [i % 3 === 0 ? mac('tag', 'a') : mac('tag', 'b'), ...(i % 2 === 0 ? [mac('tag', 'even')] : [])]
    records.push(record(i + 1, `meeting notes ${i % 50} project plan item ${i}`, { context, tags }))
  }
  index.add(records)
  const q = 'project meeting notes plan'
  const base = { terms: query(q), vector: encoder.encode(q), limit: 1000 }
  const work = index.search({ ...base, context: mac('context', 'work') })
  t.ok(work.length >= FUSION_DEPTH && work.length <= 2 * FUSION_DEPTH, `${work.length} hits: the union of two lists of FUSION_DEPTH`)
  t.ok(
    work.every((h) => Number(h.id.slice(1)) % 10 === 1),
    'only the work context (seq = i + 1, i % 10 = 0)',
  )
  // 300 of 3,000 records pass: filtering inside each search (not after it) still fills both lists.
  t.equal(work.filter((h) => h.vectorRank !== null).length, FUSION_DEPTH, 'the vector list is full')
  t.equal(work.filter((h) => h.lexicalRank !== null).length, FUSION_DEPTH, 'the lexical list is full')
  const tagged = index.search({ ...base, tags: [mac('tag', 'a'), mac('tag', 'even'), mac('tag', 'a')] })
  t.ok(tagged.length > 0)
  t.ok(
    tagged.every((h) => (Number(h.id.slice(1)) - 1) % 6 === 0),
    'every tag present (i divisible by 3 and 2)',
  )
  const both = index.search({ ...base, context: mac('context', 'work'), tags: [mac('tag', 'even')] })
  t.ok(both.length > 0 && both.every((h) => (Number(h.id.slice(1)) - 1) % 10 === 0))
  t.same(index.search({ ...base, context: mac('context', 'nowhere') }), [], 'an unknown context matches nothing')
  t.same(index.search({ ...base, tags: [mac('tag', 'a'), mac('tag', 'missing')] }), [], 'an unknown tag matches nothing')
})
