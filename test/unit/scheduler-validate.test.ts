import t from 'tap'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { TaskCreateRequest } from '../../src/catalog/schemas/scheduler.ts'
import { DEFAULT_RATES } from '../../src/scheduler/domain/rates.ts'
import { canonicalJson } from '../../src/platform/canonical-json.ts'
import {
  dependencyName,
  idempotencyHash,
  isCapabilityId,
  parseTimestamp,
  toolAccess,
  validateCreateTask,
  validateEnv,
  validatePatch,
  type PatchTarget,
  type TaskCreateInput,
} from '../../src/scheduler/domain/validate.ts'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const schemaCheck = addFormats(new Ajv({ coerceTypes: 'array', useDefaults: true })).compile(JSON.parse(JSON.stringify(TaskCreateRequest)) as object)

const now = new Date('2026-06-01T00:00:00Z')
const ctx = { now }
const base = {
  schedule: { every: 'daily', at: '09:00', timezone: 'Europe/Berlin' },
  runtime: 'python',
  source: 'print("hello")',
  entrypoint: 'main.py',
  max_runtime_sec: 60,
  max_sibling_calls: 0,
  max_amount_usdc_micros: 1_000_000,
} as const
const make = (patch: Record<string, unknown>, drop: string[] = []) => {
  const body: Record<string, unknown> = { ...base, ...patch }
  for (const key of drop) delete body[key]
  return body
}
const create = (patch: Record<string, unknown> = {}, drop: string[] = []) => validateCreateTask(make(patch, drop), ctx)

t.test('a valid body normalises (money as bigint, defaults filled)', async (t) => {
  t.ok(schemaCheck(make({})), 'the base body also passes the JSON Schema')
  const spec = create({
    max_sibling_calls: 5,
    tool_list: ['cdn', 'acme/pdf-render'],
    max_sibling_spend_micros: '250000',
    dependencies: ['numpy>=2', 'uvicorn[standard]==0.30.1'],
    env: { API_KEY: 'secret' },
    notify_email: 'me@example.com',
    end_at: '2026-12-31T23:59:00+01:00',
    llm: { profile: 'quick', max_cost_usdc_micros_per_run: 10_000 },
    artifacts: { enabled: true },
  })
  t.same(spec, {
    schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin', every: 'daily', at: '09:00' },
    runtime: 'python',
    source: 'print("hello")',
    entrypoint: 'main.py',
    max_runtime_sec: 60,
    max_sibling_calls: 5,
    max_amount_usdc_micros: 1_000_000n,
    tool_list: ['cdn', 'acme/pdf-render'],
    max_sibling_spend_micros: 250_000n,
    dependencies: ['numpy>=2', 'uvicorn[standard]==0.30.1'],
    env: { API_KEY: 'secret' },
    notify_email: 'me@example.com',
    end_at: '2026-12-31T22:59:00.000Z',
    llm: { profile: 'quick', max_cost_usdc_micros_per_run: 10_000n },
    artifacts: { enabled: true },
  })
  const minimal = create({}, ['schedule'])
  t.equal(minimal.schedule, null, 'on-demand')
  t.same(
    [minimal.tool_list, minimal.max_sibling_spend_micros, minimal.dependencies, minimal.env, minimal.llm, minimal.artifacts, minimal.end_at],
    [null, null, [], {}, null, { enabled: false }, null],
  )
  t.equal(create({ max_sibling_spend_micros: 7 }).max_sibling_spend_micros, 7n, 'integer form')
  t.equal(create({ max_runtime_sec: 30.5 }).max_runtime_sec, 30.5)
  t.equal(create({ runtime: 'node', entrypoint: 'index.mjs', dependencies: ['lodash@^4.17.21', '@scope/pkg', 'zod@3'] }).runtime, 'node')
})

t.test('tool access follows SPEC: unset + calls > 0 = open, unset + 0 = deny-all', async (t) => {
  t.equal(toolAccess(create({})), 'deny_all')
  t.equal(toolAccess(create({ max_sibling_calls: 3, max_sibling_spend_micros: 0 })), 'open')
  t.equal(toolAccess(create({ max_sibling_calls: 3, tool_list: [] })), 'allowlist')
  t.equal(toolAccess(create({ tool_list: ['cdn'] })), 'allowlist', 'a list with 0 calls is accepted')
})

t.test('INVALID_CRON names the schedule field', async (t) => {
  t.throws(() => create({ schedule: { cron: '* * * * * *' } }), { code: 'INVALID_CRON', field: 'body.schedule.cron' })
  t.throws(() => create({ schedule: { cron: '0 0 * * *', timezone: 'Mars/Base' } }), { code: 'INVALID_CRON', field: 'body.schedule.timezone' })
  t.throws(() => create({ schedule: { every: 'daily', at: '25:00' } }), { code: 'INVALID_CRON', field: 'body.schedule.at' })
  t.throws(() => create({ schedule: { every: 'weekly' } }), { code: 'INVALID_CRON', field: 'body.schedule.dayOfWeek' })
  t.throws(() => create({ schedule: null }), { code: 'INVALID_CRON', field: 'body.schedule' })
})

t.test('UNSUPPORTED_RUNTIME', async (t) => {
  for (const runtime of ['ruby', 'python3.12', 'Node', 3, null]) {
    t.throws(() => create({ runtime }), { code: 'UNSUPPORTED_RUNTIME', field: 'body.runtime' }, String(runtime))
  }
  t.throws(() => create({}, ['runtime']), { code: 'VALIDATION_ERROR', field: 'body.runtime', message: /required/ })
})

t.test('UNSUPPORTED_DEPENDENCY: preinstalled or malformed, per ecosystem', async (t) => {
  const py = ['requests', 'Requests==2.32', 'PyYAML', 'python_dateutil>=2', 'Pillow', 'beautifulsoup4', 'lxml', 'httpx', 'feedparser']
  for (const dep of py) t.throws(() => create({ dependencies: ['numpy', dep] }), { code: 'UNSUPPORTED_DEPENDENCY', field: 'body.dependencies.1', message: /preinstalled/ }, dep)
  const node = ['axios', 'node-fetch@3', 'cheerio', 'date-fns@^3', 'yaml', 'sharp']
  for (const dep of node) {
    t.throws(
      () => create({ runtime: 'node', entrypoint: 'index.js', dependencies: [dep] }),
      { code: 'UNSUPPORTED_DEPENDENCY', field: 'body.dependencies.0', message: /preinstalled/ },
      dep,
    )
  }
  t.doesNotThrow(() => create({ dependencies: ['axios'] }), 'a node preinstall is a fine python dependency')
  const badPy = ['numpy @ https://x/y.whl', 'git+https://github.com/a/b', './local', 'numpy==', 'numpy; python_version>"3"', '-e .', 'lodash@4', '@scope/x']
  for (const dep of badPy) t.throws(() => create({ dependencies: [dep] }), { code: 'UNSUPPORTED_DEPENDENCY', field: 'body.dependencies.0', message: /not a valid PyPI/ }, dep)
  const badNode = ['Lodash', 'lodash==4', 'lodash@', 'github:a/b', 'lodash@git+https://x', 'file:../x', '.hidden', '_under', 'a@^']
  for (const dep of badNode) {
    t.throws(
      () => create({ runtime: 'node', entrypoint: 'index.js', dependencies: [dep] }),
      { code: 'UNSUPPORTED_DEPENDENCY', field: 'body.dependencies.0', message: /not a valid npm/ },
      dep,
    )
  }
  t.throws(() => create({ dependencies: ['numpy', 'NumPy>=2'] }), { code: 'VALIDATION_ERROR', field: 'body.dependencies.1', message: /twice/ })
  t.throws(() => create({ dependencies: Array.from({ length: 21 }, (_, i) => `pkg${i}`) }), { code: 'VALIDATION_ERROR', field: 'body.dependencies' })
  t.throws(() => create({ dependencies: [1] }), { code: 'VALIDATION_ERROR', field: 'body.dependencies.0' })
  t.throws(() => create({ dependencies: 'numpy' }), { code: 'VALIDATION_ERROR', field: 'body.dependencies' })
  t.equal(dependencyName('python', 'Foo.Bar_baz[x,y]>=1,<2'), 'foo-bar-baz')
  t.equal(dependencyName('node', '@scope/pkg@>=1.2.0'), '@scope/pkg')
})

t.test('UNKNOWN_SIBLING: neither first-party nor a capability id', async (t) => {
  for (const entry of ['urlshortener', 'cdn', 'forms', 'screenshot', 'inbox', 'acme/pdf-render', 'example.com/geo.lookup', 'a/b']) {
    t.ok(isCapabilityId(entry) || ['urlshortener', 'cdn', 'forms', 'screenshot', 'inbox'].includes(entry), entry)
    t.doesNotThrow(() => create({ max_sibling_calls: 1, tool_list: [entry] }), entry)
  }
  for (const entry of [
    'mailer',
    'CDN',
    'Acme/pdf',
    'acme/',
    '/pdf',
    'acme/pdf/extra',
    'acme//pdf',
    '-acme/pdf',
    'acme/pdf-',
    'acme/pdf@1',
    `${'a'.repeat(100)}/${'b'.repeat(101)}`,
  ]) {
    t.throws(() => create({ max_sibling_calls: 1, tool_list: ['cdn', entry] }), { code: 'UNKNOWN_SIBLING', field: 'body.tool_list.1' }, entry)
  }
  t.throws(
    () => validateCreateTask(make({ max_sibling_calls: 1, tool_list: ['cdn'] }), { now, siblings: ['forms'] }),
    { code: 'UNKNOWN_SIBLING', field: 'body.tool_list.0' },
    'sibling list is injectable',
  )
  t.throws(() => create({ tool_list: ['cdn', 'cdn'] }), { code: 'VALIDATION_ERROR', field: 'body.tool_list.1' })
  t.throws(() => create({ tool_list: [''] }), { code: 'VALIDATION_ERROR', field: 'body.tool_list.0' })
  t.throws(() => create({ tool_list: 'cdn' }), { code: 'VALIDATION_ERROR', field: 'body.tool_list' })
  t.throws(() => create({ tool_list: Array.from({ length: 51 }, (_, i) => `p/c${i}`) }), { code: 'VALIDATION_ERROR', field: 'body.tool_list' })
})

t.test('VALIDATION_ERROR with the field named', async (t) => {
  const cases: Array<[Record<string, unknown>, string, RegExp?, string[]?]> = [
    [{ max_sibling_calls: 2 }, 'body.max_sibling_spend_micros', /required when tool_list is unset/],
    [{ max_sibling_spend_micros: -1 }, 'body.max_sibling_spend_micros'],
    [{ max_sibling_spend_micros: 1.5 }, 'body.max_sibling_spend_micros'],
    [{ max_sibling_spend_micros: '1.5' }, 'body.max_sibling_spend_micros'],
    [{ max_sibling_spend_micros: '-3' }, 'body.max_sibling_spend_micros'],
    [{ max_amount_usdc_micros: 0 }, 'body.max_amount_usdc_micros', /at least 1/],
    [{ max_amount_usdc_micros: -5 }, 'body.max_amount_usdc_micros'],
    [{ max_amount_usdc_micros: 10.5 }, 'body.max_amount_usdc_micros'],
    [{ max_amount_usdc_micros: Number.MAX_SAFE_INTEGER + 2 }, 'body.max_amount_usdc_micros'],
    [{}, 'body.max_amount_usdc_micros', /required/, ['max_amount_usdc_micros']],
    [{ max_runtime_sec: 0 }, 'body.max_runtime_sec'],
    [{ max_runtime_sec: 3601 }, 'body.max_runtime_sec', /1 to 3600/],
    [{ max_runtime_sec: '60' }, 'body.max_runtime_sec'],
    [{ max_sibling_calls: 101 }, 'body.max_sibling_calls'],
    [{ max_sibling_calls: -1 }, 'body.max_sibling_calls'],
    [{ max_sibling_calls: 1.5 }, 'body.max_sibling_calls'],
    [{ entrypoint: 'src/main.py' }, 'body.entrypoint', /path separators/],
    [{ entrypoint: '..\\main.py' }, 'body.entrypoint', /path separators/],
    [{ entrypoint: 'main.js' }, 'body.entrypoint', /must end in .py/],
    [{ entrypoint: '.py' }, 'body.entrypoint'],
    [{ entrypoint: 'main' }, 'body.entrypoint'],
    [{ runtime: 'node', entrypoint: 'main.py' }, 'body.entrypoint', /\.js, \.mjs, \.cjs/],
    [{ runtime: 'node', entrypoint: 'index.ts' }, 'body.entrypoint'],
    [{ entrypoint: 'my main.py' }, 'body.entrypoint'],
    [{ source: '' }, 'body.source'],
    [{ source: 'x'.repeat(262_145) }, 'body.source', /262144 characters/],
    [{ env: { API_KEY: 5 } }, 'body.env.API_KEY', /must be a string/],
    [{ env: { API_KEY: null } }, 'body.env.API_KEY', /got null/],
    [{ env: { 'BAD-NAME': 'x' } }, 'body.env.BAD-NAME'],
    [{ env: { HTTPS_PROXY: 'http://evil' } }, 'body.env.HTTPS_PROXY', /reserved/],
    [{ env: { agw_token: 'x' } }, 'body.env.agw_token', /reserved/],
    [{ env: { LD_PRELOAD: '/x.so' } }, 'body.env.LD_PRELOAD', /reserved/],
    [{ env: { K: 'x'.repeat(4097) } }, 'body.env.K'],
    [{ env: ['A=1'] }, 'body.env'],
    [{ notify_email: 'not-an-email' }, 'body.notify_email'],
    [{ end_at: '2026-05-31T23:59:59Z' }, 'body.end_at', /not in the future/],
    [{ end_at: '2026-06-01T00:00:00Z' }, 'body.end_at', /not in the future/],
    [{ end_at: '2026-02-30T00:00:00Z' }, 'body.end_at'],
    [{ end_at: '2026-12-01' }, 'body.end_at'],
    [{ end_at: '2026-12-01T00:00:00' }, 'body.end_at', /offset/],
    [{ end_at: '2026-06-01T06:00:00Z' }, 'body.end_at', /before the first scheduled run/],
    [{ end_at: '2026-12-01T00:00:00Z' }, 'body.end_at', /needs a schedule/, ['schedule']],
    [{ llm: { profile: 'huge' } }, 'body.llm.profile'],
    [{ llm: { profile: 'quick', max_cost_usdc_micros_per_run: 50_001 } }, 'body.llm.max_cost_usdc_micros_per_run', /only lower/],
    [{ llm: { profile: 'quick', max_cost_usdc_micros_per_run: 0 } }, 'body.llm.max_cost_usdc_micros_per_run'],
    [{ llm: { profile: 'quick', model: 'x' } }, 'body.llm.model'],
    [{ llm: 'quick' }, 'body.llm'],
    [{ artifacts: { enabled: 'yes' } }, 'body.artifacts'],
    [{ artifacts: { enabled: true, public: true } }, 'body.artifacts.public'],
    [{ colour: 'blue' }, 'body.colour', /not an allowed field/],
    [{}, 'body.source', /required/, ['source']],
    [{}, 'body.entrypoint', /required/, ['entrypoint']],
    [{}, 'body.max_runtime_sec', /required/, ['max_runtime_sec']],
    [{}, 'body.max_sibling_calls', /required/, ['max_sibling_calls']],
  ]
  for (const [patch, field, message, drop] of cases) {
    const expected = message === undefined ? { code: 'VALIDATION_ERROR', field } : { code: 'VALIDATION_ERROR', field, message }
    t.throws(() => create(patch, drop), expected, `${field} ${JSON.stringify(patch).slice(0, 60)}`)
  }
  const tight = { ...DEFAULT_RATES, hard_caps: { ...DEFAULT_RATES.hard_caps, max_source_bytes: 10 } }
  t.throws(() => validateCreateTask(make({ source: '€€€€' }), { now, rates: tight }), { code: 'VALIDATION_ERROR', field: 'body.source', message: /10 bytes/ })
  t.throws(() => validateCreateTask('nope', ctx), { code: 'VALIDATION_ERROR', field: 'body' })
  t.throws(() => validateCreateTask([], ctx), { code: 'VALIDATION_ERROR', field: 'body' })
  t.same(validateEnv({ A: '1' }, undefined, 'body.env'), { A: '1' }, 'validateEnv serves PUT /env too')
  t.throws(() => validateEnv({ A: 1 }, undefined, 'body.env'), { code: 'VALIDATION_ERROR', field: 'body.env.A' })
})

t.test('parseTimestamp is a real RFC 3339 parser', async (t) => {
  t.equal(parseTimestamp('2026-01-01T00:00:00Z')?.toISOString(), '2026-01-01T00:00:00.000Z')
  t.equal(parseTimestamp('2026-01-01t01:30:00.5+01:30')?.toISOString(), '2026-01-01T00:00:00.500Z')
  t.equal(parseTimestamp('2028-02-29T00:00:00Z')?.toISOString(), '2028-02-29T00:00:00.000Z')
  for (const bad of ['2026-02-29T00:00:00Z', '2026-13-01T00:00:00Z', '2026-01-01T24:00:00Z', '2026-01-01T00:00:60Z', '2026-01-01 00:00:00Z', '2026-01-01T00:00:00+25:00']) {
    t.equal(parseTimestamp(bad), undefined, bad)
  }
})

t.test('idempotency hash: exactly SPEC rule 1 fields', async (t) => {
  const a = create({ env: { A: '1', B: '2' }, dependencies: ['numpy', 'pandas'] })
  const same = (spec: TaskCreateInput) => idempotencyHash(spec) === idempotencyHash(a)
  t.match(idempotencyHash(a), /^[0-9a-f]{64}$/)
  t.ok(same(create({ env: { B: 'other', A: 'values' }, dependencies: ['pandas', 'numpy'] })), 'env values and set order do not matter')
  t.ok(
    same(create({ env: { A: '1', B: '2' }, dependencies: ['numpy', 'pandas'], notify_email: 'x@example.com', artifacts: { enabled: true } })),
    'notify_email/artifacts not covered',
  )
  t.ok(same(create({ env: { A: '1', B: '2' }, dependencies: ['numpy', 'pandas'], entrypoint: 'other.py' })), 'entrypoint not covered')
  t.ok(same(create({ env: { A: '1', B: '2' }, dependencies: ['numpy', 'pandas'], schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin' } })), 'cron compared compiled')
  const differs: Array<[string, Record<string, unknown>]> = [
    ['cron', { schedule: { every: 'daily', at: '10:00' } }],
    ['on-demand', { schedule: undefined }],
    ['source', { source: 'print(1)' }],
    ['runtime', { runtime: 'node', entrypoint: 'index.js', dependencies: ['numpy', 'pandas'] }],
    ['dependencies', { dependencies: ['numpy'] }],
    ['tool_list', { tool_list: ['cdn'] }],
    ['env keys', { env: { A: '1' } }],
    ['end_at', { end_at: '2027-01-01T00:00:00Z' }],
    ['max_runtime_sec', { max_runtime_sec: 61 }],
    ['max_sibling_calls', { max_sibling_calls: 1, tool_list: [] }],
    ['max_amount', { max_amount_usdc_micros: 1_000_001 }],
    ['spend cap', { max_sibling_spend_micros: 5 }],
    ['llm cap', { llm: { profile: 'quick', max_cost_usdc_micros_per_run: 1 } }],
  ]
  for (const [name, patch] of differs) {
    const body = { env: { A: '1', B: '2' }, dependencies: ['numpy', 'pandas'], ...patch }
    t.notOk(same(create(body, 'schedule' in patch && patch.schedule === undefined ? ['schedule'] : [])), name)
  }
  t.equal(canonicalJson({ b: 1n, a: [true, null, 'x'], c: undefined }), '{"a":[true,null,"x"],"b":"1"}')
  t.throws(() => canonicalJson(Number.NaN), TypeError)
})

const stored = (patch: Partial<PatchTarget> = {}): PatchTarget => ({
  status: 'active',
  schedule: { cron: '0 9 * * *', timezone: 'UTC' },
  max_runtime_sec: 60,
  max_sibling_calls: 5,
  tool_list: ['cdn', 'acme/pdf'],
  max_sibling_spend_micros: 100_000n,
  ...patch,
})
const pctx = { now, runInFlight: false }

t.test('PATCH: the five mutable fields', async (t) => {
  t.same(
    validatePatch(
      stored(),
      { notify_email: 'a@example.com', end_at: '2026-07-01T00:00:00Z', tool_list: ['cdn', 'acme/pdf', 'forms'], max_sibling_spend_micros: '200000', max_runtime_sec: 120 },
      pctx,
    ),
    { notify_email: 'a@example.com', end_at: '2026-07-01T00:00:00.000Z', tool_list: ['cdn', 'acme/pdf', 'forms'], max_sibling_spend_micros: 200_000n, max_runtime_sec: 120 },
  )
  t.same(validatePatch(stored(), { notify_email: null, end_at: null }, pctx), { notify_email: null, end_at: null }, 'null clears')
  t.same(validatePatch(stored(), { max_runtime_sec: 60, max_sibling_spend_micros: 100_000 }, pctx), { max_runtime_sec: 60, max_sibling_spend_micros: 100_000n }, 'equal is allowed')
  t.same(validatePatch(stored({ tool_list: null, max_sibling_calls: 0 }), { tool_list: ['cdn'] }, pctx), { tool_list: ['cdn'] }, 'deny-all may gain entries')
  t.same(validatePatch(stored({ status: 'paused' }), { max_runtime_sec: 90 }, pctx), { max_runtime_sec: 90 }, 'paused tasks are patchable')
})

t.test('PATCH refusals', async (t) => {
  for (const key of ['source', 'runtime', 'schedule', 'entrypoint', 'dependencies', 'max_amount_usdc_micros', 'max_sibling_calls', 'llm', 'artifacts', 'colour']) {
    t.throws(() => validatePatch(stored(), { notify_email: null, [key]: 'x' }, pctx), { code: 'IMMUTABLE_FIELD', status: 409, field: `body.${key}` }, key)
  }
  t.throws(() => validatePatch(stored(), { env: { A: '1' } }, pctx), { code: 'IMMUTABLE_FIELD', field: 'body.env', message: /PUT \/api\/v1\/tasks\/\{id\}\/env/ })
  t.throws(() => validatePatch(stored(), { tool_list: ['cdn'] }, pctx), {
    code: 'IMMUTABLE_TOOL_REMOVAL',
    status: 409,
    field: 'body.tool_list',
    extensions: { removed: ['acme/pdf'] },
  })
  t.throws(() => validatePatch(stored(), { tool_list: [] }, pctx), { code: 'IMMUTABLE_TOOL_REMOVAL', field: 'body.tool_list' })
  t.throws(() => validatePatch(stored({ tool_list: null }), { tool_list: ['cdn'] }, pctx), { code: 'IMMUTABLE_TOOL_REMOVAL', field: 'body.tool_list', message: /open/ })
  t.throws(() => validatePatch(stored(), { tool_list: null }, pctx), { code: 'VALIDATION_ERROR', field: 'body.tool_list' })
  t.throws(() => validatePatch(stored(), { tool_list: ['cdn', 'acme/pdf', 'Nope'] }, pctx), { code: 'UNKNOWN_SIBLING', field: 'body.tool_list.2' })
  t.throws(() => validatePatch(stored(), { max_sibling_spend_micros: 99_999 }, pctx), {
    code: 'VALIDATION_ERROR',
    field: 'body.max_sibling_spend_micros',
    message: /only be raised/,
    extensions: { current: '100000' },
  })
  t.throws(() => validatePatch(stored({ max_sibling_spend_micros: null }), { max_sibling_spend_micros: 5 }, pctx), {
    code: 'VALIDATION_ERROR',
    field: 'body.max_sibling_spend_micros',
  })
  t.throws(() => validatePatch(stored(), { max_sibling_spend_micros: -1 }, pctx), { code: 'VALIDATION_ERROR', field: 'body.max_sibling_spend_micros' })
  t.throws(() => validatePatch(stored(), { max_runtime_sec: 59 }, pctx), { code: 'VALIDATION_ERROR', field: 'body.max_runtime_sec', message: /only be raised/ })
  t.throws(() => validatePatch(stored(), { max_runtime_sec: 3601 }, pctx), { code: 'VALIDATION_ERROR', field: 'body.max_runtime_sec' })
  t.throws(() => validatePatch(stored(), { max_runtime_sec: 120 }, { now, runInFlight: true }), { code: 'RUN_IN_FLIGHT', status: 409, field: 'body.max_runtime_sec' })
  t.doesNotThrow(
    () => validatePatch(stored(), { notify_email: 'x@example.com', max_sibling_spend_micros: 1e6 }, { now, runInFlight: true }),
    'only max_runtime_sec waits for the run',
  )
  t.throws(() => validatePatch(stored(), { end_at: '2026-05-01T00:00:00Z' }, pctx), { code: 'VALIDATION_ERROR', field: 'body.end_at' })
  t.throws(() => validatePatch(stored({ schedule: null }), { end_at: '2026-07-01T00:00:00Z' }, pctx), { code: 'VALIDATION_ERROR', field: 'body.end_at', message: /schedule/ })
  t.throws(() => validatePatch(stored(), { notify_email: 5 }, pctx), { code: 'VALIDATION_ERROR', field: 'body.notify_email' })
  t.throws(() => validatePatch(stored(), {}, pctx), { code: 'VALIDATION_ERROR', field: 'body' })
  t.throws(() => validatePatch(stored(), null, pctx), { code: 'VALIDATION_ERROR', field: 'body' })
  t.throws(() => validatePatch(stored({ status: 'deleted' }), { notify_email: null }, pctx), { code: 'TASK_DELETED', status: 410 })
  t.throws(() => validatePatch(stored({ status: 'completed' }), { notify_email: null }, pctx), { code: 'TASK_COMPLETED', status: 409 })
  t.throws(() => validatePatch(stored({ status: 'terminated' }), { notify_email: null }, pctx), { code: 'TASK_TERMINATED', status: 409 })
})
