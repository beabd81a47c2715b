// The embedder over a sentence-embedding model the operator put on disk (MiniLM, BGE, E5, GTE…
// exported for transformers.js), run in process on the CPU by onnxruntime-node.
//
// The directory holds what transformers.js loads, in its layout:
//   config.json  tokenizer.json  tokenizer_config.json  onnx/model.onnx   (fp32; no quantised variant is used)
// Nothing is ever downloaded: remote models are off, transformers.js's fetch is replaced by one that
// refuses, and its file caches are off (so it writes nothing either). The model is addressed by its
// absolute path, which transformers.js reads from disk as is.
//
// Embedding: tokenise (padding to the batch's longest; truncation at `maxLength` tokens keeping the
// closing special token, as the Python tokenizers do), run the model,
// pool its last_hidden_state (token_embeddings) per sentence — the mean over the attention mask
// (padding never counts), or the [CLS] token — and L2-normalise. A model that already outputs a
// pooled `sentence_embedding` [batch, hidden] is used as is (still normalised). Batches of
// `batchSize` texts run one at a time (inference is CPU-bound; queueing keeps memory flat).
//
// @huggingface/transformers (and with it the onnxruntime native binding) is imported only here, on
// creation, so processes without a local model never load it. It is not installed by default (it
// and onnxruntime-node weigh ~470 MB): `npm run install:local-models` adds it, and a missing one
// fails creation with that command. Creating the embedder loads the model and embeds one probe
// text: a broken model fails at startup, and `dims` comes from the real output (checked against
// config.json's hidden_size). Tokens: undefined (the caller counts them).
import { readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Embedder, EmbeddingResult } from '../types.ts'
import { EmbeddingError, l2Normalized } from './errors.ts'

/** The optional package that runs local models (it depends on onnxruntime-node, pinned). */
const TRANSFORMERS_PACKAGE = '@huggingface/transformers'
/** package.json's script that installs it, and where package.json is (the directory to run it in). */
const INSTALL_SCRIPT = 'install:local-models'
const PACKAGE_JSON = new URL('../../../package.json', import.meta.url)

/**
 * What this module uses of @huggingface/transformers, written out because the package is optional
 * and its own types are absent where it is not installed (typecheck must not depend on it).
 * test/integration/memory-embed-onnx.test.ts runs all of it against the real package.
 */
export interface Transformers {
  AutoTokenizer: { from_pretrained(dir: string, options: { local_files_only: boolean }): Promise<Tokenizer> }
  AutoModel: {
    from_pretrained(dir: string, options: { local_files_only: boolean; device: 'cpu'; dtype: 'fp32'; session_options?: { intraOpNumThreads: number } }): Promise<Model>
  }
  Tensor: new (type: 'int64', data: BigInt64Array, dims: number[]) => TensorLike
  env: {
    allowRemoteModels: boolean
    allowLocalModels: boolean
    useFS: boolean
    useFSCache: boolean
    useBrowserCache: boolean
    useCustomCache: boolean
    fetch: (input: string | URL) => Promise<unknown>
    logLevel: number
  }
  LogLevel: { ERROR: number }
}

interface Tokenizer {
  model_max_length: number
  all_special_ids: number[]
  pad_token_id?: number | null
  encode(text: string): number[]
}

interface Model {
  (inputs: Record<string, TensorLike>): Promise<unknown>
  dispose(): Promise<unknown>
}

export interface LocalModelEmbedderOptions {
  /** The model directory (see the layout above); relative paths resolve against the working directory. */
  dir: string
  /** 'mean' (default): the mean over the attention mask; 'cls': the first token. */
  pooling?: 'mean' | 'cls' | undefined
  /** L2-normalise (default true; the Embedder contract wants unit vectors — turn off only for a model that normalises itself). */
  normalize?: boolean | undefined
  /** Tokens per text at most, special tokens included (default 256; the tokenizer's model_max_length caps it too). */
  maxLength?: number | undefined
  /** Texts per model run (default 32). */
  batchSize?: number | undefined
  /** onnxruntime intra-op threads (default: onnxruntime's, one per physical core). */
  threads?: number | undefined
}

export interface LocalModelEmbedder extends Embedder {
  readonly mode: 'local-model'
  /** The model directory (absolute). */
  readonly dir: string
  /** Milliseconds the creation took: importing the runtime, loading the model, the probe embed. */
  readonly loadMs: number
}

/** Files the directory must hold, relative to it. */
export const LOCAL_MODEL_FILES = ['config.json', 'tokenizer.json', 'tokenizer_config.json', path.join('onnx', 'model.onnx')] as const

const PROBE_TEXT = 'dimension probe'

export async function createLocalModelEmbedder(options: LocalModelEmbedderOptions): Promise<LocalModelEmbedder> {
  const started = performance.now()
  const dir = path.resolve(options.dir)
  const pooling = options.pooling ?? 'mean'
  if (pooling !== 'mean' && pooling !== 'cls') throw new RangeError(`pooling must be 'mean' or 'cls', got ${String(pooling)}`)
  const normalize = options.normalize ?? true
  const maxLength = options.maxLength ?? 256
  if (!(Number.isInteger(maxLength) && maxLength >= 2)) throw new RangeError(`maxLength must be an integer ≥ 2, got ${maxLength}`)
  const batchSize = options.batchSize ?? 32
  if (!(Number.isInteger(batchSize) && batchSize > 0)) throw new RangeError(`the embedding batch size must be a positive integer, got ${batchSize}`)
  const threads = options.threads
  if (threads !== undefined && !(Number.isInteger(threads) && threads > 0)) throw new RangeError(`threads must be a positive integer, got ${threads}`)

  const config = await checkModelDir(dir)
  const transformers = await importTransformers()
  offline(transformers)

  const unavailable = (what: string, err: unknown): EmbeddingError =>
    new EmbeddingError('unavailable', `local embedding model in ${dir}: ${what}: ${err instanceof Error ? err.message : String(err)}`, { cause: err })
  let tokenizer: Tokenizer
  let model: Model
  try {
    tokenizer = await transformers.AutoTokenizer.from_pretrained(dir, { local_files_only: true })
  } catch (err) {
    throw unavailable('cannot load the tokenizer (tokenizer.json, tokenizer_config.json)', err)
  }
  try {
    model = await transformers.AutoModel.from_pretrained(dir, {
      local_files_only: true,
      device: 'cpu',
      dtype: 'fp32',
      ...(threads !== undefined ? { session_options: { intraOpNumThreads: threads } } : {}),
    })
  } catch (err) {
    throw unavailable('cannot load the model (config.json, onnx/model.onnx)', err)
  }

  // Tokenisation, padding and truncation are done here rather than by the tokenizer's call, whose
  // truncation cuts the closing special token ([SEP], </s>) off long texts; the Python tokenizers
  // (and so the sentence-transformers vectors the model was trained and evaluated with) keep it.
  const limit = Math.min(maxLength, Number(tokenizer.model_max_length) || Number.POSITIVE_INFINITY)
  const specialIds = new Set<number>(tokenizer.all_special_ids)
  const padId = tokenizer.pad_token_id ?? 0
  const encode = (texts: string[]): Record<string, TensorLike> => {
    const rows = texts.map((text) => {
      const ids = tokenizer.encode(text)
      if (ids.length <= limit) return ids
      const kept = ids.slice(0, limit)
      const last = ids[ids.length - 1]!
      if (specialIds.has(last)) kept[limit - 1] = last
      return kept
    })
    const width = rows.reduce((widest, row) => Math.max(widest, row.length), 1)
    const ids = new BigInt64Array(rows.length * width).fill(BigInt(padId))
    const mask = new BigInt64Array(rows.length * width)
    rows.forEach((row, b) => {
      row.forEach((id, s) => {
        ids[b * width + s] = BigInt(id)
        mask[b * width + s] = 1n
      })
    })
    // token_type_ids (all zero for one sentence) are added by transformers.js when the model takes them.
    return {
      input_ids: new transformers.Tensor('int64', ids, [rows.length, width]),
      attention_mask: new transformers.Tensor('int64', mask, [rows.length, width]),
    } as unknown as Record<string, TensorLike>
  }

  let closed = false
  /** The model outputs a pooled sentence_embedding (used as is). */
  let pooledOutput = false
  let queue: Promise<unknown> = Promise.resolve()
  /** Runs `work` after every earlier batch (one model run at a time). */
  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const run = queue.then(work, work)
    queue = run.catch(() => {})
    return run
  }

  const runBatch = async (texts: string[]): Promise<Float32Array[]> => {
    if (closed) throw new EmbeddingError('unavailable', `local embedding model in ${dir}: the embedder is closed`)
    let inputs: Record<string, TensorLike>
    let outputs: Record<string, TensorLike>
    try {
      inputs = encode(texts)
      outputs = (await model(inputs)) as Record<string, TensorLike>
    } catch (err) {
      throw unavailable('inference failed', err)
    }
    try {
      pooledOutput = outputs.sentence_embedding?.dims.length === 2
      return pool(texts.length, inputs.attention_mask, outputs, pooling, normalize, dir)
    } finally {
      for (const tensor of Object.values(outputs)) tensor?.dispose?.()
    }
  }

  const embed = async (texts: string[], embedOptions: { signal?: AbortSignal } = {}): Promise<EmbeddingResult> => {
    if (!Array.isArray(texts) || texts.some((text) => typeof text !== 'string')) throw new TypeError('embed() takes an array of strings')
    const vectors: Float32Array[] = []
    for (let start = 0; start < texts.length; start += batchSize) {
      if (embedOptions.signal?.aborted) throw new EmbeddingError('timeout', `local embedding model in ${dir}: cancelled by the caller`, { cause: embedOptions.signal.reason })
      vectors.push(...(await serial(() => runBatch(texts.slice(start, start + batchSize)))))
    }
    return { vectors, tokens: undefined }
  }

  let dims: number
  try {
    dims = (await embed([PROBE_TEXT])).vectors[0]!.length
    // A pooled sentence_embedding may be projected (a Dense layer) to other dimensions than hidden_size.
    const hiddenSize = config.hidden_size
    if (!pooledOutput && typeof hiddenSize === 'number' && hiddenSize !== dims) {
      throw new EmbeddingError('unavailable', `local embedding model in ${dir}: config.json says hidden_size ${hiddenSize} but the model outputs ${dims} dimensions`)
    }
  } catch (err) {
    await model.dispose().catch(() => {})
    throw err
  }
  const name = path.basename(dir)
  const loadMs = performance.now() - started
  return {
    id: `local:${name}:${dims}`,
    mode: 'local-model',
    dims,
    dir,
    loadMs,
    description: `local model: ${name} (${dims} dimensions, ${pooling} pooling, onnxruntime on the CPU)`,
    embed,
    async close() {
      if (closed) return
      closed = true
      await serial(async () => {})
      await model.dispose()
    },
  }
}

/** The parsed config.json, after checking that every file of the layout is there (one error naming all the missing ones). */
async function checkModelDir(dir: string): Promise<Record<string, unknown>> {
  const info = await stat(dir).catch((err: NodeJS.ErrnoException) => err)
  if (info instanceof Error) {
    throw new EmbeddingError(
      'unavailable',
      `local embedding model: the directory ${dir} ${info.code === 'ENOENT' ? 'does not exist' : `cannot be read (${info.code ?? info.message})`}`,
    )
  }
  if (!info.isDirectory()) throw new EmbeddingError('unavailable', `local embedding model: ${dir} is not a directory`)
  const missing: string[] = []
  for (const file of LOCAL_MODEL_FILES) {
    const found = await stat(path.join(dir, file)).then(
      (s) => s.isFile(),
      () => false,
    )
    if (!found) missing.push(file)
  }
  if (missing.length > 0) {
    throw new EmbeddingError('unavailable', `local embedding model in ${dir}: missing ${missing.join(', ')} (expected ${LOCAL_MODEL_FILES.join(', ')})`)
  }
  let config: unknown
  try {
    config = JSON.parse(await readFile(path.join(dir, 'config.json'), 'utf8'))
  } catch (err) {
    throw new EmbeddingError('unavailable', `local embedding model in ${dir}: config.json is not valid JSON`, { cause: err })
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw new EmbeddingError('unavailable', `local embedding model in ${dir}: config.json is not a JSON object`)
  return config as Record<string, unknown>
}

/**
 * The optional runtime. Not installed (the package or one it needs cannot be found): an error whose
 * one line is the command that installs it. Installed but failing (e.g. no native binding for this
 * platform): the loader's own message.
 */
export async function importTransformers(): Promise<Transformers> {
  try {
    return (await import(TRANSFORMERS_PACKAGE)) as Transformers
  } catch (err) {
    const code = (err as NodeJS.ErrnoException | undefined)?.code
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      const missing = /Cannot find (?:package|module) '([^']+)'/.exec(err instanceof Error ? err.message : '')?.[1] ?? TRANSFORMERS_PACKAGE
      const what =
        missing === TRANSFORMERS_PACKAGE
          ? `${missing}, the optional package that runs it, is not installed`
          : `${missing}, which the optional ${TRANSFORMERS_PACKAGE} needs, is not installed`
      throw new EmbeddingError('unavailable', `local embedding model: ${what}: run \`${await installCommand()}\` in ${path.dirname(fileURLToPath(PACKAGE_JSON))}`, {
        cause: err,
      })
    }
    throw new EmbeddingError(
      'unavailable',
      `local embedding model: cannot load ${TRANSFORMERS_PACKAGE} or the onnxruntime-node native binding: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    )
  }
}

/** The install command package.json's script runs (so the message names exactly it), or the script. */
async function installCommand(): Promise<string> {
  try {
    const { scripts } = JSON.parse(await readFile(PACKAGE_JSON, 'utf8')) as { scripts?: Record<string, unknown> }
    const command = scripts?.[INSTALL_SCRIPT]
    if (typeof command === 'string' && command.includes(TRANSFORMERS_PACKAGE)) return command
  } catch {
    // fall through
  }
  return `npm run ${INSTALL_SCRIPT}`
}

/** Points transformers.js at the disk only (process-wide: this adapter is its only user). */
function offline(transformers: Transformers): void {
  const { env, LogLevel } = transformers
  env.allowRemoteModels = false
  env.allowLocalModels = true
  env.useFS = true
  env.useFSCache = false
  env.useBrowserCache = false
  env.useCustomCache = false
  env.fetch = async (input: string | URL) => {
    throw new EmbeddingError('unavailable', `local embedding model: refusing to fetch ${safeHost(input)} (downloads are disabled)`)
  }
  env.logLevel = LogLevel.ERROR
}

function safeHost(input: string | URL): string {
  try {
    return new URL(String(input)).host
  } catch {
    return 'a non-URL'
  }
}

/** The parts of a transformers.js Tensor this module reads. */
interface TensorLike {
  dims: number[]
  data: ArrayLike<number | bigint>
  dispose?: () => void
}

function pool(count: number, mask: TensorLike | undefined, outputs: Record<string, TensorLike>, pooling: 'mean' | 'cls', normalize: boolean, dir: string): Float32Array[] {
  const invalid = (what: string): EmbeddingError => new EmbeddingError('invalid_response', `local embedding model in ${dir}: ${what}`)
  const finish = (values: ArrayLike<number>, row: number): Float32Array => {
    for (let i = 0; i < values.length; i++) if (!Number.isFinite(values[i])) throw invalid(`the embedding of text ${row} is not finite`)
    if (!normalize) return Float32Array.from(values)
    const unit = l2Normalized(values)
    if (!unit) throw invalid(`the embedding of text ${row} is all zeros`)
    return unit
  }
  const pooled = outputs.sentence_embedding
  if (pooled && pooled.dims.length === 2) {
    const [rows, hidden] = pooled.dims as [number, number]
    if (rows !== count || !(hidden > 0)) throw invalid(`sentence_embedding has shape [${pooled.dims.join(', ')}] for ${count} texts`)
    const data = Float32Array.from(pooled.data as ArrayLike<number>)
    return Array.from({ length: count }, (_, b) => finish(data.subarray(b * hidden, (b + 1) * hidden), b))
  }
  const states = outputs.last_hidden_state ?? outputs.token_embeddings ?? Object.values(outputs)[0]
  if (states?.dims.length !== 3) throw invalid(`the model has no [batch, sequence, hidden] output (outputs: ${Object.keys(outputs).join(', ') || 'none'})`)
  const [rows, sequence, hidden] = states.dims as [number, number, number]
  if (rows !== count || !(hidden > 0)) throw invalid(`last_hidden_state has shape [${states.dims.join(', ')}] for ${count} texts`)
  if (!mask || mask.dims[0] !== rows || mask.dims[1] !== sequence) throw invalid('the attention mask does not match the model output')
  const data = states.data as ArrayLike<number>
  const vectors: Float32Array[] = []
  for (let b = 0; b < rows; b++) {
    const sum = new Float64Array(hidden)
    if (pooling === 'cls') {
      for (let h = 0; h < hidden; h++) sum[h] = data[b * sequence * hidden + h]!
    } else {
      let tokens = 0
      for (let s = 0; s < sequence; s++) {
        if (Number(mask.data[b * sequence + s]) === 0) continue
        tokens++
        const offset = (b * sequence + s) * hidden
        for (let h = 0; h < hidden; h++) sum[h]! += data[offset + h]!
      }
      if (tokens === 0) throw invalid(`text ${b} has no tokens`)
      for (let h = 0; h < hidden; h++) sum[h]! /= tokens
    }
    vectors.push(finish(sum, b))
  }
  return vectors
}
