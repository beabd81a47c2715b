// Steps 10–12: a song paid per request with x402 (skipped if the media tools are missing), then
// the memory service: facts remembered one paid call each, and recalled with a wallet proof.
import { describeReply, expectStatus, field, ownerSend, paidSend, send, StepFailure } from './clients.ts'
import type { Step } from './context.ts'
import { clip, usdc } from './output.ts'

export const song: Step = {
  title: 'a song',
  async run(ctx) {
    const url = `${ctx.urls.gateway}/api/v1/audio/songs/songmodel-3-pro`
    const order = { prompt: 'a short cheerful synthwave jingle for a product demo, 110 bpm', candidateCount: 1, durationSec: 30, instrumental: true }
    // A server without its media tools answers 503 media_unavailable before any 402: nothing is paid.
    const reply = await paidSend(ctx.account, 'POST', url, { body: order, maxUsd: 1, timeoutMs: 180_000 })
    if (reply.status === 503 && reply.body.code === 'media_unavailable') {
      return { skip: `media unavailable: ${clip(String(reply.body.detail ?? reply.text), 300)}` }
    }
    expectStatus(reply, [200], 'the song was not delivered')
    const audioUrl = field(reply, 'url')
    const audio = await send('GET', audioUrl, { headers: { range: 'bytes=0-1023' } })
    expectStatus(audio, [200, 206], 'the song URL does not serve audio')
    ctx.links.push(['song', audioUrl])
    const seconds = typeof reply.body.seconds === 'number' ? `${reply.body.seconds.toFixed(1)} s ` : ''
    const price = reply.priceMicros === undefined ? `${String(reply.body.price_usdc)} USD` : `${usdc(reply.priceMicros)} USDC`
    return {
      summary: `song: ${seconds}${String(reply.body.mimeType ?? 'audio')} for ${price} paid with x402${reply.tx ? ` (tx ${reply.tx})` : ''}`,
      details: [`hosted at ${audioUrl}`],
    }
  },
}

/** The facts remembered, one paid write each; the recall asks about the first. */
export const FACTS = [
  'The demo agent keeps its release notes in a notebook with an ultramarine cover.',
  'The pricing page under review offers a single plan at ten dollars a month.',
]
const QUERY = 'what colour is the cover of the release notes notebook?'

export const remember: Step = {
  title: 'remember facts',
  async run(ctx) {
    const txs: string[] = []
    let spent = 0n
    for (const content of FACTS) {
      const reply = await paidSend(ctx.account, 'POST', `${ctx.urls.memory}/api/v1/memories`, { body: { content, context: 'agent-gateway-demo', tags: ['demo'] }, maxUsd: 1 })
      expectStatus(reply, [201], 'the memory was not stored')
      if (reply.body.rail !== 'payg') throw new StepFailure(`stored on the "${String(reply.body.rail)}" rail, not paid per call`, { asked: reply.asked, got: describeReply(reply) })
      spent += reply.priceMicros ?? BigInt(String(reply.body.chargedMicros ?? '0'))
      if (reply.tx) txs.push(`${reply.tx.slice(0, 10)}…`)
    }
    const each = spent / BigInt(FACTS.length)
    return { summary: `remembered ${FACTS.length} facts, one x402 payment each (${usdc(each)} USDC each${txs.length > 0 ? `, tx ${txs.join(', ')}` : ''})` }
  },
}

export const recall: Step = {
  title: 'recall with a wallet proof',
  async run(ctx) {
    const reply = await ownerSend(ctx.account, 'POST', `${ctx.urls.memory}/api/v1/contexts`, { body: { query: QUERY, context: 'agent-gateway-demo', limit: 3 } })
    expectStatus(reply, [200], 'the recall failed')
    const results = (Array.isArray(reply.body.results) ? reply.body.results : []) as Array<{ content?: string; score?: number }>
    const best = results[0]
    if (best === undefined || best.content !== FACTS[0]) {
      throw new StepFailure('the recall did not bring back the fact it was asked about', { asked: reply.asked, got: describeReply(reply) })
    }
    return {
      summary: `recalled ${results.length} memories with a SIGN-IN-WITH-X proof; best match for "${QUERY}":`,
      details: [`"${best.content}"`],
    }
  },
}
