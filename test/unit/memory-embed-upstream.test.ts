// The OpenAI-compatible embedder against a scripted upstream (a real HTTP server on 127.0.0.1):
// the request it sends, the strict validation of the answer, L2 normalisation, usage tokens,
// batching, dimensions learned then enforced, the retry policy (through an injected sleep, so no
// real back-off), timeouts, and that the API key never shows in an error.
import type { ServerResponse } from 'node:http'
import { inspect } from 'node:util'
import t, { type Test } from 'tap'
import { EmbeddingError } from '../../src/memory/embeddings/errors.ts'
import { createUpstreamEmbedder, embeddingsEndpoint, type UpstreamEmbedderOptions } from '../../src/memory/embeddings/upstream.ts'
import { type ScriptedUpstream, startScriptedUpstream } from '../helpers/scripted-upstream.ts'

const KEY = 'sk-embed-0123456789abcdefSECRET'

async function upstream(t: Test): Promise<ScriptedUpstream> {
  const server = await startScriptedUpstream()
  t.teardown(() => server.close())
  return server
}

function make(server: ScriptedUpstream, extra: Partial<UpstreamEmbedderOptions> = {}) {
  const sleeps: number[] = []
  const embedder = createUpstreamEmbedder({
    url: server.url,
    apiKey: KEY,
    model: 'text-embedding-3-small',
    timeoutMs: 2_000,
    retries: 2,
    sleep: async (ms) => void sleeps.push(ms),
    random: () => 0.5,
    ...extra,
  })
  return { embedder, sleeps }
}

/** An OpenAI-shaped answer: one embedding per vector, indexes in order unless given; `usage` null = none. */
function answer(vectors: number[][], usage: Record<string, number> | null = { prompt_tokens: 7, total_tokens: 7 }, indexes?: number[]) {
  return {
    json: {
      object: 'list',
      model: 'text-embedding-3-small',
      data: vectors.map((embedding, i) => ({ object: 'embedding', index: indexes ? indexes[i] : i, embedding })),
      ...(usage ? { usage } : {}),
    },
  }
}

/** A 200 with this exact body text (for what JSON.stringify cannot write). */
function raw(text: string) {
  return {
    handler: (_req: unknown, res: ServerResponse) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(text)
    },
  }
}

async function failure(t: Test, promise: Promise<unknown>, kind: EmbeddingError['kind']): Promise<EmbeddingError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  t.ok(err instanceof EmbeddingError, 'fails with an EmbeddingError')
  const error = err as EmbeddingError
  t.equal(error.kind, kind, `kind ${kind}: ${error.message}`)
  t.notMatch(error.message, KEY, 'the key is not in the message')
  t.notMatch(inspect(error, { depth: 8 }), KEY, 'nor anywhere in the error or its causes')
  return error
}

function close(t: Test, actual: ArrayLike<number>, expected: number[], message: string): void {
  t.equal(actual.length, expected.length, `${message}: length`)
  t.ok(
    expected.every((v, i) => Math.abs(actual[i]! - v) < 1e-6),
    `${message}: [${Array.from(actual).join(', ')}] ≈ [${expected.join(', ')}]`,
  )
}

t.test('the request: endpoint, key, body; the answer: normalised vectors in index order and usage tokens', async (t) => {
  const server = await upstream(t)
  server.script(
    answer(
      [
        [0, 0, 2],
        [3, 4, 0],
      ],
      { prompt_tokens: 11, total_tokens: 11 },
      [1, 0],
    ),
  )
  const { embedder } = make(server)
  const result = await embedder.embed(['first text', 'second text'])
  t.equal(server.requests.length, 1)
  const request = server.requests[0]!
  t.equal(request.method, 'POST')
  t.equal(request.path, '/v1/embeddings')
  t.equal(request.headers.authorization, `Bearer ${KEY}`)
  t.match(request.headers['content-type'], /^application\/json/)
  t.same(request.json, { model: 'text-embedding-3-small', input: ['first text', 'second text'], encoding_format: 'float' }, 'no dimensions member when none is configured')
  t.equal(result.vectors.length, 2)
  t.ok(result.vectors.every((v) => v instanceof Float32Array))
  close(t, result.vectors[0]!, [0.6, 0.8, 0], 'data with index 0 (sent second) comes first, unit length')
  close(t, result.vectors[1]!, [0, 0, 1], 'index 1, normalised')
  t.equal(result.tokens, 11, 'usage.prompt_tokens')
  t.equal(embedder.dims, 3, 'dimensions learned from the answer')
  t.equal(embedder.id, 'upstream:text-embedding-3-small:3')
  t.equal(embedder.mode, 'upstream')
  t.match(embedder.description, /text-embedding-3-small at 127\.0\.0\.1:\d+ \(3 dimensions\)/)
})

t.test('tokens: total_tokens when prompt_tokens is absent, undefined without usage', async (t) => {
  const server = await upstream(t)
  server.script(answer([[1, 0]], { total_tokens: 5 }), answer([[1, 0]], null), answer([[1, 0]], { prompt_tokens: -1 } as Record<string, number>))
  const { embedder } = make(server)
  t.equal((await embedder.embed(['a'])).tokens, 5)
  t.equal((await embedder.embed(['a'])).tokens, undefined, 'no usage: the caller counts')
  t.equal((await embedder.embed(['a'])).tokens, undefined, 'a nonsensical count is not used')
})

t.test('no key configured: no Authorization header', async (t) => {
  const server = await upstream(t)
  server.script(answer([[1]]))
  const { embedder } = make(server, { apiKey: undefined })
  await embedder.embed(['x'])
  t.equal(server.requests[0]!.headers.authorization, undefined)
})

t.test('the base URL may be given with or without /v1, with a trailing slash, or as the full endpoint', async (t) => {
  const server = await upstream(t)
  for (const url of [server.url, `${server.url}/`, `${server.url}/v1`, `${server.url}/v1/`, `${server.url}/v1/embeddings`]) {
    server.script(answer([[1, 1]]))
    await make(server, { url }).embedder.embed(['x'])
    t.equal(server.requests.at(-1)!.path, '/v1/embeddings', url)
  }
  t.equal(embeddingsEndpoint('https://api.example.test/openai'), 'https://api.example.test/openai/v1/embeddings', 'a path prefix is kept')
  t.equal(embeddingsEndpoint('https://api.example.test/openai/v1?x=1'), 'https://api.example.test/openai/v1/embeddings', 'a query is dropped')
  t.throws(() => embeddingsEndpoint('not a url'), TypeError)
  t.throws(() => embeddingsEndpoint('ftp://example.test'), TypeError)
  t.throws(() => createUpstreamEmbedder({ url: server.url, model: 'm', dimensions: 0, timeoutMs: 1000, retries: 0 }), RangeError)
  t.throws(() => createUpstreamEmbedder({ url: server.url, model: '', timeoutMs: 1000, retries: 0 }), TypeError)
  t.throws(() => createUpstreamEmbedder({ url: server.url, model: 'm', batchSize: 0, timeoutMs: 1000, retries: 0 }), RangeError)
})

t.test('inputs go out in batches, in order; tokens are summed (undefined if a batch reports none)', async (t) => {
  const server = await upstream(t)
  server.script(
    answer(
      [
        [1, 0],
        [0, 1],
      ],
      { prompt_tokens: 3 },
    ),
    answer(
      [
        [2, 0],
        [0, 2],
      ],
      { prompt_tokens: 4 },
    ),
    answer([[5, 5]], { prompt_tokens: 2 }),
  )
  const { embedder } = make(server, { batchSize: 2 })
  const result = await embedder.embed(['a', 'b', 'c', 'd', 'e'])
  t.same(
    server.requests.map((r) => (r.json as { input: string[] }).input),
    [['a', 'b'], ['c', 'd'], ['e']],
  )
  t.equal(result.vectors.length, 5)
  close(t, result.vectors[4]!, [Math.SQRT1_2, Math.SQRT1_2], 'the last batch')
  t.equal(result.tokens, 9)

  server.script(
    answer(
      [
        [1, 0],
        [0, 1],
      ],
      { prompt_tokens: 3 },
    ),
    answer([[1, 0]], null),
  )
  t.equal((await embedder.embed(['a', 'b', 'c'])).tokens, undefined, 'a partial sum would under-bill')

  const before = server.requests.length
  t.same(await embedder.embed([]), { vectors: [], tokens: 0 }, 'nothing to embed: no request')
  t.equal(server.requests.length, before)
  await t.rejects(embedder.embed(['a', 7 as unknown as string]), TypeError)
})

t.test('the default batch is 64', async (t) => {
  const server = await upstream(t)
  server.script(answer(Array.from({ length: 64 }, () => [1, 0])), answer([[1, 0]]))
  const { embedder } = make(server)
  t.equal((await embedder.embed(Array.from({ length: 65 }, (_, i) => `t${i}`))).vectors.length, 65)
  t.same(
    server.requests.map((r) => (r.json as { input: string[] }).input.length),
    [64, 1],
  )
})

t.test('dimensions: learned by probe() and then enforced', async (t) => {
  const server = await upstream(t)
  const { embedder } = make(server)
  t.equal(embedder.knownDims, undefined)
  const error = t.throws(() => embedder.id) as unknown
  t.ok(error instanceof EmbeddingError && error.kind === 'unavailable', 'id before the dimensions are known: unavailable')
  t.throws(() => embedder.dims)
  t.match(embedder.description, /dimensions not yet known/)
  server.script(answer([[1, 2, 3, 4]]))
  t.equal(await embedder.probe(), 4)
  t.same((server.requests[0]!.json as { input: string[] }).input.length, 1, 'the probe embeds one text')
  t.equal(embedder.id, 'upstream:text-embedding-3-small:4')
  server.script(answer([[1, 2, 3]]))
  const mismatch = await failure(t, embedder.embed(['later']), 'invalid_response')
  t.match(mismatch.message, /3 dimensions, expected 4/)
  t.equal(embedder.dims, 4, 'a bad answer does not change them')
})

t.test('dimensions configured: sent, and a different answer is invalid from the first one', async (t) => {
  const server = await upstream(t)
  const { embedder } = make(server, { dimensions: 3 })
  t.equal(embedder.id, 'upstream:text-embedding-3-small:3', 'known without a call')
  server.script(answer([[1, 2, 3, 4]]), answer([[1, 2, 2]]))
  await failure(t, embedder.embed(['x']), 'invalid_response')
  t.equal((server.requests[0]!.json as { dimensions: number }).dimensions, 3)
  t.equal(await embedder.probe(), 3, 'probe checks the configured dimensions are honoured')
})

t.test('429 with Retry-After, then success: waits as asked', async (t) => {
  const server = await upstream(t)
  server.script({ status: 429, text: 'slow down', headers: { 'retry-after': '2' } }, { status: 503, text: 'busy' }, answer([[1, 0]]))
  const { embedder, sleeps } = make(server)
  const result = await embedder.embed(['x'])
  t.equal(result.vectors.length, 1)
  t.equal(server.requests.length, 3)
  t.equal(sleeps[0], 2000, 'Retry-After: 2 → 2 s')
  t.equal(sleeps[1], 500, 'then jittered exponential back-off (0.5 × 1000 ms)')
})

t.test('a Retry-After beyond the cap is a quota: no waiting, upstream', async (t) => {
  const server = await upstream(t)
  server.script({ status: 429, headers: { 'retry-after': '3600' } })
  const { embedder, sleeps } = make(server)
  const error = await failure(t, embedder.embed(['x']), 'upstream')
  t.match(error.message, /Retry-After 3600 s exceeds/)
  t.same(sleeps, [])
})

t.test('500s exhaust the retries: upstream', async (t) => {
  const server = await upstream(t)
  server.script({ status: 500, text: 'boom' }, { status: 502 }, { status: 500, text: 'boom again' })
  const { embedder, sleeps } = make(server)
  const error = await failure(t, embedder.embed(['x']), 'upstream')
  t.equal(server.requests.length, 3, 'the first attempt and 2 retries')
  t.equal(sleeps.length, 2)
  t.match(error.message, /answered 500: boom again \(gave up after 3 attempts\)/)
  t.match(error.message, /^embeddings: 127\.0\.0\.1:\d+/)
})

t.test('a 4xx is final; the key an upstream echoes is redacted', async (t) => {
  const server = await upstream(t)
  server.script({ status: 401, text: `invalid api key ${KEY}` })
  const { embedder } = make(server)
  const error = await failure(t, embedder.embed(['x']), 'upstream')
  t.equal(server.requests.length, 1, 'not retried')
  t.match(error.message, /401: invalid api key \[redacted\]/)
})

t.test('credentials in the URL are refused up front (fetch would echo the URL in its error)', async (t) => {
  const server = await upstream(t)
  const url = server.url.replace('http://', `http://user:${KEY}@`)
  const error = t.throws(() => make(server, { url })) as Error
  t.ok(error instanceof TypeError)
  t.match(error.message, /must not hold credentials/)
  t.notMatch(inspect(error), KEY)
  t.equal(server.requests.length, 0)
})

t.test('a hanging upstream: timeout, after each attempt times out', async (t) => {
  const server = await upstream(t)
  server.script({ delayMs: 10_000 }, { delayMs: 10_000 })
  // The default deadline (timeoutMs × attempts) leaves no room for the back-off after a 150 ms
  // attempt; a roomier one shows the timeout is retried.
  const { embedder } = make(server, { timeoutMs: 150, retries: 1, deadlineMs: 5_000 })
  const started = Date.now()
  const error = await failure(t, embedder.embed(['x']), 'timeout')
  t.match(error.message, /did not answer within 150 ms/)
  t.equal(server.requests.length, 2)
  t.ok(Date.now() - started < 5_000, 'gave up well before the server answered')

  server.script({ delayMs: 10_000 }, { delayMs: 10_000 })
  const tight = make(server, { timeoutMs: 150, retries: 1 }).embedder
  await failure(t, tight.embed(['x']), 'timeout')
  t.equal(server.requests.length, 3, 'with the default deadline: no time left for a retry after the back-off')
})

t.test('the caller cancels: timeout, no retry', async (t) => {
  const server = await upstream(t)
  server.script({ delayMs: 10_000 })
  const { embedder } = make(server)
  const controller = new AbortController()
  setTimeout(() => controller.abort(), 50)
  const error = await failure(t, embedder.embed(['x'], { signal: controller.signal }), 'timeout')
  t.match(error.message, /cancelled by the caller/)
  t.equal(server.requests.length, 1)
})

t.test('connection refused: upstream, retried', async (t) => {
  const server = await upstream(t)
  const url = server.url
  await server.close()
  const { embedder, sleeps } = make(server, { url, retries: 1 })
  const error = await failure(t, embedder.embed(['x']), 'upstream')
  t.match(error.message, /connection refused/)
  t.equal(sleeps.length, 1)
})

t.test('an answer over the size cap: upstream', async (t) => {
  const server = await upstream(t)
  server.script(answer([Array.from({ length: 100 }, () => 0.123456789)]))
  await failure(t, make(server, { maxBytes: 200 }).embedder.embed(['x']), 'upstream')
})

t.test('answers that cannot be used: invalid_response, not retried', async (t) => {
  const cases: Array<[string, object, RegExp, number?]> = [
    ['not JSON', raw('{"data": ['), /not JSON/],
    ['an HTML error page', raw('<html>oops</html>'), /not JSON/],
    ['not an object', { json: [1, 2] }, /not an object/],
    ['no data', { json: { error: { message: 'nope' } } }, /no data array/],
    ['too few embeddings', answer([[1, 0]]), /1 embeddings for 2 inputs/, 2],
    [
      'too many embeddings',
      answer([
        [1, 0],
        [0, 1],
        [1, 1],
      ]),
      /3 embeddings for 2 inputs/,
      2,
    ],
    ['an index missing', { json: { data: [{ embedding: [1] }] } }, /data\[0\]\.index missing/],
    [
      'an index out of range',
      answer(
        [
          [1, 0],
          [0, 1],
        ],
        null,
        [0, 2],
      ),
      /index 2/,
      2,
    ],
    [
      'an index twice',
      answer(
        [
          [1, 0],
          [0, 1],
        ],
        null,
        [1, 1],
      ),
      /index 1 twice/,
      2,
    ],
    ['a fractional index', answer([[1, 0]], null, [0.5]), /index 0\.5/],
    ['a base64 embedding', { json: { data: [{ index: 0, embedding: 'AAAAAA==' }] } }, /a string \(encoding_format "float" ignored\?\)/],
    ['a null embedding', { json: { data: [{ index: 0, embedding: null }] } }, /not an array \(null\)/],
    ['an empty embedding', answer([[]]), /empty/],
    ['a string inside', answer([[1, '2' as unknown as number]]), /embedding\[1\] that is not a finite number \(a string\)/],
    ['a null inside (how JSON writes NaN)', answer([[1, Number.NaN]]), /embedding\[1\] that is not a finite number \(null\)/],
    ['an overflow to Infinity', raw('{"data":[{"index":0,"embedding":[1e999, 1]}]}'), /embedding\[0\] that is not a finite number \(Infinity\)/],
    [
      'vectors of different widths in one answer',
      answer([
        [1, 0],
        [1, 0, 0],
      ]),
      /data\[1\]\.embedding of 3 dimensions, expected 2/,
      2,
    ],
    ['an all-zero vector', answer([[0, 0, 0]]), /all zeros/],
  ]
  for (const [name, step, message, inputs = 1] of cases) {
    await t.test(name, async (t) => {
      const server = await upstream(t)
      server.script(step as never, answer([[1, 0]]))
      const error = await failure(t, make(server).embedder.embed(Array.from({ length: inputs }, (_, i) => `text ${i}`)), 'invalid_response')
      t.match(error.message, message)
      t.match(error.message, /^embeddings: 127\.0\.0\.1:\d+ answered with /)
      t.equal(server.requests.length, 1, 'not retried')
    })
  }
})
