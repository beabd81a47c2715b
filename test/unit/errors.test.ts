import t from 'tap'
import { readFileSync } from 'node:fs'
import { AppError, DEFAULT_RETRY_AFTER_S, errorCatalogue } from '../../src/platform/errors.ts'
import { toAppError } from '../../src/platform/http.ts'

t.test('docs/errors.md lists every code with its status', async (t) => {
  const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8')
  for (const [code, entry] of Object.entries(errorCatalogue)) {
    t.match(doc, `| \`${code}\` | ${entry.status} |`, code)
  }
})

t.test('AppError renders RFC 9457 problem+json with code and field', async (t) => {
  const problem = new AppError('INVALID_CRON', 'schedule.cron is not a 5-field cron', { field: 'body.schedule.cron' }).toProblem('/api/v1/tasks')
  t.same(problem, {
    type: 'https://agent-gateway.dev/problems/invalid-cron',
    title: 'Invalid schedule',
    status: 400,
    detail: 'schedule.cron is not a 5-field cron',
    code: 'INVALID_CRON',
    field: 'body.schedule.cron',
    instance: '/api/v1/tasks',
  })
})

t.test('framework errors map to catalogue codes, unknown ones to a 500 without details', async (t) => {
  const validation = Object.assign(new Error('body/prompt must NOT have more than 4000 characters'), {
    validation: [{ instancePath: '/prompt', keyword: 'maxLength', message: 'must NOT have more than 4000 characters', params: {} }],
    validationContext: 'body',
    statusCode: 400,
  })
  t.match(toAppError(validation), { code: 'validation_error', status: 400, field: 'body.prompt' })
  const missing = Object.assign(new Error('x'), {
    validation: [{ instancePath: '', keyword: 'required', message: "must have required property 'goal'", params: { missingProperty: 'goal' } }],
    validationContext: 'querystring',
  })
  t.match(toAppError(missing), { field: 'query.goal', message: 'query.goal is required' })
  t.match(toAppError(Object.assign(new Error('too big'), { code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 })), { code: 'payload_too_large', status: 413 })
  t.match(toAppError(Object.assign(new Error('bad type'), { code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 })), { code: 'unsupported_media_type', status: 415 })
  t.match(toAppError(new SyntaxError('Unexpected end of JSON input')), { code: 'malformed_json', status: 400 })
  const internal = toAppError(new Error('db password is hunter2'))
  t.match(internal, { code: 'internal', status: 500 })
  t.notMatch(JSON.stringify(internal.toProblem()), /hunter2/, 'internal details never reach the client')
})

t.test('every 503 says when to retry: the default Retry-After unless its thrower set one', async (t) => {
  for (const code of Object.keys(errorCatalogue) as (keyof typeof errorCatalogue)[]) {
    if (errorCatalogue[code].status !== 503) continue
    t.equal(new AppError(code).headers['retry-after'], String(DEFAULT_RETRY_AFTER_S), code)
  }
  t.equal(new AppError('media_unavailable', 'down', { status: 502 }).headers['retry-after'], undefined, 'a 502 is left alone')
  t.same(new AppError('unavailable', 'full', { headers: { 'Retry-After': '30' } }).headers, { 'Retry-After': '30' }, "the thrower's own value is kept")
})
