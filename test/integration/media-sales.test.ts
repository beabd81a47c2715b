// Selling songs and speech: the buyer pays only for what was delivered. A real x402 client pays
// the gateway (over HTTP, an in-memory USDC); the media pipeline is the real one (decode, analysis
// workers, MP3, blob store) over scripted providers that fail, time out or answer garbage per
// candidate. Checked on the token's balances and on the sale and refund rows:
// - some candidates fail: the whole payment settles and the undelivered part is refunded on-chain
//   in the same request (sale row, refund outbox row with its tx, headers saying so);
// - every candidate fails: 502/504/503 problem+json, nothing settles, the proof can be used again;
// - the free unit of a claimed account: 2 candidates cost 0.08; it is taken once under concurrency;
//   if only the free song was delivered, the payment is released rather than settled and refunded.
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import t, { type Test } from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createAnalysisPool } from '../../src/media/analysis-pool.ts'
import { createMediaService } from '../../src/media/service.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { LocalBlobStore } from '../../src/platform/blobs.ts'
import { openWorld } from '../helpers/scheduler-world.ts'
import { scriptedSongProvider, scriptedSpeechProvider, type Behaviour } from '../helpers/synthetic-song.ts'
import { PAY_TO, worldApps } from '../helpers/world-apps.ts'

const SONG = 80_000n
const SONGS_PATH = '/api/v1/audio/songs/songmodel-3-pro'

async function setup(t: Test, behaviour: (seed: number) => Behaviour = () => 'ok') {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-sales-'))
  const pool = createAnalysisPool({ threads: 2 })
  const song = scriptedSongProvider(behaviour)
  const media = createMediaService({
    blobs: new LocalBlobStore(dir),
    logger: createLogger('silent'),
    publicMediaUrl: 'https://gw.test',
    concurrency: 3,
    providers: { song, speech: scriptedSpeechProvider },
    pool,
  })
  const world = await openWorld()
  const apps = await worldApps(t, world, { media })
  t.teardown(async () => {
    await media.close()
    await rm(dir, { recursive: true, force: true })
  })
  // The refund wallet (the chain's service address) holds what refunds need.
  apps.token.mint(apps.payments.chain.serviceAddress, 10_000_000n)
  const buyer = privateKeyToAccount(generatePrivateKey())
  apps.token.mint(buyer.address, 1_000_000n)
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const order = (body: Record<string, unknown>, headers: Record<string, string> = {}, via: typeof fetch = pay) =>
    via(`${apps.gatewayBase}${SONGS_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  const claimedAgent = async () => {
    const { agentId, accessToken } = await apps.payments.agents.register()
    const { code } = await apps.payments.agents.startClaim(agentId, `${agentId}@example.com`)
    await apps.payments.agents.completeClaim(code)
    return accessToken
  }
  return { apps, world, buyer, order, song, claimedAgent }
}

t.test('one of three candidates fails: 0.16 is charged, 0.08 comes back on-chain in the same request', async (t) => {
  const { apps, world, buyer, order } = await setup(t, (seed) => (seed === 11 ? 'fail' : 'ok'))
  const payeeBefore = apps.token.balanceOf(PAY_TO)
  const response = await order({ prompt: 'house', candidateCount: 3, seed: 10, durationSec: 30 })
  const body = (await response.json()) as { price_usdc: string; candidates: { index: number }[]; generationFailures: number; selectionNotes: string[] }
  t.equal(response.status, 200)
  t.equal(body.price_usdc, '0.160000')
  t.equal(body.generationFailures, 1)
  t.same(
    body.candidates.map((candidate) => candidate.index),
    [0, 2],
    'the failed candidate is not in the answer',
  )
  t.equal(response.headers.get('x-refund-micros'), '80000')
  t.equal(response.headers.get('x-refund-status'), 'confirmed')
  t.match(response.headers.get('x-refund-tx'), /^0x[0-9a-f]{64}$/)
  t.equal(apps.token.balanceOf(buyer.address), 1_000_000n - 2n * SONG, 'paid 0.24, got 0.08 back')
  t.equal(apps.token.transfers, 2, 'two transfers: the whole payment, then the refund')
  t.equal(apps.token.balanceOf(PAY_TO) - payeeBefore, 2n * SONG, 'the payee (the refund wallet too, here) nets 0.16: 0.24 settled, 0.08 refunded')
  const [sale] = await world.db.query<{ state: string; ordered_units: number; delivered_units: number; paid_micros: bigint; charged_micros: bigint; refund_micros: bigint }>(
    'select * from media_sales',
  )
  t.match(sale, { state: 'settled', ordered_units: 3, delivered_units: 2, paid_micros: 3n * SONG, charged_micros: 2n * SONG, refund_micros: SONG })
  const [refund] = await world.db.query<{ state: string; amount_micros: bigint; to_address: string }>('select * from media_refunds')
  t.match(refund, { state: 'confirmed', amount_micros: SONG, to_address: buyer.address.toLowerCase() })
})

t.test('every candidate fails: a problem answer, nothing settles, and the proof is not spent', async (t) => {
  for (const [behaviour, status, code] of [
    ['fail', 502, 'generation_failed'],
    ['garbage', 502, 'generation_failed'],
    ['timeout', 504, 'generation_timeout'],
    ['unavailable', 503, 'media_unavailable'],
  ] as const) {
    const { apps, world, buyer, order } = await setup(t, () => behaviour)
    const response = await order({ prompt: 'ambient', candidateCount: 2, seed: 1, durationSec: 30 })
    t.equal(response.status, status, behaviour)
    t.match(await response.json(), { code, generationFailures: 2 }, behaviour)
    t.equal(apps.token.balanceOf(buyer.address), 1_000_000n, `${behaviour}: nothing was charged`)
    const reservations = await world.db.query<{ state: string }>('select state from payment_reservations')
    t.same(
      reservations.map((row) => row.state),
      ['released'],
      `${behaviour}: the reservation was released, so the signed proof may be presented again`,
    )
    t.same(await world.db.query('select * from media_sales'), [], `${behaviour}: no sale`)
  }
})

t.test('the free unit of a claimed account: two candidates cost 0.08; one free song delivered costs nothing', async (t) => {
  const { apps, buyer, order, claimedAgent } = await setup(t, (seed) => (seed === 21 ? 'fail' : 'ok'))
  const token = await claimedAgent()
  const unpaid = await fetch(`${apps.gatewayBase}${SONGS_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ prompt: 'jazz', candidateCount: 2, seed: 30, durationSec: 30 }),
  })
  t.equal(unpaid.status, 402)
  t.match(await unpaid.json(), { priceMicros: '80000' }, 'the 402 asks for one song: the other is free')
  const paid = await order({ prompt: 'jazz', candidateCount: 2, seed: 30, durationSec: 30 }, { authorization: `Bearer ${token}` })
  t.equal(paid.status, 200)
  t.equal(((await paid.json()) as { price_usdc: string }).price_usdc, '0.080000')
  t.equal(apps.token.balanceOf(buyer.address), 1_000_000n - SONG)

  // Another claimed account, 2 candidates of which one fails: the delivered song is the free one.
  const second = await claimedAgent()
  const before = apps.token.balanceOf(buyer.address)
  const partial = await order({ prompt: 'jazz', candidateCount: 2, seed: 20, durationSec: 30 }, { authorization: `Bearer ${second}` })
  t.equal(partial.status, 200)
  t.equal(((await partial.json()) as { price_usdc: string }).price_usdc, '0.000000')
  t.equal(apps.token.balanceOf(buyer.address), before, 'the payment was released, not settled')
  t.equal(partial.headers.get('x-refund-micros'), null, 'nothing to refund: nothing was taken')
})

t.test('the free unit is taken exactly once under concurrency', async (t) => {
  const { apps, claimedAgent } = await setup(t)
  const token = await claimedAgent()
  const responses = await Promise.all(
    Array.from({ length: 4 }, () =>
      fetch(`${apps.gatewayBase}${SONGS_PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ prompt: 'pop', candidateCount: 1, durationSec: 30 }),
      }),
    ),
  )
  const statuses = responses.map((response) => response.status).sort()
  t.same(statuses, [200, 402, 402, 402], 'one free song; the others are asked to pay')
})

t.test('speech is priced per started 1,000 characters', async (t) => {
  const { apps, buyer } = await setup(t)
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const unpaid = await fetch(`${apps.gatewayBase}/api/v1/audio/speech/speechmodel-3.1-flash-tts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'é'.repeat(1001) }),
  })
  t.equal(unpaid.status, 402)
  t.match(await unpaid.json(), { priceMicros: '30000' }, '1,001 characters are two blocks')
  const response = await pay(`${apps.gatewayBase}/api/v1/audio/speech/speechmodel-3.1-flash-tts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'Hello, world.', voice: 'onyx', speed: 1.25 }),
  })
  t.equal(response.status, 200)
  t.match(await response.json(), { price_usdc: '0.015000', voice: 'onyx', characters: 13, sampleRate: 24000, channels: 1, mimeType: 'audio/wav' })
  t.equal(apps.token.balanceOf(buyer.address), 1_000_000n - 15_000n)
})

t.test('a missing tool is a 503 naming the fix before any 402, and the rest is still sold', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-tools-'))
  // The offline composer with a soundfont that is not there; speech keeps its scripted provider.
  const media = createMediaService({
    blobs: new LocalBlobStore(dir),
    logger: createLogger('silent'),
    publicMediaUrl: 'https://gw.test',
    concurrency: 1,
    soundfont: path.join(dir, 'missing.sf2'),
    providers: { speech: scriptedSpeechProvider },
    pool: createAnalysisPool({ threads: 1 }),
  })
  const apps = await worldApps(t, await openWorld(), { media })
  t.teardown(async () => {
    await media.close()
    await rm(dir, { recursive: true, force: true })
  })
  const song = await fetch(`${apps.gatewayBase}${SONGS_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'folk', candidateCount: 1 }),
  })
  t.equal(song.status, 503)
  t.match(await song.json(), { code: 'media_unavailable', detail: /soundfont.*apt-get install/s })
  const speech = await fetch(`${apps.gatewayBase}/api/v1/audio/speech/speechmodel-3.1-flash-tts`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input: 'hello' }),
  })
  t.equal(speech.status, 402, 'speech does not need the soundfont: it is still for sale')
})
