// Builds a tiny sentence-embedding model directory in the layout transformers.js loads, with no
// download: `config.json` (model_type bert), `tokenizer.json` (a WordPiece tokenizer in the HF
// tokenizers format, lowercasing, [CLS] … [SEP]), `tokenizer_config.json` and `onnx/model.onnx`.
//
// The ONNX graph is BERT-shaped but trivial:
//   inputs  input_ids, attention_mask, token_type_ids   int64 [batch_size, sequence_length]
//   output  last_hidden_state                            float [batch_size, sequence_length, hidden]
//   last_hidden_state = Gather(word_embeddings, input_ids) + Gather(token_type_embeddings, token_type_ids)
//                       + 0 × attention_mask   (consumed, so the graph has BERT's exact inputs)
// The word table is deterministic pseudo-random, except the [PAD] row, which is large on purpose:
// a pooling that forgot the attention mask would move a padded sentence's vector a long way.
// `ids(...tokens)` gives vocabulary ids; `expectedVector(ids)` computes what a correct masked mean
// pooling + L2 normalisation must give for one unpadded sequence. With `pooledOutput`, the graph also
// outputs `sentence_embedding` = ReduceMean over the sequence (as sentence-transformers exports do).
//
// The protobuf bytes are written by the minimal encoder below (ONNX's onnx.proto field numbers).
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { seededRandom } from './signals.ts'

export const TINY_SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] as const

/** Words of the vocabulary (ids follow the special tokens, in this order). */
export const TINY_WORDS = [
  'the',
  'a',
  'user',
  'prefers',
  'dark',
  'mode',
  'in',
  'their',
  'code',
  'editor',
  'cat',
  'sat',
  'on',
  'mat',
  'dog',
  'ran',
  'park',
  'likes',
  'green',
  'tea',
  'morning',
  'meeting',
  'is',
  'at',
  'nine',
  'play',
  '##ing',
  '##s',
  '.',
  ',',
  '?',
  '!',
] as const

export interface TinyModel {
  /** The model directory (absolute). */
  dir: string
  hidden: number
  vocab: Record<string, number>
  /** The ids of these vocabulary tokens (throws on a token not in it). */
  ids(...tokens: string[]): number[]
  /** What a correct adapter yields for these token ids (one sequence, no padding): masked mean of the rows + type row 0, L2-normalised. */
  expectedVector(ids: readonly number[]): Float32Array
}

export interface TinyModelOptions {
  hidden?: number
  /** model_max_length of the tokenizer config (default 512). */
  maxLength?: number
  seed?: number
  /**
   * Also output `sentence_embedding` [batch, hidden]: the plain mean over the sequence (padding
   * included), as sentence-transformers exports with a pooling head do (default false).
   */
  pooledOutput?: boolean
}

/** Writes the model into `dir` (created if missing). */
export function buildTinyOnnxModel(dir: string, options: TinyModelOptions = {}): TinyModel {
  const hidden = options.hidden ?? 32
  const vocabList = [...TINY_SPECIAL, ...TINY_WORDS]
  const vocab: Record<string, number> = Object.fromEntries(vocabList.map((token, id) => [token, id]))
  const random = seededRandom(options.seed ?? 0x5eed)
  const words = new Float32Array(vocabList.length * hidden)
  for (let i = 0; i < words.length; i++) words[i] = random() * 2 - 1
  words.fill(7, 0, hidden) // [PAD]: large and one-sided, so counting it would show
  const types = new Float32Array(2 * hidden)
  for (let i = 0; i < types.length; i++) types[i] = (random() * 2 - 1) * 0.1

  mkdirSync(path.join(dir, 'onnx'), { recursive: true })
  writeFileSync(path.join(dir, 'onnx', 'model.onnx'), onnxModel(vocabList.length, hidden, words, types, options.pooledOutput ?? false))
  writeFileSync(path.join(dir, 'config.json'), JSON.stringify(bertConfig(vocabList.length, hidden), null, 2))
  writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(wordPieceTokenizer(vocab), null, 2))
  writeFileSync(
    path.join(dir, 'tokenizer_config.json'),
    JSON.stringify(
      {
        tokenizer_class: 'BertTokenizer',
        do_lower_case: true,
        model_max_length: options.maxLength ?? 512,
        pad_token: '[PAD]',
        unk_token: '[UNK]',
        cls_token: '[CLS]',
        sep_token: '[SEP]',
        mask_token: '[MASK]',
        clean_up_tokenization_spaces: true,
      },
      null,
      2,
    ),
  )

  return {
    dir,
    hidden,
    vocab,
    ids: (...tokens) =>
      tokens.map((token) => {
        const id = vocab[token]
        if (id === undefined) throw new Error(`${token} is not in the tiny vocabulary`)
        return id
      }),
    expectedVector(ids) {
      const sum = new Float64Array(hidden)
      for (const id of ids) for (let h = 0; h < hidden; h++) sum[h]! += words[id * hidden + h]! + types[h]!
      let norm = 0
      for (let h = 0; h < hidden; h++) {
        sum[h]! /= ids.length
        norm += sum[h]! * sum[h]!
      }
      norm = Math.sqrt(norm)
      return Float32Array.from(sum, (v) => v / norm)
    },
  }
}

function bertConfig(vocabSize: number, hidden: number): Record<string, unknown> {
  return {
    architectures: ['BertModel'],
    model_type: 'bert',
    hidden_size: hidden,
    vocab_size: vocabSize,
    num_hidden_layers: 0,
    num_attention_heads: 1,
    intermediate_size: hidden,
    max_position_embeddings: 512,
    type_vocab_size: 2,
    pad_token_id: 0,
    hidden_act: 'gelu',
    layer_norm_eps: 1e-12,
  }
}

function wordPieceTokenizer(vocab: Record<string, number>): Record<string, unknown> {
  const special = (content: string) => ({ id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })
  const cls = vocab['[CLS]']!
  const sep = vocab['[SEP]']!
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: TINY_SPECIAL.map(special),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: '[CLS]', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '[SEP]', type_id: 0 } },
        { Sequence: { id: 'B', type_id: 1 } },
        { SpecialToken: { id: '[SEP]', type_id: 1 } },
      ],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [cls], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [sep], tokens: ['[SEP]'] },
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab },
  }
}

// ------------------------------------------------------------------ a minimal protobuf writer

const FLOAT = 1
const INT64 = 7

type Field = Uint8Array

function varint(value: number | bigint): Uint8Array {
  let v = BigInt.asUintN(64, BigInt(value))
  const out: number[] = []
  do {
    let byte = Number(v & 0x7fn)
    v >>= 7n
    if (v !== 0n) byte |= 0x80
    out.push(byte)
  } while (v !== 0n)
  return Uint8Array.from(out)
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  return Buffer.concat(parts)
}

/** Field `n` as a varint (wire type 0). */
function int(n: number, value: number | bigint): Field {
  return concat([varint(n << 3), varint(value)])
}

/** Field `n` as length-delimited bytes (wire type 2): strings, bytes, embedded messages. */
function bytes(n: number, value: Uint8Array | string): Field {
  const data = typeof value === 'string' ? Buffer.from(value, 'utf8') : value
  return concat([varint((n << 3) | 2), varint(data.length), data])
}

function message(n: number, fields: readonly Field[]): Field {
  return bytes(n, concat(fields))
}

// onnx.proto: TensorProto dims=1 data_type=2 name=8 raw_data=9
function tensor(name: string, dims: readonly number[], dataType: number, raw: Uint8Array): Field[] {
  return [...dims.map((d) => int(1, d)), int(2, dataType), bytes(8, name), bytes(9, raw)]
}

// ValueInfoProto name=1 type=2; TypeProto tensor_type=1; Tensor elem_type=1 shape=2;
// TensorShapeProto dim=1; Dimension dim_value=1 dim_param=2
function valueInfo(n: number, name: string, elemType: number, dims: readonly (number | string)[]): Field {
  const shape = dims.map((d) => message(1, [typeof d === 'number' ? int(1, d) : bytes(2, d)]))
  return message(n, [bytes(1, name), message(2, [message(1, [int(1, elemType), message(2, shape)])])])
}

// NodeProto input=1 output=2 name=3 op_type=4 attribute=5
// AttributeProto name=1 i=3 ints=8 type=20 (INT=2, INTS=7)
function node(name: string, op: string, inputs: readonly string[], outputs: readonly string[], attributes: Record<string, number | number[]> = {}): Field {
  const attrs = Object.entries(attributes).map(([key, value]) =>
    message(5, typeof value === 'number' ? [bytes(1, key), int(3, value), int(20, 2)] : [bytes(1, key), ...value.map((v) => int(8, v)), int(20, 7)]),
  )
  return message(1, [...inputs.map((i) => bytes(1, i)), ...outputs.map((o) => bytes(2, o)), bytes(3, name), bytes(4, op), ...attrs])
}

function floatBytes(values: Float32Array): Uint8Array {
  const out = Buffer.alloc(values.length * 4)
  for (let i = 0; i < values.length; i++) out.writeFloatLE(values[i]!, i * 4)
  return out
}

function onnxModel(vocabSize: number, hidden: number, words: Float32Array, types: Float32Array, pooledOutput: boolean): Uint8Array {
  const io = ['batch_size', 'sequence_length']
  // GraphProto node=1 name=2 initializer=5 input=11 output=12
  const graph = [
    node('word_embeddings', 'Gather', ['word_table', 'input_ids'], ['words'], { axis: 0 }),
    node('token_type_embeddings', 'Gather', ['type_table', 'token_type_ids'], ['types'], { axis: 0 }),
    node('embeddings', 'Add', ['words', 'types'], ['summed']),
    node('mask_float', 'Cast', ['attention_mask'], ['mask_f'], { to: FLOAT }),
    node('mask_zero', 'Mul', ['mask_f', 'zero'], ['mask_0']),
    node('mask_expand', 'Unsqueeze', ['mask_0', 'last_axis'], ['mask_3d']),
    node('output', 'Add', ['summed', 'mask_3d'], ['last_hidden_state']),
    bytes(2, 'tiny_bert'),
    message(5, tensor('word_table', [vocabSize, hidden], FLOAT, floatBytes(words))),
    message(5, tensor('type_table', [2, hidden], FLOAT, floatBytes(types))),
    message(5, tensor('zero', [], FLOAT, floatBytes(new Float32Array([0])))),
    message(5, tensor('last_axis', [1], INT64, new Uint8Array(new BigInt64Array([-1n]).buffer))),
    valueInfo(11, 'input_ids', INT64, io),
    valueInfo(11, 'attention_mask', INT64, io),
    valueInfo(11, 'token_type_ids', INT64, io),
    valueInfo(12, 'last_hidden_state', FLOAT, [...io, hidden]),
  ]
  if (pooledOutput) {
    graph.push(
      node('pooling', 'ReduceMean', ['last_hidden_state'], ['sentence_embedding'], { axes: [1], keepdims: 0 }),
      valueInfo(12, 'sentence_embedding', FLOAT, ['batch_size', hidden]),
    )
  }
  // ModelProto ir_version=1 producer_name=2 graph=7 opset_import=8 (OperatorSetIdProto domain=1 version=2)
  return concat([int(1, 8), bytes(2, 'agent-gateway tests'), message(7, graph), message(8, [bytes(1, ''), int(2, 13)])])
}
