// Memory retrieval quality on a labelled set (bench/fixtures/memory-eval.json): 5 personas, 40
// sessions, one memory per turn (one owner per persona, written in order through the service's
// direct rail), 150 questions each labelled with the turn(s) holding the answer. Scored through the
// real path — createMemoryService on PGlite memory://, remember, then recall — as recall@5,
// recall@10 (share of a question's evidence turns in the top k) and nDCG@10 (binary relevance):
//   (a) the embedded default, the lexical embedder: hybrid (what recall returns), and the two halves
//       alone on the same cached owner index (BM25 over the blind index; vectors only);
//   (b) a local model: MEMORY_EMBEDDINGS_MODEL_DIR (an operator-provided sentence-embedding model, see
//       docs/memory.md "Embeddings"). Without it, the tiny random-weight model of
//       test/helpers/tiny-onnx-model.ts runs instead, as a plumbing check only: its numbers mean nothing.
//   npm run bench:memory-quality        (MEMORY_EMBEDDINGS_MODEL_DIR=/path/to/model for real figures;
//                                        BENCH_VERBOSE=1 prints each evidence turn's rank per question)
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { staticKeyRing } from '../src/memory/crypto/keyring.ts'
import { createOwnerKeyStore } from '../src/memory/crypto/owner-keys.ts'
import { createLexicalEmbedder } from '../src/memory/embeddings/lexical.ts'
import { createLocalModelEmbedder } from '../src/memory/embeddings/onnx-local.ts'
import { queryTerms } from '../src/memory/records.ts'
import { termsOf } from '../src/memory/search/text.ts'
import type { Embedder } from '../src/memory/types.ts'
import { type Db, openDb } from '../src/platform/db/index.ts'
import { migrate } from '../src/platform/db/migrate.ts'
import { buildTinyOnnxModel } from '../test/helpers/tiny-onnx-model.ts'
import { benchService, depositFor } from './memory-corpus.ts'

interface Turn {
  id: string
  role: 'user' | 'assistant'
  text: string
}
interface Fixture {
  personas: { id: string; name: string; sessions: { id: string; date: string; turns: Turn[] }[] }[]
  questions: { id: string; persona: string; kind: string; question: string; evidence: string[] }[]
}
const fixture = JSON.parse(readFileSync(new URL('./fixtures/memory-eval.json', import.meta.url), 'utf8')) as Fixture
const KINDS = ['direct', 'paraphrase', 'update', 'multi', 'distractor'] as const

// ------------------------------------------------------------------ metrics

interface Scores {
  r5: number
  r10: number
  ndcg: number
}
function score(ranked: string[], evidence: string[]): Scores {
  const relevant = new Set(evidence)
  const found = (k: number) => ranked.slice(0, k).filter((id) => relevant.has(id)).length / relevant.size
  let dcg = 0
  ranked.slice(0, 10).forEach((id, i) => {
    if (relevant.has(id)) dcg += 1 / Math.log2(i + 2)
  })
  let ideal = 0
  for (let i = 0; i < Math.min(10, relevant.size); i++) ideal += 1 / Math.log2(i + 2)
  return { r5: found(5), r10: found(10), ndcg: dcg / ideal }
}
const mean = (xs: number[]): number => (xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length)

interface Run {
  system: string
  /** Per question id: the ranked turn ids. */
  ranked: Map<string, string[]>
  /** Milliseconds per recall (the hybrid runs only). */
  latency?: number[]
}

// ------------------------------------------------------------------ the service path

/** Writes every persona's turns (in order) for one embedder; runs the questions hybrid and by halves. */
async function evaluate(db: Db, keys: ReturnType<typeof createOwnerKeyStore>, embedder: Embedder, label: string, halves: ('bm25' | 'vector')[]): Promise<Run[]> {
  const svc = benchService(db, keys, embedder, 64 * 1024 * 1024)
  const turnOf = new Map<string, string>()
  const ownerOf = new Map<string, string>()
  const writeStarted = performance.now()
  let writes = 0
  for (const persona of fixture.personas) {
    const owner = `0x${createHash('sha256').update(`${label}/${persona.id}`).digest('hex').slice(0, 40)}`
    ownerOf.set(persona.id, owner)
    await depositFor(db, owner, 1_000_000_000n)
    for (const session of persona.sessions) {
      for (const turn of session.turns) {
        const prepared = await svc.prepare({ content: turn.text, context: `session/${session.id}`, tags: [turn.role] })
        turnOf.set((await svc.rememberOnDeposit(owner, prepared, undefined)).id, turn.id)
        writes++
      }
    }
  }
  const writeMs = performance.now() - writeStarted
  console.log(`  ${label}: ${writes} memories written in ${(writeMs / 1000).toFixed(1)} s (${(writeMs / writes).toFixed(1)} ms each, embedding included)`)
  const hybrid: Run = { system: `${label}: hybrid (service.recall)`, ranked: new Map(), latency: [] }
  const runs: Run[] = [hybrid]
  const byHalf = new Map(halves.map((half) => [half, { system: `${label}: ${half === 'bm25' ? 'BM25 only' : 'vectors only'}`, ranked: new Map<string, string[]>() }]))
  runs.push(...byHalf.values())
  for (const q of fixture.questions) {
    const owner = ownerOf.get(q.persona)!
    const started = performance.now()
    const result = await svc.recall(owner, { query: q.question, limit: 10 })
    hybrid.latency!.push(performance.now() - started)
    hybrid.ranked.set(
      q.id,
      result.results.map((r) => turnOf.get(r.id)!),
    )
    const ownerKeys = (await keys.keysOf(db, owner))!
    const index = (await svc.cache.indexOf(owner, ownerKeys))!
    const bm25 = byHalf.get('bm25')
    if (bm25)
      bm25.ranked.set(
        q.id,
        index.search({ terms: queryTerms(ownerKeys, q.question), vector: null, limit: 10 }).map((h) => turnOf.get(h.id)!),
      )
    const vector = byHalf.get('vector')
    if (vector) {
      const [v] = (await embedder.embed([q.question])).vectors
      vector.ranked.set(
        q.id,
        index.search({ terms: [], vector: v ?? null, limit: 10 }).map((h) => turnOf.get(h.id)!),
      )
    }
  }
  return runs
}

// ------------------------------------------------------------------ the run

async function main(): Promise<void> {
  const memories = fixture.personas.reduce((n, p) => n + p.sessions.reduce((m, s) => m + s.turns.length, 0), 0)
  const perPersona = memories / fixture.personas.length
  console.log(
    `memory quality bench: ${fixture.personas.length} personas, ${fixture.personas.reduce((n, p) => n + p.sessions.length, 0)} sessions, ${memories} memories ` +
      `(~${perPersona.toFixed(0)} per owner), ${fixture.questions.length} questions; node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'}, load ${os.loadavg()[0]!.toFixed(2)}`,
  )
  // How lexical the questions are: stemmed content terms shared with their evidence.
  const turnText = new Map(fixture.personas.flatMap((p) => p.sessions.flatMap((s) => s.turns.map((t) => [t.id, t.text] as const))))
  const noOverlap = fixture.questions.filter((q) => {
    const terms = new Set(termsOf(q.question))
    return q.evidence.every((id) => termsOf(turnText.get(id)!).every((t) => !terms.has(t)))
  })
  console.log(
    `questions sharing no stemmed term with any of their evidence: ${noOverlap.length} of ${fixture.questions.length} ` +
      `(${KINDS.map((k) => `${k} ${noOverlap.filter((q) => q.kind === k).length}/${fixture.questions.filter((q) => q.kind === k).length}`).join(', ')})`,
  )

  const db = await openDb({ kind: 'pglite', dataDir: 'memory://' })
  await migrate(db)
  const keys = createOwnerKeyStore({ ring: staticKeyRing('eval', { eval: randomBytes(32) }) })
  const runs: Run[] = []
  runs.push(...(await evaluate(db, keys, createLexicalEmbedder(), 'lexical (default)', ['bm25', 'vector'])))

  const modelDir = process.env.MEMORY_EMBEDDINGS_MODEL_DIR
  let tinyDir: string | undefined
  let modelLabel: string
  if (modelDir) {
    modelLabel = `local model ${path.basename(path.resolve(modelDir))}`
  } else {
    tinyDir = mkdtempSync(path.join(os.tmpdir(), 'agw-tiny-model-'))
    buildTinyOnnxModel(tinyDir)
    modelLabel = 'tiny random-weight model (PLUMBING CHECK, MEANINGLESS)'
    console.log(
      '\nMEMORY_EMBEDDINGS_MODEL_DIR is not set: the local-model rows use the tiny random-weight test model (32-word vocabulary).\n' +
        'They only show that the local-model path runs end to end; their quality numbers mean nothing.\n' +
        'For real figures: MEMORY_EMBEDDINGS_MODEL_DIR=/path/to/all-MiniLM-L6-v2 npm run bench:memory-quality\n' +
        '(a directory with config.json, tokenizer.json, tokenizer_config.json and onnx/model.onnx, as docs/memory.md describes).\n',
    )
  }
  const local = await createLocalModelEmbedder({ dir: modelDir ?? tinyDir! })
  console.log(`  local model: ${local.dims} dims, loaded in ${local.loadMs.toFixed(0)} ms`)
  try {
    runs.push(...(await evaluate(db, keys, local, modelLabel, ['vector'])))
  } finally {
    await local.close?.()
    await db.close()
    if (tinyDir) rmSync(tinyDir, { recursive: true, force: true })
  }

  // Reports.
  const f = (x: number) => (Number.isNaN(x) ? '–' : x.toFixed(3))
  const random = (k: number) => Math.min(1, k / perPersona)
  console.log('\n| System | recall@5 | recall@10 | nDCG@10 | recall p50 ms |')
  console.log('|---|---:|---:|---:|---:|')
  for (const run of runs) {
    const s = fixture.questions.map((q) => score(run.ranked.get(q.id)!, q.evidence))
    const latency = run.latency ? [...run.latency].sort((a, b) => a - b)[run.latency.length >> 1]!.toFixed(1) : '–'
    console.log(`| ${run.system} | ${f(mean(s.map((x) => x.r5)))} | ${f(mean(s.map((x) => x.r10)))} | ${f(mean(s.map((x) => x.ndcg)))} | ${latency} |`)
  }
  console.log(`| random order (expected, ~${perPersona.toFixed(0)} memories per owner) | ${f(random(5))} | ${f(random(10))} | – | – |`)

  console.log(`\nrecall@10 by kind (questions):\n`)
  console.log(`| System | ${KINDS.map((k) => `${k} (${fixture.questions.filter((q) => q.kind === k).length})`).join(' | ')} | no shared term (${noOverlap.length}) |`)
  console.log(`|---|${KINDS.map(() => '---:').join('|')}|---:|`)
  for (const run of runs) {
    const r10 = (qs: Fixture['questions']) => f(mean(qs.map((q) => score(run.ranked.get(q.id)!, q.evidence).r10)))
    console.log(`| ${run.system} | ${KINDS.map((k) => r10(fixture.questions.filter((q) => q.kind === k))).join(' | ')} | ${r10(noOverlap)} |`)
  }
  if (process.env.BENCH_VERBOSE) {
    console.log('\nrank of each evidence turn per question (– = not in the top 10):')
    for (const q of fixture.questions) {
      const ranks = runs.map((run) => q.evidence.map((id) => (run.ranked.get(q.id)!.indexOf(id) + 1 || '–').toString()).join('+'))
      console.log(`${q.id} ${q.kind.padEnd(10)} ${ranks.join(' | ').padEnd(40)} ${q.question}`)
    }
  }
  if (!modelDir) console.log('\n(The tiny-model rows are a plumbing check with random weights: not a measurement of any real model.)')
}

await main()
