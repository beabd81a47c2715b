// How failed requests are logged (src/platform/http.ts, the error handler and the access line),
// read from a captured pino stream: an expected AppError (501 not_implemented, a 503 upstream) is
// one line at info / warn without a stack; a fault (an unnamed exception, an INTERNAL AppError) is
// logged at error with its stack; a route's own 503 (readiness while draining) is a warn.
import t from 'tap'
import { createHttpApp } from '../../src/platform/http.ts'
import { captureLogs, LEVEL, type LogLine } from '../helpers/log-capture.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { AppError } from '../../src/platform/errors.ts'

function build() {
  const { logger: captured, lines } = captureLogs('info')
  const app = createHttpApp({ name: 'test', logger: captured, metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 16 })
  app.get('/not-built', async () => {
    throw new AppError('not_implemented', 'reviews are not built yet')
  })
  app.get('/upstream-down', async () => {
    throw new AppError('unavailable', 'generate_text is not available: this service has no LLM upstream configured')
  })
  app.get('/bad-gateway', async () => {
    throw new AppError('SIBLING_PAYMENT_FAILED', 'the sibling refused the payment')
  })
  app.get('/refused', async () => {
    throw new AppError('plan_required', 'buy a plan')
  })
  app.get('/bug', async () => {
    throw new TypeError('cannot read properties of undefined (reading "x")')
  })
  app.get('/invariant', async () => {
    throw new AppError('INTERNAL', 'a marketplace task without a plan holder')
  })
  return { app, lines }
}

const of = (lines: LogLine[], url: string) => lines.filter((line) => line.url === url || (line.msg === 'unhandled error' && line.reqId === lines.find((l) => l.url === url)?.reqId))

t.test('a 501 not_implemented: one info line, no stack, no error', async (t) => {
  const { app, lines } = build()
  const response = await app.inject({ method: 'GET', url: '/not-built' })
  t.equal(response.statusCode, 501)
  t.equal(response.json().code, 'not_implemented')
  const mine = of(lines, '/not-built')
  t.equal(mine.length, 1, 'one line for the request')
  t.match(mine[0], { level: LEVEL.info, msg: 'request failed', status: 501, code: 'not_implemented' })
  t.notOk(mine[0]?.err, 'no error object, so no stack')
  t.notOk(
    lines.some((line) => line.level >= LEVEL.error),
    'nothing at error',
  )
  t.notMatch(JSON.stringify(lines), /at .*\.ts:\d+/, 'no stack anywhere')
  await app.close()
})

t.test('expected 5xx AppErrors (503, 502): one warn line each, no stack', async (t) => {
  const { app, lines } = build()
  t.equal((await app.inject({ method: 'GET', url: '/upstream-down' })).statusCode, 503)
  t.equal((await app.inject({ method: 'GET', url: '/bad-gateway' })).statusCode, 502)
  for (const [url, status, code] of [
    ['/upstream-down', 503, 'unavailable'],
    ['/bad-gateway', 502, 'SIBLING_PAYMENT_FAILED'],
  ] as const) {
    const mine = of(lines, url)
    t.equal(mine.length, 1, `${url}: one line`)
    t.match(mine[0], { level: LEVEL.warn, msg: 'request failed', status, code }, `${url}: warn with its code`)
    t.notOk(mine[0]?.err, `${url}: no stack`)
  }
  t.notOk(
    lines.some((line) => line.level >= LEVEL.error),
    'nothing at error',
  )
  await app.close()
})

t.test('a 4xx AppError is not a failure line at info or above', async (t) => {
  const { app, lines } = build()
  t.equal((await app.inject({ method: 'GET', url: '/refused' })).statusCode, 403)
  t.equal(lines.length, 0, 'the access line of a 4xx is at debug, below this logger level')
  await app.close()
})

t.test('faults are errors with their stack', async (t) => {
  const { app, lines } = build()
  const bug = await app.inject({ method: 'GET', url: '/bug' })
  t.equal(bug.statusCode, 500)
  t.notMatch(bug.body, /TypeError|reading/, 'the stack never reaches the client')
  const unhandled = lines.filter((line) => line.msg === 'unhandled error')
  t.equal(unhandled.length, 1)
  t.equal(unhandled[0]?.level, LEVEL.error)
  t.match(unhandled[0]?.err?.stack, /TypeError: cannot read properties/, 'logged with the stack')
  t.match(
    of(lines, '/bug').find((line) => line.msg === 'request failed'),
    { level: LEVEL.error, status: 500, code: 'internal' },
  )

  lines.length = 0
  t.equal((await app.inject({ method: 'GET', url: '/invariant' })).statusCode, 500)
  const broken = lines.find((line) => line.msg === 'unhandled error')
  t.equal(broken?.level, LEVEL.error, 'an INTERNAL AppError (a broken invariant) is an error')
  t.match(broken?.err?.stack, /a marketplace task without a plan holder/)
  await app.close()
})

t.test("a route's own 503 (readiness while draining) is a warn, not an error", async (t) => {
  const { app, lines } = build()
  app.markDraining()
  const ready = await app.inject({ method: 'GET', url: '/readyz' })
  t.equal(ready.statusCode, 503)
  t.match(lines, [{ level: LEVEL.warn, msg: 'request failed', url: '/readyz', status: 503 }])
  t.notOk(
    lines.some((line) => line.level >= LEVEL.error),
    'nothing at error',
  )
  await app.close()
})
