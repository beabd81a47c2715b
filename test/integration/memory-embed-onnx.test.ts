// The local-model embedder on a real onnxruntime-node session over a tiny BERT-shaped model built
// in a temp dir (test/helpers/tiny-onnx-model.ts; nothing is downloaded). It proves the plumbing:
// tokenisation (WordPiece, lowercasing, punctuation, [UNK], [CLS] … [SEP]), mean pooling over the
// attention mask (padding never counts), [CLS] pooling, truncation that keeps [SEP], L2
// normalisation, batching, determinism, that texts sharing words are closer, the errors naming the
// directory and the missing file — and that no network connection is ever attempted.
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { EmbeddingError } from '../../src/memory/embeddings/errors.ts'
import { createLocalModelEmbedder, importTransformers, type LocalModelEmbedder } from '../../src/memory/embeddings/onnx-local.ts'
import { buildTinyOnnxModel, type TinyModel } from '../helpers/tiny-onnx-model.ts'

const REPO = path.resolve(import.meta.dirname, '../..')

/**
 * Why the native runtime cannot run here, or false when it can. The runtime is optional (`npm run
 * install:local-models`); .ci/run installs it, and with CI=true a missing one fails instead of skipping.
 */
function runtimeMissing(): string | false {
  try {
    createRequire(import.meta.url)('onnxruntime-node')
    return false
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') {
      return process.env.CI === 'true' ? false : 'the optional local-model runtime is not installed (npm run install:local-models)'
    }
    return `onnxruntime-node cannot load its native binding on ${process.platform}-${process.arch}: ${(err as Error).message}`
  }
}
const skip = runtimeMissing()

// Any TCP connection attempted while this file runs is recorded and refused.
const connections: string[] = []
const originalConnect = net.Socket.prototype.connect
net.Socket.prototype.connect = function (this: net.Socket, ...args: unknown[]) {
  const target = args[0] as { host?: string; port?: number; path?: string } | undefined
  connections.push(target?.path ?? `${target?.host}:${target?.port}`)
  throw new Error('network access attempted in an offline test')
} as typeof net.Socket.prototype.connect
t.teardown(() => {
  net.Socket.prototype.connect = originalConnect
})

function tempDir(t: Test): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'tiny-model-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  return root
}

function model(t: Test, name = 'tiny-bert'): TinyModel {
  return buildTinyOnnxModel(path.join(tempDir(t), name))
}

async function failure(t: Test, promise: Promise<unknown>, kind: EmbeddingError['kind']): Promise<EmbeddingError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  t.ok(err instanceof EmbeddingError, `fails with an EmbeddingError: ${String(err)}`)
  t.equal((err as EmbeddingError).kind, kind)
  return err as EmbeddingError
}

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0
  for (let i = 0; i < a.length; i++) dot += a[i]! * b[i]!
  return dot
}

function norm(v: Float32Array): number {
  return Math.sqrt(cosine(v, v))
}

function close(t: Test, actual: Float32Array, expected: Float32Array, message: string): void {
  const worst = expected.reduce((max, v, i) => Math.max(max, Math.abs(v - actual[i]!)), 0)
  t.ok(actual.length === expected.length && worst < 1e-5, `${message} (largest difference ${worst.toExponential(2)})`)
}

t.test('local model embedder', { skip }, async (t) => {
  const tiny = model(t)
  const ids = tiny.ids
  const started = performance.now()
  const embedder: LocalModelEmbedder = await createLocalModelEmbedder({ dir: tiny.dir })
  t.teardown(() => embedder.close?.())
  const first = performance.now()
  await embedder.embed(['the cat sat on the mat'])
  t.comment(
    `created (import + load + probe) in ${embedder.loadMs.toFixed(0)} ms; the first embed after it took ${(performance.now() - first).toFixed(1)} ms; ${(performance.now() - started).toFixed(0)} ms in all`,
  )

  t.test('identity: id, dims, mode, no token count', async (t) => {
    t.equal(embedder.id, 'local:tiny-bert:32')
    t.equal(embedder.dims, 32)
    t.equal(embedder.mode, 'local-model')
    t.equal(embedder.dir, tiny.dir)
    t.match(embedder.description, /tiny-bert \(32 dimensions, mean pooling/)
    const result = await embedder.embed(['a'])
    t.equal(result.tokens, undefined, 'billing counts tokens itself')
    t.same(await embedder.embed([]), { vectors: [], tokens: undefined })
  })

  t.test('the helper tokenizer: a known sentence gives the expected ids', async (t) => {
    const { AutoTokenizer } = await importTransformers()
    const tokenizer = await AutoTokenizer.from_pretrained(tiny.dir, { local_files_only: true })
    t.same(tokenizer.encode('The Cat sat on the mat.'), ids('[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '.', '[SEP]'))
    t.same(tokenizer.encode('Playing cats, zebra!'), ids('[CLS]', 'play', '##ing', 'cat', '##s', ',', '[UNK]', '!', '[SEP]'))
  })

  t.test('tokenisation, mean pooling and normalisation give exactly the reference vector', async (t) => {
    const { vectors } = await embedder.embed(['The Cat sat on the mat.', 'Playing cats, zebra!'])
    close(t, vectors[0]!, tiny.expectedVector(ids('[CLS]', 'the', 'cat', 'sat', 'on', 'the', 'mat', '.', '[SEP]')), 'lowercased, punctuation split off, [CLS] … [SEP]')
    close(t, vectors[1]!, tiny.expectedVector(ids('[CLS]', 'play', '##ing', 'cat', '##s', ',', '[UNK]', '!', '[SEP]')), 'word pieces and [UNK]')
    for (const vector of vectors) t.ok(Math.abs(norm(vector) - 1) < 1e-6, `unit length (${norm(vector)})`)
    t.ok(vectors.every((vector) => vector instanceof Float32Array && vector.length === 32))
  })

  t.test('padding does not change a sentence: masked mean pooling', async (t) => {
    const alone = (await embedder.embed(['cat'])).vectors[0]!
    const { vectors } = await embedder.embed(['cat', 'the user prefers dark mode in their code editor, in the morning'])
    close(t, vectors[0]!, alone, 'batched with a longer sentence (6 real tokens vs 16: 10 [PAD] rows of 7s) = alone')
    close(t, alone, tiny.expectedVector(ids('[CLS]', 'cat', '[SEP]')), 'and the reference')
    const withPads = tiny.expectedVector(ids('[CLS]', 'cat', '[SEP]', ...Array<string>(10).fill('[PAD]')))
    t.ok(cosine(alone, withPads) < 0.9, `an unmasked mean would differ (cosine ${cosine(alone, withPads).toFixed(3)})`)
  })

  t.test('identical texts give identical vectors, within a batch and across calls', async (t) => {
    const text = 'The user likes green tea in the morning.'
    const a = await embedder.embed([text, text])
    const b = await embedder.embed([text])
    t.same(Array.from(a.vectors[0]!), Array.from(a.vectors[1]!))
    t.same(Array.from(a.vectors[0]!), Array.from(b.vectors[0]!))
  })

  t.test('texts sharing words are closer than disjoint ones', async (t) => {
    const [base, sharing, disjoint] = (await embedder.embed(['the cat sat on the mat', 'the cat ran in the park', 'green tea morning meeting is at nine'])).vectors
    const near = cosine(base!, sharing!)
    const far = cosine(base!, disjoint!)
    t.ok(near > far, `shared words ${near.toFixed(3)} > disjoint ${far.toFixed(3)}`)
  })

  t.test('batches: the same vectors whatever the batch size', async (t) => {
    const texts = ['cat', 'dog ran', 'the mat', 'a user prefers dark mode', 'tea', 'nine']
    const small = await createLocalModelEmbedder({ dir: tiny.dir, batchSize: 2 })
    t.teardown(() => small.close?.())
    const one = await embedder.embed(texts)
    const many = await small.embed(texts)
    for (const [i, text] of texts.entries()) close(t, many.vectors[i]!, one.vectors[i]!, text)
  })

  t.test('concurrent calls are queued and each gets its own vectors', async (t) => {
    const texts = ['cat', 'dog', 'tea', 'mat', 'park']
    const results = await Promise.all(texts.map((text) => embedder.embed([text])))
    for (const [i, result] of results.entries()) close(t, result.vectors[0]!, tiny.expectedVector(ids('[CLS]', texts[i]!, '[SEP]')), texts[i]!)
  })

  t.test('maxLength truncates, keeping the closing [SEP]', async (t) => {
    const short = await createLocalModelEmbedder({ dir: tiny.dir, maxLength: 4 })
    t.teardown(() => short.close?.())
    const [cut] = (await short.embed(['the cat sat on the mat'])).vectors
    close(t, cut!, tiny.expectedVector(ids('[CLS]', 'the', 'cat', '[SEP]')), '[CLS] the cat [SEP]')
  })

  t.test('cls pooling takes the first token', async (t) => {
    const cls = await createLocalModelEmbedder({ dir: tiny.dir, pooling: 'cls' })
    t.teardown(() => cls.close?.())
    const [vector] = (await cls.embed(['the cat sat'])).vectors
    close(t, vector!, tiny.expectedVector(ids('[CLS]')), '[CLS] row')
    t.match(cls.description, /cls pooling/)
  })

  t.test("a model's own pooled sentence_embedding output is used as is (normalised)", async (t) => {
    const pooled = buildTinyOnnxModel(path.join(tempDir(t), 'pooled'), { pooledOutput: true })
    const embedder = await createLocalModelEmbedder({ dir: pooled.dir })
    t.teardown(() => embedder.close?.())
    t.equal(embedder.id, 'local:pooled:32')
    const { vectors } = await embedder.embed(['cat', 'the user prefers dark mode'])
    close(t, (await embedder.embed(['cat'])).vectors[0]!, pooled.expectedVector(ids('[CLS]', 'cat', '[SEP]')), 'alone: the mean of its tokens')
    close(
      t,
      vectors[0]!,
      pooled.expectedVector(ids('[CLS]', 'cat', '[SEP]', '[PAD]', '[PAD]', '[PAD]', '[PAD]')),
      "batched: this model's pooling counts padding, and it is what we get",
    )
    t.ok(Math.abs(norm(vectors[0]!) - 1) < 1e-6)
  })

  t.test('a cancelled call fails as timeout before running', async (t) => {
    const controller = new AbortController()
    controller.abort()
    await failure(t, embedder.embed(['cat'], { signal: controller.signal }), 'timeout')
  })

  t.test('transformers.js is left offline', async (t) => {
    const { env } = await importTransformers()
    t.equal(env.allowRemoteModels, false)
    t.equal(env.useFSCache, false, 'nothing cached (written) either')
    await t.rejects(env.fetch('https://huggingface.co/x/resolve/main/config.json'), /refusing to fetch huggingface\.co/)
  })

  t.test('close: later calls fail as unavailable', async (t) => {
    const closing = await createLocalModelEmbedder({ dir: tiny.dir })
    await closing.close?.()
    await closing.close?.()
    await failure(t, closing.embed(['cat']), 'unavailable')
  })

  t.test('errors name the directory and what is wrong, without reaching out', async (t) => {
    const root = tempDir(t)
    const missingDir = path.join(root, 'Xenova', 'all-MiniLM-L6-v2')
    let error = await failure(t, createLocalModelEmbedder({ dir: missingDir }), 'unavailable')
    t.equal(error.message, `local embedding model: the directory ${missingDir} does not exist`)

    const relative = path.relative(process.cwd(), missingDir)
    error = await failure(t, createLocalModelEmbedder({ dir: relative }), 'unavailable')
    t.match(error.message, missingDir, 'a relative path (that looks like a hub id) resolves to a local directory')

    const file = path.join(root, 'file')
    writeFileSync(file, 'x')
    error = await failure(t, createLocalModelEmbedder({ dir: file }), 'unavailable')
    t.match(error.message, `${file} is not a directory`)

    for (const missing of ['config.json', 'tokenizer.json', 'tokenizer_config.json', path.join('onnx', 'model.onnx')]) {
      const broken = buildTinyOnnxModel(path.join(root, `without-${missing.replace('/', '-')}`))
      rmSync(path.join(broken.dir, missing))
      error = await failure(t, createLocalModelEmbedder({ dir: broken.dir }), 'unavailable')
      t.equal(error.message.startsWith(`local embedding model in ${broken.dir}: missing ${missing} (expected `), true, error.message)
    }

    const garbage = buildTinyOnnxModel(path.join(root, 'garbage'))
    writeFileSync(path.join(garbage.dir, 'onnx', 'model.onnx'), 'not a protobuf')
    error = await failure(t, createLocalModelEmbedder({ dir: garbage.dir }), 'unavailable')
    t.match(error.message, `local embedding model in ${garbage.dir}: cannot load the model`)

    const badConfig = buildTinyOnnxModel(path.join(root, 'bad-config'))
    writeFileSync(path.join(badConfig.dir, 'config.json'), '{')
    error = await failure(t, createLocalModelEmbedder({ dir: badConfig.dir }), 'unavailable')
    t.match(error.message, 'config.json is not valid JSON')

    const wrongSize = buildTinyOnnxModel(path.join(root, 'wrong-size'))
    writeFileSync(path.join(wrongSize.dir, 'config.json'), JSON.stringify({ model_type: 'bert', hidden_size: 384 }))
    error = await failure(t, createLocalModelEmbedder({ dir: wrongSize.dir }), 'unavailable')
    t.match(error.message, 'config.json says hidden_size 384 but the model outputs 32 dimensions')

    await t.rejects(createLocalModelEmbedder({ dir: tiny.dir, maxLength: 1 }), RangeError)
    await t.rejects(createLocalModelEmbedder({ dir: tiny.dir, pooling: 'max' as 'mean' }), RangeError)
  })

  t.test('no network connection was attempted by anything above', async (t) => {
    t.same(connections, [])
    await t.rejects(fetch('https://huggingface.co/'), 'control: a real fetch is stopped')
    t.same(connections, ['huggingface.co:443'], 'control: and the spy sees it')
  })
})

t.test('importing the adapter does not load transformers.js or onnxruntime (only creating it does)', async (t) => {
  const script = [
    "import { registerHooks } from 'node:module'",
    'const seen = []',
    'registerHooks({ resolve(specifier, context, next) { seen.push(specifier); return next(specifier, context) } })',
    "await import('./src/memory/embeddings/onnx-local.ts')",
    'console.log(JSON.stringify(seen))',
  ].join('\n')
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO })
  const seen = JSON.parse(stdout) as string[]
  t.ok(seen.includes('./errors.ts'), 'the hook sees the static imports')
  t.same(
    seen.filter((specifier) => /transformers|onnxruntime/.test(specifier)),
    [],
  )
})

t.test('without the optional runtime, creating the embedder fails with the one command that installs it', async (t) => {
  const tiny = model(t)
  // A resolve hook makes the package unfindable, as where it was never installed.
  const script = [
    "import { registerHooks } from 'node:module'",
    'registerHooks({ resolve(specifier, context, next) {',
    "  if (specifier === '@huggingface/transformers') throw Object.assign(new Error(\"Cannot find package '\" + specifier + \"' imported from here\"), { code: 'ERR_MODULE_NOT_FOUND' })",
    '  return next(specifier, context)',
    '} })',
    "const { createLocalModelEmbedder } = await import('./src/memory/embeddings/onnx-local.ts')",
    `await createLocalModelEmbedder({ dir: ${JSON.stringify(tiny.dir)} }).then(`,
    "  () => console.log('{}'),",
    '  (err) => console.log(JSON.stringify({ kind: err.kind, message: err.message })),',
    ')',
  ].join('\n')
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO })
  const { kind, message } = JSON.parse(stdout) as { kind?: string; message?: string }
  const { scripts } = JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
  const command = scripts['install:local-models'] ?? ''
  t.match(command, /^ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save @huggingface\/transformers@\d+\.\d+\.\d+$/, 'package.json pins the version it installs')
  t.equal(kind, 'unavailable')
  t.equal(message, `local embedding model: @huggingface/transformers, the optional package that runs it, is not installed: run \`${command}\` in ${REPO}`)
})
