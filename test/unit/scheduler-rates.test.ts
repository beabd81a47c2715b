import t from 'tap'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { Rates, Siblings } from '../../src/catalog/schemas/scheduler.ts'
import { DEFAULT_RATES, estimateCeiling, estimateCeilingMicros, llmReserveMicros, ratesView, siblingsView, type SchedulerRates } from '../../src/scheduler/domain/rates.ts'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const compile = (schema: unknown, removeAdditional: boolean) =>
  addFormats(new Ajv({ removeAdditional: removeAdditional ? 'all' : false, allErrors: true })).compile(JSON.parse(JSON.stringify(schema)) as object)

t.test('rate card: SPEC LLM reserves, caps, sibling fee = max first-party fee', async (t) => {
  t.equal(DEFAULT_RATES.llm_profiles.quick.max_cost_usdc_micros_per_run, 50_000n)
  t.equal(DEFAULT_RATES.llm_profiles.standard.max_cost_usdc_micros_per_run, 150_000n)
  t.equal(DEFAULT_RATES.llm_profiles.bulk.max_cost_usdc_micros_per_run, 150_000n)
  t.same(Object.keys(DEFAULT_RATES.siblings).sort(), ['cdn', 'forms', 'inbox', 'screenshot', 'urlshortener'])
  const max = Object.values(DEFAULT_RATES.siblings).reduce((m, s) => (s.fee_micros > m ? s.fee_micros : m), 0n)
  t.equal(DEFAULT_RATES.sibling_call_fee_micros, max)
  t.equal(DEFAULT_RATES.hard_caps.max_runtime_sec, 3600)
  t.equal(DEFAULT_RATES.hard_caps.max_sibling_calls, 100)
  t.equal(DEFAULT_RATES.hard_caps.max_continuation_delay_sec, 600)
  t.ok(Object.isFrozen(DEFAULT_RATES.llm_profiles.quick), 'deeply frozen')
})

t.test('ceiling follows SPEC rule 2 term by term', async (t) => {
  const plain = { max_runtime_sec: 60, max_sibling_calls: 0, dependencies: [], llm: null }
  // 60 s x 100 + overhead 1000
  t.equal(estimateCeilingMicros(plain), 7_000n)
  const full = { max_runtime_sec: 300, max_sibling_calls: 10, dependencies: ['numpy', 'pandas'], llm: { profile: 'standard' as const } }
  t.same(estimateCeiling(full), {
    runtime_micros: 30_000n,
    siblings_micros: 50_000n,
    dependencies_micros: 6_000n, // 2 x 30 s x 100
    llm_micros: 150_000n,
    overhead_micros: 1_000n,
    total_micros: 237_000n,
  })
  t.equal(estimateCeilingMicros({ ...full, llm: { profile: 'standard', max_cost_usdc_micros_per_run: 20_000n } }), 107_000n, 'a lower task LLM cap is used')
  t.equal(estimateCeilingMicros({ ...full, llm: { profile: 'quick', max_cost_usdc_micros_per_run: 90_000n } }), 137_000n, 'a higher one is ignored (profile max)')
  t.equal(estimateCeilingMicros({ ...plain, max_runtime_sec: 59.2 }), 7_000n, 'fractional seconds round up')
  t.equal(
    estimateCeilingMicros({ ...plain, max_runtime_sec: 3600, max_sibling_calls: 100, dependencies: Array(20).fill('x'), llm: { profile: 'bulk' } }),
    360_000n + 500_000n + 60_000n + 150_000n + 1_000n,
  )
  t.equal(llmReserveMicros(null), 0n)
  t.throws(() => estimateCeiling({ ...plain, max_sibling_calls: 1.5 }), RangeError)
  t.throws(() => estimateCeiling({ ...plain, max_runtime_sec: Number.NaN }), RangeError)
  const custom: SchedulerRates = { ...DEFAULT_RATES, sandbox_per_second_micros: 1n, overhead_micros: 0n }
  t.equal(estimateCeilingMicros(plain, custom), 60n, 'rates are a parameter')
})

t.test('views render micros as digit strings', async (t) => {
  const view = ratesView()
  t.equal(view.sandbox_per_second_micros, '100')
  t.equal(view.sibling_call_fee_micros, '5000')
  t.same(view.llm_profiles.quick, { max_cost_usdc_micros_per_run: '50000', input_micros_per_million_tokens: '100000', output_micros_per_million_tokens: '400000' })
  t.equal(view.dependency_install.per_second_micros, '100')
  t.match(view.formula, /max_runtime_sec/)
  t.doesNotThrow(() => JSON.stringify(view), 'no bigint left')
  const strict = compile(Rates, false)
  t.ok(strict(JSON.parse(JSON.stringify(view))), `GET /rates body matches its schema exactly: ${JSON.stringify(strict.errors)}`)
  const siblings = siblingsView()
  const checkSiblings = compile(Siblings, false)
  t.ok(checkSiblings(siblings), 'GET /_siblings body matches its schema')
  t.same(
    siblings.siblings.map((s) => s.name),
    ['urlshortener', 'cdn', 'forms', 'screenshot', 'inbox'],
  )
})
