// The gateway's HTTP client of the media role (src/media/client.ts): a problem the media role
// answers comes back as the same AppError, Retry-After included, so the gateway's client is told
// when to come back (a full blob volume is 503 unavailable with Retry-After on the media role).
import t from 'tap'
import { createHttpMediaClient } from '../../src/media/client.ts'
import { isAppError } from '../../src/platform/errors.ts'

const answering = (status: number, body: unknown, headers: Record<string, string> = {}): typeof fetch =>
  (async () => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/problem+json', ...headers } })) as typeof fetch

t.test('a 503 of the media role keeps its code and its Retry-After', async (t) => {
  const problem = {
    type: 'about:blank',
    title: 'Service unavailable',
    status: 503,
    code: 'unavailable',
    detail: 'The storage this request writes to is full right now; retry later',
  }
  const client = createHttpMediaClient({ url: 'http://media.invalid', token: 'x', fetch: answering(503, problem, { 'retry-after': '30' }) })
  const error = await client.speech({ input: 'hello' }, AbortSignal.timeout(5_000)).catch((caught: unknown) => caught)
  t.ok(isAppError(error), 'an AppError')
  if (!isAppError(error)) return
  t.match({ status: error.status, code: error.code, retry: error.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: '30' })
})

t.test('a problem without Retry-After carries none', async (t) => {
  const problem = { status: 400, code: 'validation_error', detail: 'voice must be one of alloy', field: 'body.voice' }
  const client = createHttpMediaClient({ url: 'http://media.invalid', token: 'x', fetch: answering(400, problem) })
  const error = await client.speech({ input: 'hello' }, AbortSignal.timeout(5_000)).catch((caught: unknown) => caught)
  if (!isAppError(error)) return t.fail('not an AppError')
  t.match(
    { status: error.status, code: error.code, field: error.field, retry: error.headers['retry-after'] },
    { status: 400, code: 'validation_error', field: 'body.voice', retry: undefined },
  )
})
