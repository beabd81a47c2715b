// The media role on its own listener, as the chart deploys it: the gateway reaches it over HTTP
// (MEDIA_URL) with the shared bearer; a paid song crosses that hop and is hosted by the media
// listener; the internal API refuses any other bearer; a tool missing on the media side is a 503
// at the gateway before any 402.
import { mkdtemp, rm } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import t, { type Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createAnalysisPool } from '../../src/media/analysis-pool.ts'
import { buildMediaApp } from '../../src/media/app.ts'
import { createHttpMediaClient } from '../../src/media/client.ts'
import { createMediaService, type MediaOptions } from '../../src/media/service.ts'
import { LocalBlobStore } from '../../src/platform/blobs.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { openWorld } from '../helpers/scheduler-world.ts'
import { scriptedSongProvider, scriptedSpeechProvider } from '../helpers/synthetic-song.ts'
import { worldApps } from '../helpers/world-apps.ts'

const TOKEN = 'media-internal-token-for-tests-0123456789abcdef'
const PUBLIC_MEDIA_URL = 'https://media.example'
const SONGS = '/api/v1/audio/songs/songmodel-3-pro'

async function mediaRole(t: Test, options: Partial<MediaOptions>) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-split-'))
  const blobs = new LocalBlobStore(dir)
  const logger = createLogger('silent')
  // PUBLIC_MEDIA_URL: the public name of the media listener (the Ingress's /media path in a cluster).
  const service = createMediaService({ blobs, logger, publicMediaUrl: PUBLIC_MEDIA_URL, concurrency: 2, pool: createAnalysisPool({ threads: 1 }), ...options })
  const app = buildMediaApp({ name: 'media', logger, metrics: createMetrics(), bodyLimitBytes: 1 << 20, service, blobs, internalToken: TOKEN })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  t.teardown(async () => {
    await app.close()
    await service.close()
    await rm(dir, { recursive: true, force: true })
  })
  return { url, client: createHttpMediaClient({ url, token: TOKEN }) }
}

t.test('a paid song crosses the HTTP hop to the media role, which hosts it', async (t) => {
  const media = await mediaRole(t, { providers: { song: scriptedSongProvider(), speech: scriptedSpeechProvider } })
  const apps = await worldApps(t, await openWorld(), { media: media.client })
  const buyer = privateKeyToAccount(generatePrivateKey())
  apps.token.mint(buyer.address, 1_000_000n)
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const response = await pay(`${apps.gatewayBase}${SONGS}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'house', candidateCount: 1, durationSec: 30, mastering: {} }),
  })
  t.equal(response.status, 200)
  const song = (await response.json()) as { url: string; sizeBytes: number; price_usdc: string }
  t.equal(song.price_usdc, '0.080000')
  t.ok(song.url.startsWith(`${PUBLIC_MEDIA_URL}/media/audio/`), 'linked under PUBLIC_MEDIA_URL')
  const audio = await fetch(song.url.replace(PUBLIC_MEDIA_URL, media.url))
  t.equal(audio.status, 200)
  t.equal((await audio.arrayBuffer()).byteLength, song.sizeBytes)
  t.equal(apps.token.balanceOf(buyer.address), 1_000_000n - 80_000n)
})

t.test('the internal API takes only the gateway bearer', async (t) => {
  const media = await mediaRole(t, { providers: { song: scriptedSongProvider(), speech: scriptedSpeechProvider } })
  for (const authorization of [undefined, 'Bearer wrong', `Bearer ${TOKEN}x`, TOKEN]) {
    const response = await fetch(`${media.url}/internal/v1/songs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
      body: JSON.stringify({ prompt: 'x', candidateCount: 1 }),
    })
    t.equal(response.status, 401, String(authorization))
  }
})

t.test('a tool missing on the media role is a 503 at the gateway, before any 402', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-sf-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const media = await mediaRole(t, { soundfont: path.join(dir, 'missing.sf2'), providers: { speech: scriptedSpeechProvider } })
  const apps = await worldApps(t, await openWorld(), { media: media.client })
  const response = await fetch(`${apps.gatewayBase}${SONGS}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'folk', candidateCount: 1 }),
  })
  t.equal(response.status, 503)
  t.match(await response.json(), { code: 'media_unavailable', detail: /soundfont/ })
})
