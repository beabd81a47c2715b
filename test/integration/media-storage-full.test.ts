// The media role on a full blob volume: a song or a speech whose audio cannot be stored (ENOSPC)
// is answered 503 unavailable with Retry-After, not 502 generation_failed (the generation did not
// fail; the store is full) nor 500, and the gateway's client of the media role hands the same
// answer on. The topology drill's disk-full fault found the 502.
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { createAnalysisPool } from '../../src/media/analysis-pool.ts'
import { buildMediaApp } from '../../src/media/app.ts'
import { createHttpMediaClient } from '../../src/media/client.ts'
import { createMediaService } from '../../src/media/service.ts'
import type { BlobStore } from '../../src/platform/blobs.ts'
import { isAppError } from '../../src/platform/errors.ts'
import { toAppError } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { scriptedSongProvider, scriptedSpeechProvider } from '../helpers/synthetic-song.ts'

const TOKEN = 'media-internal-token-for-tests-0123456789abcdef'

/** A blob store on a volume with no space left: every write fails as the filesystem does. */
const fullStore: BlobStore = {
  put: async () => {
    throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' })
  },
  get: async () => undefined,
  delete: async () => {},
}

async function mediaRole(t: Test) {
  const logger = createLogger('silent')
  const service = createMediaService({
    blobs: fullStore,
    logger,
    publicMediaUrl: 'https://media.example',
    concurrency: 2,
    pool: createAnalysisPool({ threads: 1 }),
    providers: { song: scriptedSongProvider(), speech: scriptedSpeechProvider },
  })
  const app = buildMediaApp({ name: 'media', logger, metrics: createMetrics(), bodyLimitBytes: 1 << 20, service, blobs: fullStore, internalToken: TOKEN })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(async () => {
    await app.close()
    await service.close()
  })
  return { service, client: createHttpMediaClient({ url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, token: TOKEN }) }
}

t.test('a song that cannot be stored: 503 unavailable with Retry-After, on the media role and through its client', async (t) => {
  const media = await mediaRole(t)
  const order = { prompt: 'house', candidateCount: 2, durationSec: 30 }
  const direct = await media.service.songs(order, AbortSignal.timeout(60_000)).catch((error: unknown) => error)
  const answer = toAppError(direct)
  t.match({ status: answer.status, code: answer.code, retry: answer.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: /^\d+$/ }, 'the media role answers 503')
  const through = await media.client.songs(order, AbortSignal.timeout(60_000)).catch((error: unknown) => error)
  if (!isAppError(through)) return t.fail(`the client threw ${String(through)}`)
  t.match({ status: through.status, code: through.code, retry: through.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: /^\d+$/ }, 'the gateway hands it on')
})

t.test('a speech that cannot be stored: 503 unavailable with Retry-After through the client', async (t) => {
  const media = await mediaRole(t)
  const through = await media.client.speech({ input: 'hello there' }, AbortSignal.timeout(60_000)).catch((error: unknown) => error)
  if (!isAppError(through)) return t.fail(`the client threw ${String(through)}`)
  t.match({ status: through.status, code: through.code, retry: through.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: /^\d+$/ })
})
