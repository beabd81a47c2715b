// The registry is the product's contract: every SPEC operation, its schemas, prices and proofs.
// Schemas are compiled with ajv configured as fastify is configured (src/platform/http.ts): query
// strings, path parameters and headers with type coercion, JSON bodies without.
import t from 'tap'
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { TSchema } from '@sinclair/typebox'
import { registry, allOperations, findOperation, findPlan, findService, serviceOf } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { buildGuide } from '../../src/catalog/advisor.ts'
import { createServiceApp } from '../../src/catalog/service-app.ts'
import { guideHandlers } from '../../src/catalog/routes.ts'
import { llmsFullTxt, llmsTxt, scopedLlmsTxt } from '../../src/catalog/documents.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

const warnings: string[] = []
function fastifyAjv(coerceTypes: 'array' | false): Ajv {
  const ajv = new Ajv({
    coerceTypes,
    useDefaults: true,
    removeAdditional: false,
    allErrors: false,
    addUsedSchema: false,
    logger: { log: () => {}, warn: (...args: unknown[]) => warnings.push(args.join(' ')), error: (...args: unknown[]) => warnings.push(args.join(' ')) },
  })
  addFormats(ajv)
  return ajv
}
const ajv = fastifyAjv('array')
const bodyAjv = fastifyAjv(false)

function compile(schema: TSchema, part?: string): ValidateFunction {
  return (part === 'body' ? bodyAjv : ajv).compile(JSON.parse(JSON.stringify(schema)) as object)
}

function schemaOf(operationId: string, part: 'body' | 'querystring' | 'params' | 'headers'): ValidateFunction {
  const operation = findOperation(operationId)
  const schema = operation?.schemas[part]
  if (!schema) throw new Error(`${operationId} has no ${part} schema`)
  return compile(schema, part)
}

function check(validate: ValidateFunction, data: unknown): { ok: boolean; data: unknown; errors: ErrorObject[] } {
  const copy = structuredClone(data)
  const ok = validate(copy)
  return { ok, data: copy, errors: validate.errors ?? [] }
}

const operations = allOperations()
const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }

t.test('every schema compiles under fastify ajv options, strict mode, without warnings', async (t) => {
  let count = 0
  for (const operation of operations) {
    const parts = { ...operation.schemas, response: undefined }
    for (const [part, schema] of Object.entries(parts)) {
      if (!schema) continue
      t.doesNotThrow(() => compile(schema as TSchema, part), `${operation.operationId} ${part}`)
      count += 1
    }
    for (const [status, schema] of Object.entries(operation.schemas.response)) {
      t.doesNotThrow(() => compile(schema), `${operation.operationId} response ${status}`)
      count += 1
    }
  }
  t.ok(count > 100, `${count} schemas compiled`)
  t.same(warnings, [], 'ajv logged no strict-mode warnings')
})

t.test('schemas are plain JSON Schema: no bigint, no $id/$ref', async (t) => {
  const walk = (value: unknown, path: string): void => {
    if (typeof value === 'bigint') t.fail(`bigint at ${path}`)
    if (value && typeof value === 'object') {
      for (const [key, child] of Object.entries(value)) {
        if (key === '$id' || key === '$ref') t.fail(`${key} at ${path}`)
        walk(child, `${path}.${key}`)
      }
    }
  }
  for (const operation of operations) {
    walk(operation.schemas, operation.operationId)
    t.doesNotThrow(() => JSON.stringify(operation.schemas), `${operation.operationId} serializes`)
  }
})

t.test('operation ids are unique camelCase, every operation is well-formed', async (t) => {
  const ids = operations.map((operation) => operation.operationId)
  t.equal(new Set(ids).size, ids.length, 'unique operationIds')
  const routes = operations.map((operation) => `${operation.server} ${operation.method} ${operation.path}`)
  t.equal(new Set(routes).size, routes.length, 'unique (server, method, path)')
  for (const operation of operations) {
    t.match(operation.operationId, /^[a-z][a-zA-Z0-9]*$/, `${operation.operationId} is camelCase`)
    t.ok(operation.summary.length > 10 && operation.summary.length <= 120, `${operation.operationId} summary`)
    t.ok(operation.description.length >= 80, `${operation.operationId} description is useful`)
    t.ok(operation.tags.length > 0, `${operation.operationId} tags`)
    t.ok((operation.keywords ?? []).length > 0, `${operation.operationId} keywords`)
    t.ok(
      Object.keys(operation.schemas.response).some((status) => Number(status) < 300),
      `${operation.operationId} has a success response`,
    )
    const service = serviceOf(operation.operationId)
    t.equal(service?.slug, operation.service, `${operation.operationId} lives in its service`)
    t.equal(service?.server, operation.server, `${operation.operationId} runs on its service's server`)
    const pathParams = [...operation.path.matchAll(/\{([^}]+)\}/g)].map((match) => match[1])
    const declared = Object.keys((operation.schemas.params as { properties?: object } | undefined)?.properties ?? {})
    t.same(declared.sort(), pathParams.sort(), `${operation.operationId} declares its path parameters`)
    if (operation.method === 'GET' || operation.method === 'DELETE') t.notOk(operation.schemas.body, `${operation.operationId} has no body`)
    if (operation.pricing.kind === 'free') t.not(operation.proof, 'payment', `${operation.operationId}: free operations ask no payment`)
    if (operation.pricing.kind === 'amount-header') {
      const header = operation.pricing.header
      const headers = operation.schemas.headers as { properties?: Record<string, unknown> } | undefined
      t.ok(headers?.properties?.[header], `${operation.operationId} declares ${header}`)
    }
    if (operation.access === 'plan') t.equal(operation.proof, 'plan-bearer')
  }
})

// Every endpoint SPEC.md names (server, method, path, access, proof).
const SPEC_OPERATIONS: [string, string, string, string, string][] = [
  ['gateway', 'POST', '/api/v1/annotate/reviews', 'plan', 'plan-bearer'],
  ['gateway', 'POST', '/api/v1/audio/songs/songmodel-3-pro', 'payg', 'payment'],
  ['gateway', 'POST', '/api/v1/audio/speech/speechmodel-3.1-flash-tts', 'payg', 'payment'],
  ['gateway', 'POST', '/advisor/agent/quote', 'payg', 'wallet'],
  ['gateway', 'GET', '/advisor/agent/guide', 'payg', 'none'],
  ['gateway', 'POST', '/advisor/agent/guide', 'payg', 'none'],
  ['gateway', 'POST', '/plans/{planId}/purchase', 'payg', 'payment'],
  ['gateway', 'POST', '/auth/register', 'payg', 'none'],
  // Ours, where SPEC leaves claims (free included units) "not shown":
  ['gateway', 'POST', '/auth/claim', 'payg', 'agent-bearer'],
  ['gateway', 'POST', '/auth/claim/verify', 'payg', 'none'],
  // Ours, beyond SPEC: reading a review (for agents that cannot receive callbacks) and the reviewer
  // page's one submission (SPEC says only that the review is POSTed to callbackUrl).
  ['gateway', 'GET', '/api/v1/annotate/reviews/{reviewId}', 'payg', 'agent-bearer'],
  ['gateway', 'POST', '/reviews/{capability}/submission', 'payg', 'none'],
  ['scheduler', 'GET', '/api/v1', 'payg', 'none'],
  ['scheduler', 'GET', '/api/v1/rates', 'payg', 'none'],
  ['scheduler', 'GET', '/api/v1/_siblings', 'payg', 'none'],
  ['scheduler', 'POST', '/api/v1/tasks', 'payg', 'payment'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/fund', 'payg', 'payment'],
  ['scheduler', 'POST', '/api/v1/tasks/clone', 'payg', 'wallet'],
  ['scheduler', 'PATCH', '/api/v1/tasks/{id}', 'payg', 'wallet'],
  ['scheduler', 'PUT', '/api/v1/tasks/{id}/env', 'payg', 'wallet'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/pause', 'payg', 'wallet'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/resume', 'payg', 'wallet'],
  ['scheduler', 'PUT', '/api/v1/tasks/{id}/webhook', 'payg', 'wallet'],
  ['scheduler', 'DELETE', '/api/v1/tasks/{id}/webhook', 'payg', 'wallet'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/webhook', 'payg', 'webhook-secret'],
  ['scheduler', 'GET', '/api/v1/tasks/{id}', 'payg', 'wallet'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/runs', 'payg', 'wallet'],
  ['scheduler', 'POST', '/api/v1/tasks/{id}/trigger', 'payg', 'wallet'],
  ['scheduler', 'GET', '/api/v1/tasks/{id}/runs', 'payg', 'wallet'],
  ['scheduler', 'GET', '/api/v1/runs/{id}', 'payg', 'wallet'],
  ['scheduler', 'GET', '/api/v1/owner/usage', 'payg', 'wallet'],
  ['scheduler', 'GET', '/api/v1/tasks/{id}/ledger', 'payg', 'wallet'],
  ['scheduler', 'DELETE', '/api/v1/tasks/{id}', 'payg', 'wallet'],
  ['scheduler', 'GET', '/api/v1/account', 'payg', 'api-key'],
  ['scheduler', 'GET', '/api/v1/account/keys', 'payg', 'api-key'],
  ['scheduler', 'GET', '/api/v1/account/ledger', 'payg', 'api-key'],
  ['scheduler', 'DELETE', '/api/v1/account/keys/{id}', 'payg', 'api-key'],
  // Ours: SPEC does not show how an account key is issued; the paying wallet asks for one.
  ['scheduler', 'POST', '/api/v1/account/keys', 'payg', 'wallet'],
  ['memory', 'POST', '/api/v1/memories', 'payg', 'payment'],
  ['memory', 'POST', '/api/v1/deposits', 'payg', 'payment'],
  ['memory', 'POST', '/api/v1/contexts', 'payg', 'wallet'],
  ['memory', 'POST', '/api/v1/contexts/expand', 'payg', 'wallet'],
  ['memory', 'GET', '/api/v1/account', 'payg', 'wallet'],
  ['memory', 'DELETE', '/api/v1/deposits', 'payg', 'wallet'],
]

t.test('every SPEC endpoint is registered with its access and proof, and nothing else', async (t) => {
  for (const [server, method, path, access, proof] of SPEC_OPERATIONS) {
    const found = operations.find((operation) => operation.server === server && operation.method === method && operation.path === path)
    if (!found) {
      t.fail(`missing ${server} ${method} ${path}`)
      continue
    }
    t.equal(found.access, access, `${method} ${path} access`)
    t.equal(found.proof, proof, `${method} ${path} proof`)
  }
  t.equal(operations.length, SPEC_OPERATIONS.length, 'no unlisted operation')
  const schedulerPaths = operations.filter((operation) => operation.server === 'scheduler').map((operation) => operation.path)
  t.ok(
    schedulerPaths.every((path) => path.startsWith('/api/v1')),
    'scheduler operations live under /api/v1',
  )
})

t.test('prices, meters and plans', async (t) => {
  const songs = findService('songmodel-3-pro')
  t.same(songs?.meter, { name: 'songs', unit: 'song', unitPriceMicros: 80_000n, includedUnits: 1 })
  t.equal(songs?.access, 'payg')
  t.same(findOperation('generateSongs')?.pricing, { kind: 'per-unit', unitsFromBody: 'candidateCount', defaultUnits: 1, maxUnits: 3 })

  const reviews = findService('reviews-create')
  t.same(reviews?.meter, { name: 'requests', unit: 'request', unitPriceMicros: 20_000n, includedUnits: 0 })
  t.equal(reviews?.access, 'plan')
  t.same(findOperation('createReviewSession')?.pricing, { kind: 'plan-credit' })
  t.match(findPlan('reviews-credit-5'), { kind: 'credit', priceMicros: 5_000_000n, creditMicros: 5_000_000n, covers: ['reviews-create'] })
  t.match(findPlan('reviews-monthly'), { kind: 'subscription', priceMicros: 15_000_000n, periodDays: 30, callsPerPeriod: 1000, covers: ['reviews-create'] })

  t.same(findService('speechmodel-3.1-flash-tts')?.meter, { name: 'speech-characters', unit: '1000 characters', unitPriceMicros: 15_000n, includedUnits: 0 })
  t.same(findOperation('synthesizeSpeech')?.pricing, { kind: 'per-unit', unitsFromText: { field: 'input', perCharacters: 1000 }, maxUnits: 5 })
  t.same(findService('memory')?.meter, { name: 'memory-ops', unit: 'ops', unitPriceMicros: 1_000n, includedUnits: 0 })
  t.same(findOperation('purchasePlan')?.pricing, { kind: 'plan-price' })
  for (const id of ['createTask', 'fundTask', 'depositMemoryFunds']) {
    t.same(findOperation(id)?.pricing, { kind: 'amount-header', header: 'x-pay-amount-micros' }, `${id} amount header`)
  }
  for (const id of ['postAgentQuote', 'getAgentGuide', 'postAgentGuide', 'registerAgent', 'recallMemories', 'getTask']) {
    t.same(findOperation(id)?.pricing, { kind: 'free' }, `${id} is free`)
  }
  t.notOk(findService('advisor')?.meter, 'advisor has no meter')

  const catalog = createCatalog(registry, { urls, implemented: new Set() })
  const song = catalog.operations.find((entry) => entry.spec.operationId === 'generateSongs')
  t.match(song?.paymentInfo, { access: 'payg', price: { amountMicros: '80000', amountUsd: '0.080000', per: 'song' }, includedUnits: 1 })
  t.same(song?.paymentInfo.protocols, ['x402'], 'MPP charges are listed only when the catalog is told they are offered (mppCharges)')
  const review = catalog.operations.find((entry) => entry.spec.operationId === 'createReviewSession')
  t.match(review?.paymentInfo, { access: 'plan', price: { amountMicros: '20000', per: 'request' }, plans: ['reviews-credit-5', 'reviews-monthly'], protocols: [] })
})

t.test('song request body', async (t) => {
  const validate = schemaOf('generateSongs', 'body')
  // SPEC: prompt and candidateCount are both required (clients send candidateCount 1 for one song).
  const minimal = check(validate, { prompt: 'lofi beat with warm rhodes', candidateCount: 1 })
  t.ok(minimal.ok, 'prompt and candidateCount are enough')
  t.equal((minimal.data as { candidateCount: number }).candidateCount, 1)
  t.same((findOperation('generateSongs')!.schemas.body as { required?: string[] }).required, ['prompt', 'candidateCount'], 'both required in the schema')

  const full = {
    prompt: 'upbeat synthwave, female vocals',
    candidateCount: 3,
    seed: -9007199254740991,
    topP: 0.9,
    temperature: 1.2,
    durationSec: 120,
    instrumental: false,
    negativePrompt: 'no distortion',
    tailReserveSec: 4,
    sections: [
      { name: 'intro', startSec: 0, endSec: 10, description: 'pads only' },
      { name: 'chorus', startSec: 10, endSec: 40, description: 'full band', intensity: 9 },
    ],
    mastering: { targetLufs: -12 },
    selectionTarget: { bpm: 118, matchPriorities: { groove: 5, harmony: 1, structure: 3, production: 4, instrumentation: 2 } },
    referenceImageUrls: ['https://example.com/cover.png'],
    instrumentalLeadMapping: [{ role: 'lead', instrument: 'saxophone', register: 'mid', articulation: 'breathy legato' }],
    instrumentalLeadContinuity: 'persistent',
  }
  const ok = check(validate, full)
  t.ok(ok.ok, 'full body valid', { errors: ok.errors })
  t.same((ok.data as typeof full).mastering, { targetLufs: -12, truePeakDb: -1, fadeOutSec: 1 }, 'mastering defaults applied')
  t.same((check(validate, { prompt: 'x', candidateCount: 1, mastering: {} }).data as typeof full).mastering, { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 })

  const bad: [string, unknown][] = [
    ['prompt of 4001 characters', { prompt: 'x'.repeat(4001) }],
    ['empty prompt', { prompt: '' }],
    ['missing prompt', { candidateCount: 1 }],
    ['missing candidateCount', { prompt: 'x' }],
    ['candidateCount 4', { prompt: 'x', candidateCount: 4 }],
    ['candidateCount 0', { prompt: 'x', candidateCount: 0 }],
    ['candidateCount 1.5', { prompt: 'x', candidateCount: 1.5 }],
    ['unknown field', { prompt: 'x', style: 'jazz' }],
    ['unknown nested field', { prompt: 'x', mastering: { targetLufs: -14, limiter: true } }],
    ['durationSec 29', { prompt: 'x', durationSec: 29 }],
    ['durationSec 301', { prompt: 'x', durationSec: 301 }],
    ['seed beyond 2^53', { prompt: 'x', seed: 9007199254740992 }],
    ['topP 1.1', { prompt: 'x', topP: 1.1 }],
    ['temperature 2.5', { prompt: 'x', temperature: 2.5 }],
    ['negativePrompt 1001', { prompt: 'x', negativePrompt: 'n'.repeat(1001) }],
    ['tailReserveSec 16', { prompt: 'x', tailReserveSec: 16 }],
    ['21 sections', { prompt: 'x', sections: Array.from({ length: 21 }, (_, i) => ({ name: `s${i}`, startSec: i, endSec: i + 1, description: 'd' })) }],
    ['section without description', { prompt: 'x', sections: [{ name: 'a', startSec: 0, endSec: 5 }] }],
    ['section endSec 0', { prompt: 'x', sections: [{ name: 'a', startSec: 0, endSec: 0, description: 'd' }] }],
    ['section intensity 11', { prompt: 'x', sections: [{ name: 'a', startSec: 0, endSec: 5, description: 'd', intensity: 11 }] }],
    ['targetLufs -7', { prompt: 'x', mastering: { targetLufs: -7 } }],
    ['truePeakDb 0', { prompt: 'x', mastering: { truePeakDb: 0 } }],
    ['fadeOutSec 11', { prompt: 'x', mastering: { fadeOutSec: 11 } }],
    ['bpm 241', { prompt: 'x', selectionTarget: { bpm: 241 } }],
    ['weight 6', { prompt: 'x', selectionTarget: { matchPriorities: { groove: 6 } } }],
    ['unknown priority', { prompt: 'x', selectionTarget: { matchPriorities: { vibe: 3 } } }],
    ['11 reference images', { prompt: 'x', referenceImageUrls: Array.from({ length: 11 }, (_, i) => `https://e.com/${i}.png`) }],
    ['reference image not a URI', { prompt: 'x', referenceImageUrls: ['not a uri'] }],
    ['reference image 2049 chars', { prompt: 'x', referenceImageUrls: [`https://e.com/${'a'.repeat(2035)}`] }],
    ['empty lead mapping', { prompt: 'x', instrumentalLeadMapping: [] }],
    ['9 lead mappings', { prompt: 'x', instrumentalLeadMapping: Array.from({ length: 9 }, () => ({ role: 'lead', instrument: 'sax' })) }],
    ['bad role', { prompt: 'x', instrumentalLeadMapping: [{ role: 'singer', instrument: 'sax' }] }],
    ['missing instrument', { prompt: 'x', instrumentalLeadMapping: [{ role: 'lead' }] }],
    ['bad register', { prompt: 'x', instrumentalLeadMapping: [{ role: 'lead', instrument: 'sax', register: 'ultra' }] }],
    ['bad continuity', { prompt: 'x', instrumentalLeadContinuity: 'always' }],
  ]
  // Each bad body is otherwise complete, so it is refused for what its name says.
  const complete = (name: string, body: unknown) => (name === 'missing candidateCount' ? body : { candidateCount: 1, ...(body as object) })
  for (const [name, body] of bad) t.notOk(check(validate, complete(name, body)).ok, `rejects ${name}`)
  const tooLong = check(validate, { prompt: 'x'.repeat(4001), candidateCount: 1 })
  t.match(tooLong.errors[0], { instancePath: '/prompt', keyword: 'maxLength' }, 'error names the field')
})

t.test('song response schema matches SPEC', async (t) => {
  const validate = compile(findOperation('generateSongs')!.schemas.response[200]!)
  const analysis = {
    durationSec: 120,
    tempo: { bpm: 120, beatOffsetSec: 0.1, beatIntervalSec: 0.5, downbeatOffsetBeats: 0, downbeatConfidence: 0.8 },
    brightness: [0.2, 0.4],
    energy: [0.5, 0.9],
    sections: [{ kind: 'verse', startSec: 0, endSec: 30 }],
    cues: { mixInSec: 0, mixOutSec: 110 },
    key: { tonic: 'A', mode: 'minor', camelot: '8A', confidence: 0.7 },
    stereo: { correlation: 0.3, sideToMidRatio: 0.4 },
    loudness: { integratedLufs: -14, rangeLu: 6, truePeakDb: -1 },
  }
  const result = {
    url: 'https://cdn.example/song.mp3',
    mimeType: 'audio/mpeg',
    sizeBytes: 1_000_000,
    seconds: 120,
    model: 'songmodel-3-pro',
    price_usdc: '0.160000',
    candidates: [
      {
        index: 0,
        url: 'https://cdn.example/0.mp3',
        sizeBytes: 10,
        seconds: 1,
        seed: 42,
        score: { overall: 0.8, duration: 1, production: 0.7, groove: null, structure: 0.5 },
        diagnostics: analysis,
      },
    ],
    diagnostics: { final: analysis, beforeMastering: analysis },
    selectionNotes: ['closest tempo'],
    selectionMethod: 'local-dsp',
    selectedCandidate: 0,
    generationFailures: 0,
  }
  t.ok(check(validate, result).ok, 'full result valid')
  t.notOk(check(validate, { ...result, selectionMethod: 'llm' }).ok, 'selectionMethod is local-dsp')
  t.notOk(check(validate, { ...result, diagnostics: { final: { ...analysis, extra: 1 } } }).ok, 'Analysis has no extra properties')
  const { cues: _cues, ...noCues } = analysis
  t.notOk(check(validate, { ...result, diagnostics: { final: noCues } }).ok, 'cues required')
  t.notOk(check(validate, { ...result, diagnostics: { final: { ...analysis, tempo: { ...analysis.tempo, downbeatOffsetBeats: 4 } } } }).ok, 'downbeatOffsetBeats <= 3')
  const candidate = result.candidates[0]!
  t.notOk(check(validate, { ...result, candidates: [{ ...candidate, score: { ...candidate.score, groove: 1.5 } }] }).ok, 'score bounds')
  t.notOk(check(validate, { ...result, candidates: [{ ...candidate, sizeBytes: 0 }] }).ok, 'sizeBytes > 0')
})

t.test('review request body', async (t) => {
  const validate = schemaOf('createReviewSession', 'body')
  const byUrl = check(validate, { url: 'https://example.com/page', callbackUrl: 'https://agent.example/hook' })
  t.ok(byUrl.ok, 'url form valid', { errors: byUrl.errors })
  t.equal((byUrl.data as { entryFile: string }).entryFile, 'index.html', 'entryFile default fills the required field')
  const byZip = check(validate, { zipData: Buffer.from('PK\u0003\u0004 fake zip').toString('base64'), entryFile: 'docs/start.html' })
  t.ok(byZip.ok, 'zip form valid', { errors: byZip.errors })
  const schema = JSON.parse(JSON.stringify(findOperation('createReviewSession')!.schemas.body)) as { required: string[]; properties: Record<string, { maxLength?: number }> }
  t.ok(schema.required.includes('entryFile'), 'entryFile is marked required')
  t.equal(schema.properties.zipData?.maxLength, undefined, 'the 10 MiB cap is the zip reader’s (413 zip_too_large), not a schema count of 14 MB')

  t.notOk(check(validate, { url: 'not a url' }).ok, 'url must be a URI')
  t.notOk(check(validate, { url: 'https://e.com', callbackUrl: 'nope' }).ok, 'callbackUrl must be a URI')
  t.notOk(check(validate, { url: 'https://e.com', reviewer: 'bob' }).ok, 'unknown field rejected')
  t.notOk(check(validate, { zipData: 'UEsDBA==', entryFile: '../etc/passwd' }).ok, 'entryFile cannot escape the bundle')
  t.notOk(check(validate, { zipData: 'UEsDBA==', entryFile: '/index.html' }).ok, 'entryFile is relative')

  const response = compile(findOperation('createReviewSession')!.schemas.response[201]!)
  const session = {
    reviewId: '7f1c1a2e-6d0b-4c39-9e1e-2f5d3c1b8a90',
    shareUrl: 'https://r.example/s/1',
    statusUrl: 'https://r.example/api/v1/annotate/reviews/7f1c1a2e-6d0b-4c39-9e1e-2f5d3c1b8a90',
  }
  t.ok(check(response, session).ok)
  t.notOk(check(response, { ...session, reviewId: 'nope' }).ok, 'reviewId is a UUID')
})

t.test('task create body, headers and PATCH', async (t) => {
  const validate = schemaOf('createTask', 'body')
  const base = { runtime: 'python', source: 'print("hi")', entrypoint: 'main.py', max_runtime_sec: 60, max_sibling_calls: 0, max_amount_usdc_micros: 1_000_000 }
  t.ok(check(validate, base).ok, 'on-demand plain script')
  const cron = check(validate, { ...base, schedule: { cron: '0 * * * *', timezone: 'Europe/Berlin' } })
  t.ok(cron.ok, 'cron form', { errors: cron.errors })
  t.ok(check(validate, { ...base, schedule: { every: 'weekly', at: '09:30', dayOfWeek: 'mon', timezone: 'UTC' } }).ok, 'weekly convenience form')
  t.ok(check(validate, { ...base, schedule: { every: 'hourly' } }).ok, 'hourly convenience form')
  const full = check(validate, {
    ...base,
    runtime: 'node',
    entrypoint: 'index.js',
    max_sibling_calls: 5,
    tool_list: ['screenshot', 'cdn'],
    max_sibling_spend_micros: '250000',
    dependencies: ['lodash@4.17.21', '@scope/pkg@^1.2.0'],
    env: { API_TOKEN: 'secret', _X: '' },
    notify_email: 'me@example.com',
    end_at: '2030-01-01T00:00:00Z',
    llm: { profile: 'quick', max_cost_usdc_micros_per_run: 20000 },
    artifacts: { enabled: true },
  })
  t.ok(full.ok, 'full body', { errors: full.errors })
  t.ok(check(validate, { ...base, dependencies: ['requests==2.32.3', 'numpy>=2', 'uvicorn[standard]'] }).ok, 'python dependency specs')

  const open = { ...base, max_sibling_calls: 3 }
  t.notOk(check(validate, open).ok, 'max_sibling_spend_micros required when tool_list unset and calls > 0')
  t.ok(check(validate, { ...open, max_sibling_spend_micros: 100000 }).ok, 'spend as number')
  const huge = check(validate, { ...open, max_sibling_spend_micros: '9007199254740993001' })
  t.ok(huge.ok, 'spend as a 19-digit string beyond 2^53')
  t.equal((huge.data as { max_sibling_spend_micros: unknown }).max_sibling_spend_micros, '9007199254740993001', 'kept exact, not coerced to a float')
  const asNumber = check(validate, { ...open, max_sibling_spend_micros: 250000 })
  t.equal((asNumber.data as { max_sibling_spend_micros: unknown }).max_sibling_spend_micros, 250000, 'a JSON integer is kept as it is (bodies are not coerced)')
  t.notOk(check(validate, { ...open, max_sibling_spend_micros: 1.5 }).ok, 'a fractional number is no micros')
  t.notOk(check(validate, { ...base, max_runtime_sec: '10' }).ok, 'a digit string for a number field is rejected (bodies are not coerced)')
  t.notOk(check(validate, { ...base, max_sibling_calls: '0' }).ok, 'a digit string for an integer field is rejected')
  t.notOk(check(validate, { ...base, env: { N: 1 } }).ok, 'a number for a string env value is rejected')
  t.notOk(check(validate, { ...base, artifacts: { enabled: 'true' } }).ok, 'a string for a boolean is rejected')
  t.notOk(check(validate, { ...open, max_sibling_spend_micros: '12345678901234567890' }).ok, 'at most 19 digits')
  t.ok(check(validate, { ...open, tool_list: ['cdn'] }).ok, 'tool_list set: spend optional')

  const bad: [string, unknown][] = [
    ['unknown field', { ...base, priority: 1 }],
    ['runtime ruby', { ...base, runtime: 'ruby' }],
    ['missing source', { ...base, source: undefined }],
    ['source over 256 KiB', { ...base, source: 'x'.repeat(262145) }],
    ['max_runtime_sec 0', { ...base, max_runtime_sec: 0 }],
    ['max_runtime_sec 3601', { ...base, max_runtime_sec: 3601 }],
    ['max_sibling_calls 101', { ...base, max_sibling_calls: 101, tool_list: ['cdn'] }],
    ['max_sibling_calls negative', { ...base, max_sibling_calls: -1 }],
    ['max_amount 0', { ...base, max_amount_usdc_micros: 0 }],
    ['entrypoint with a directory', { ...base, entrypoint: '../main.py' }],
    ['schedule mixing forms', { ...base, schedule: { cron: '* * * * *', every: 'daily' } }],
    ['weekly without dayOfWeek', { ...base, schedule: { every: 'weekly', at: '09:00' } }],
    ['every yearly', { ...base, schedule: { every: 'yearly' } }],
    ['at 25:00', { ...base, schedule: { every: 'daily', at: '25:00' } }],
    ['dayOfWeek monday', { ...base, schedule: { every: 'weekly', dayOfWeek: 'monday' } }],
    ['unknown schedule field', { ...base, schedule: { cron: '* * * * *', jitter: 5 } }],
    ['negative spend', { ...base, max_sibling_calls: 1, max_sibling_spend_micros: '-5' }],
    ['decimal spend', { ...base, max_sibling_calls: 1, max_sibling_spend_micros: '1.5' }],
    ['21 dependencies', { ...base, dependencies: Array.from({ length: 21 }, (_, i) => `pkg${i}`) }],
    ['dependency with a shell', { ...base, dependencies: ['x; rm -rf /'] }],
    ['env key with a dash', { ...base, env: { 'BAD-KEY': 'v' } }],
    ['env value too long', { ...base, env: { K: 'v'.repeat(4097) } }],
    ['env value not a string', { ...base, env: { K: { nested: true } } }],
    ['51 env keys', { ...base, env: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`K${i}`, 'v'])) }],
    ['notify_email not an e-mail', { ...base, notify_email: 'nobody' }],
    ['end_at not a timestamp', { ...base, end_at: 'tomorrow' }],
    ['llm profile turbo', { ...base, llm: { profile: 'turbo' } }],
    ['llm unknown field', { ...base, llm: { profile: 'quick', model: 'x' } }],
    ['artifacts without enabled', { ...base, artifacts: {} }],
  ]
  for (const [name, body] of bad) t.notOk(check(validate, body).ok, `rejects ${name}`)

  const headers = schemaOf('createTask', 'headers')
  t.ok(check(headers, { 'idempotency-key': 'k-1', 'x-pay-amount-micros': '1000000', host: 'x' }).ok, 'headers valid, others allowed')
  t.notOk(check(headers, { 'x-pay-amount-micros': '1000000' }).ok, 'Idempotency-Key required')
  t.notOk(check(headers, { 'idempotency-key': 'k', 'x-pay-amount-micros': '1e6' }).ok, 'amount is a digit string')
  // X-Pay-Amount-Micros is optional in the schema: the marketplace rail funds with a plan token and
  // no amount header; the direct rail's precheck requires it (test/integration/scheduler-marketplace.test.ts).
  t.ok(check(schemaOf('fundTask', 'headers'), { 'idempotency-key': 'k' }).ok, 'fund without X-Pay-Amount-Micros (marketplace rail)')
  t.notOk(check(schemaOf('fundTask', 'headers'), { 'x-pay-amount-micros': '1000' }).ok, 'fund needs Idempotency-Key')
  t.ok(check(schemaOf('fundTask', 'body'), { top_up_amount_micros: '500000' }).ok, 'fund body')
  t.notOk(check(schemaOf('fundTask', 'body'), { top_up_amount_micros: 0 }).ok, 'fund amount > 0')

  const patch = schemaOf('updateTask', 'body')
  t.ok(check(patch, { max_runtime_sec: 120, notify_email: null }).ok, 'mutable fields')
  t.ok(check(patch, { runtime: 'node' }).ok, 'immutable fields pass the schema so the handler can answer IMMUTABLE_FIELD')
  t.notOk(check(patch, {}).ok, 'empty patch rejected')
  t.notOk(check(patch, { max_runtime_sec: 5000 }).ok, 'bounds still apply')

  const runs = schemaOf('listTaskRuns', 'querystring')
  const page = check(runs, {})
  t.same(page.data, { limit: 20 }, 'limit defaults to 20')
  t.ok(check(runs, { limit: '100', cursor: 'abc' }).ok, 'query strings coerce')
  t.notOk(check(runs, { limit: '101' }).ok, 'limit <= 100')
  t.notOk(check(runs, { page: '2' }).ok, 'unknown query parameter rejected')
})

t.test('speech, advisor and memory bodies', async (t) => {
  const speech = schemaOf('synthesizeSpeech', 'body')
  const said = check(speech, { input: 'hello' })
  t.ok(said.ok)
  t.equal((said.data as { format: string }).format, 'wav', 'format defaults to wav')
  t.notOk(check(speech, { input: '' }).ok, 'empty input')
  t.ok(check(speech, { input: 'x'.repeat(4096) }).ok, 'input of 4096 characters')
  t.notOk(check(speech, { input: 'x'.repeat(4097) }).ok, 'input <= 4096')
  t.ok(check(speech, { input: '😀'.repeat(4096) }).ok, 'the cap counts characters, not UTF-16 units')
  t.notOk(check(speech, { input: 'x', format: 'mp3' }).ok, 'wav only')
  t.notOk(check(speech, { input: 'x', speed: 3 }).ok, 'speed <= 2')
  t.notOk(check(speech, { input: 'x', voice: 'darth' }).ok, 'listed voices only')
  t.notOk(check(speech, { text: 'x' }).ok, 'the field is input')

  const guide = schemaOf('getAgentGuide', 'querystring')
  t.ok(check(guide, { goal: 'make a song' }).ok)
  t.notOk(check(guide, {}).ok, 'goal required')
  const quote = schemaOf('postAgentQuote', 'body')
  t.ok(check(quote, { goal: 'song', budgetMicros: '100000', requirements: ['mp3'] }).ok)
  t.notOk(check(quote, { goal: 'song', budgetMicros: '-1' }).ok)

  t.ok(check(schemaOf('rememberMemory', 'body'), { content: 'the user prefers dark mode', context: 'user/alice', tags: ['prefs'], metadata: { source: 'chat' } }).ok)
  t.notOk(check(schemaOf('rememberMemory', 'body'), { content: 'x'.repeat(32769) }).ok, 'content <= 32768')
  const recall = check(schemaOf('recallMemories', 'body'), { query: 'dark mode' })
  t.same(recall.data, { query: 'dark mode', limit: 10 }, 'recall limit defaults to 10')
  t.notOk(check(schemaOf('recallMemories', 'body'), { query: 'x', limit: 51 }).ok)
  t.notOk(check(schemaOf('expandMemories', 'body'), { ids: [] }).ok, 'expand needs ids')
  t.notOk(check(schemaOf('expandMemories', 'body'), { ids: ['not-a-uuid'] }).ok, 'expand ids are UUIDs')
})

t.test('advisor ranking over the real registry (every operation built)', async (t) => {
  // The advisor recommends built operations only (test/unit/unbuilt.test.ts); with everything
  // built, relevance alone decides.
  const catalog = createCatalog(registry, { urls, implemented: new Set(allOperations().map((operation) => operation.operationId)) })
  t.equal(catalog.select({ q: 'song' })[0]?.spec.operationId, 'generateSongs', '?q=song ranks songs first')
  t.equal(buildGuide(catalog, { goal: 'generate a song for my podcast intro' }).recommendations[0]?.service, 'songmodel-3-pro')
  t.equal(buildGuide(catalog, { goal: 'run a python script every hour' }).recommendations[0]?.service, 'scheduler')
  t.equal(buildGuide(catalog, { goal: 'text to speech narration' }).recommendations[0]?.service, 'speechmodel-3.1-flash-tts')
  t.equal(buildGuide(catalog, { goal: 'human feedback on my website' }).recommendations[0]?.service, 'reviews-create')
  t.equal(buildGuide(catalog, { goal: 'remember facts about the user' }).recommendations[0]?.service, 'memory')
})

t.test('llms.txt and the advisor point agents at the MCP endpoint', async (t) => {
  const catalog = createCatalog(registry, { urls, implemented: new Set(allOperations().map((operation) => operation.operationId)) })
  const context = { catalog, payTo: '0x0000000000000000000000000000000000000001' }
  const llms = llmsTxt(context)
  const mcpSection = llms.slice(llms.indexOf('## MCP'), llms.indexOf('## Services'))
  t.match(mcpSection, `- ${urls.gateway}/mcp: every operation is also an MCP tool named by its operationId`)
  t.match(mcpSection, 'Streamable HTTP')
  t.match(mcpSection, 'isError with the x402 PaymentRequired in structuredContent')
  t.match(mcpSection, 'params._meta["x402/payment"]')
  t.match(mcpSection, '_meta["x402/payment-response"]')
  t.match(mcpSection, 'Authorization: Bearer')
  t.match(llmsFullTxt(context), '## MCP', 'llms-full.txt starts with llms.txt')
  for (const scope of ['scheduler', 'memory'] as const) t.match(scopedLlmsTxt(catalog, scope), `${urls.gateway}/mcp`, `the ${scope} llms.txt names the endpoint`)

  const guide = buildGuide(catalog, { goal: 'remember facts about the user' })
  t.match(guide.mcp, { url: `${urls.gateway}/mcp`, transport: 'streamable-http', tool: 'rememberMemory' })
  t.match(guide.mcp.howToPay, '_meta["x402/payment"]')
  t.match(guide.steps.at(-1), `call the tool rememberMemory at ${urls.gateway}/mcp`)
  const nothing = buildGuide(catalog, { goal: 'qwxzv' })
  t.equal(nothing.mcp.tool, null, 'no recommendation, no tool, but the endpoint is still named')
  t.equal(nothing.mcp.url, `${urls.gateway}/mcp`)
})

t.test('fastify mounts every operation with these schemas', async (t) => {
  const catalog = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide']) })
  const deps = {
    catalog,
    logger: createLogger('silent'),
    metrics: createMetrics({ defaultMetrics: false }),
    bodyLimitBytes: 20 * 1024 * 1024,
    payTo: '0x0000000000000000000000000000000000000001',
    readiness: {},
  }
  // The guide answers from a catalog in which songs are built, so its recommendation is serialized.
  const songsBuilt = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide', 'generateSongs']) })
  const apps = [createServiceApp('gateway', deps, guideHandlers(songsBuilt)), createServiceApp('scheduler', deps, {}), createServiceApp('memory', deps, {})]
  t.teardown(() => Promise.all(apps.map((app) => app.close())))
  for (const app of apps) await app.ready()
  const [gateway, scheduler] = apps as [(typeof apps)[0], (typeof apps)[0]]

  const bad = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'x', candidateCount: 4 } })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().field, 'body.candidateCount')
  const unknown = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'x', candidateCount: 1, tempo: 1 } })
  t.equal(unknown.statusCode, 400, 'unknown field rejected by fastify')
  t.equal(unknown.json().field, 'body.tempo')
  const missing = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'x' } })
  t.equal(missing.statusCode, 400, 'a song order without candidateCount is refused (SPEC: required)')
  t.equal(missing.json().field, 'body.candidateCount')
  const good = await gateway.inject({ method: 'POST', url: '/api/v1/audio/songs/songmodel-3-pro', payload: { prompt: 'x', candidateCount: 1 } })
  t.equal(good.statusCode, 501, 'valid body reaches the (not yet built) handler')

  const guide = await gateway.inject({ method: 'GET', url: `/advisor/agent/guide?goal=${encodeURIComponent('generate a song')}` })
  t.equal(guide.statusCode, 200)
  const body = guide.json() as { recommendations: Record<string, unknown>[] }
  t.match(body.recommendations[0], { service: 'songmodel-3-pro', implemented: true, withinBudget: null, price: { amountMicros: '80000' } }, 'guide serializes every field')
  t.match((body as { mcp?: unknown }).mcp, { url: `${urls.gateway}/mcp`, transport: 'streamable-http', tool: 'generateSongs' }, 'the MCP door is serialized too')

  const task = await scheduler.inject({
    method: 'POST',
    url: '/api/v1/tasks',
    headers: { 'Idempotency-Key': 'abc' },
    payload: { runtime: 'python', source: 'print(1)', entrypoint: 'main.py', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 1000 },
  })
  t.equal(task.statusCode, 501, 'valid task body and headers pass')
  const noKey = await scheduler.inject({
    method: 'POST',
    url: '/api/v1/tasks',
    payload: { runtime: 'python', source: 'print(1)', entrypoint: 'main.py', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 1000 },
  })
  t.equal(noKey.statusCode, 400)
  t.equal(noKey.json().field, 'header.idempotency-key')
  const clone = await scheduler.inject({ method: 'POST', url: '/api/v1/tasks/clone', payload: { task_id: 'tsk_1' } })
  t.equal(clone.statusCode, 501, 'static clone route wins over /tasks/{id}')
})

t.test('every openapi page and service document is valid OpenAPI 3.1', async (t) => {
  const { Validator } = await import('@seriousme/openapi-schema-validator')
  const catalog = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide']) })
  const validator = new Validator()
  const seen: string[] = []
  for (let page = 1; ; page += 1) {
    const result = catalog.openapiPage({ page })
    const verdict = await validator.validate(result.document as Parameters<typeof validator.validate>[0])
    t.ok(verdict.valid, `page ${page} validates`, { errors: verdict.errors })
    const paths = result.document.paths as Record<string, Record<string, { operationId: string }>>
    seen.push(...Object.values(paths).flatMap((item) => Object.values(item).map((operation) => operation.operationId)))
    if (!result.next) break
  }
  t.same([...seen].sort(), operations.map((operation) => operation.operationId).sort(), 'paging shows every operation once')
  for (const service of registry.services) {
    const verdict = await validator.validate(catalog.serviceDocument(service.slug) as Parameters<typeof validator.validate>[0])
    t.ok(verdict.valid, `${service.slug} document validates`, { errors: verdict.errors })
  }
})
