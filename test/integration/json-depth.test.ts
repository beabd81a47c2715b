// JSON nested deeper than MAX_JSON_DEPTH (src/platform/json-depth.ts), on the real gateway,
// scheduler and memory apps: a 400 validation_error naming the top-level field, at body parsing,
// before any 402 or 401, never a 500 after the payment. A body at the limit passes to the price.
// Also the song route's reference image URLs: the trailing-dot spellings of private hosts are
// refused before any 402, like their dotless forms.
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { FakeClock } from '../helpers/fake-clock.ts'
import { worldApps } from '../helpers/world-apps.ts'
import { openWorld } from '../helpers/scheduler-world.ts'
import { MAX_JSON_DEPTH } from '../../src/platform/json-depth.ts'

const PROBLEM = 'application/problem+json; charset=utf-8'

/** A JSON object text nested `levels` deep (`{}` is 1 level), as raw text: JSON.stringify cannot write 100,000 levels. */
function nested(levels: number): string {
  return `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`
}

interface Answer {
  status: number
  type: string | undefined
  body: any
}

async function post(app: FastifyInstance, url: string, payload: string, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', ...headers }, payload })
  return { status: response.statusCode, type: response.headers['content-type'] as string | undefined, body: response.body ? response.json() : undefined }
}

function tooDeep(t: Test, answer: Answer, field: string, what: string): void {
  t.equal(answer.status, 400, `${what}: 400`)
  t.equal(answer.type, PROBLEM, `${what}: problem+json`)
  t.match(answer.body, { code: 'validation_error', field, detail: new RegExp(`at most ${MAX_JSON_DEPTH} levels`) }, `${what}: names ${field}`)
}

t.test('deep JSON on every role, before any 402', async (t) => {
  const world = await openWorld({ clock: new FakeClock(Math.floor(Date.now() / 60_000) * 60_000 + 30_000) })
  const { gateway, scheduler, memory: memoryApp } = await worldApps(t, world, { memory: true })
  const memory = memoryApp as NonNullable<typeof memoryApp>

  await t.test('memory write: deep metadata is a 400 naming body.metadata, not a 402', async (t) => {
    // The body is level 1, metadata level 2: metadata may hold MAX_JSON_DEPTH - 1 levels.
    const atLimit = await post(memory, '/api/v1/memories', `{"content":"x","metadata":${nested(MAX_JSON_DEPTH - 1)}}`)
    t.equal(atLimit.status, 402, 'a body exactly at the limit is priced')
    for (const levels of [MAX_JSON_DEPTH, 5_000, 100_000]) {
      tooDeep(t, await post(memory, '/api/v1/memories', `{"content":"x","metadata":${nested(levels)}}`), 'body.metadata', `metadata ${levels} levels deep`)
    }
    tooDeep(t, await post(memory, '/api/v1/memories', nested(100_000)), 'body.a', 'a body that is all nesting')
    tooDeep(t, await post(memory, '/api/v1/memories', `${'['.repeat(100_000)}${']'.repeat(100_000)}`), 'body.0', 'nested arrays')
  })

  await t.test('scheduler: deep values are refused at parsing, before authentication', async (t) => {
    tooDeep(t, await post(scheduler, '/api/v1/tasks', `{"env":${nested(100_000)}}`), 'body.env', 'a deep env, no credentials')
    tooDeep(t, await post(scheduler, '/api/v1/tasks/abc/runs', `{"x":[${nested(MAX_JSON_DEPTH)}]}`), 'body.x', 'a deep body on a run route')
  })

  await t.test('gateway: songs and the auth routes', async (t) => {
    tooDeep(t, await post(gateway, '/api/v1/audio/songs/songmodel-3-pro', `{"prompt":"x","candidateCount":1,"sections":${nested(100_000)}}`), 'body.sections', 'deep song sections')
    tooDeep(t, await post(gateway, '/auth/claim', `{"email":${nested(100_000)}}`), 'body.email', 'a deep e-mail')
  })

  await t.test('songs: private reference image hosts with trailing dots are refused before any 402', async (t) => {
    const song = (url: string) => post(gateway, '/api/v1/audio/songs/songmodel-3-pro', JSON.stringify({ prompt: 'x', candidateCount: 1, referenceImageUrls: [url] }))
    for (const host of [
      'localhost.',
      'localhost..',
      'LOCALHOST.',
      'LocalHost...',
      '127.0.0.1.',
      '127.0.0.1..',
      '[::1]',
      'metadata.google.internal.',
      'metadata.google.internal..',
      'foo.localhost.',
      'printer.local.',
    ]) {
      const answer = await song(`http://${host}/a.png`)
      t.equal(answer.status, 400, `${host}: 400`)
      t.match(answer.body, { code: 'validation_error', field: 'body.referenceImageUrls.0' }, `${host}: names the field`)
    }
    t.equal((await song('https://example.com./a.png')).status, 402, 'a public host with a trailing dot is priced')
  })
})
