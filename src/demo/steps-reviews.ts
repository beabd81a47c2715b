// Steps 5–6: buy the reviews-credit-5 plan with x402 (the agent named by its bearer token), then
// spend it: a review session for a tiny site zipped in memory, whose shareUrl a human can open.
import { randomUUID } from 'node:crypto'
import { describeReply, expectStatus, field, paidSend, send, StepFailure } from './clients.ts'
import type { DemoContext, Step } from './context.ts'
import { usdc } from './output.ts'
import { storedZip } from './zip.ts'

export const PLAN_ID = 'reviews-credit-5'

function token(ctx: DemoContext): string {
  if (ctx.accessToken === undefined) throw new StepFailure('no access token: the registration step did not run')
  return ctx.accessToken
}

export const buyPlan: Step = {
  title: `buy plan ${PLAN_ID}`,
  async run(ctx) {
    const reply = await paidSend(ctx.account, 'POST', `${ctx.urls.gateway}/plans/${PLAN_ID}/purchase`, {
      headers: { 'svc-agent-authorization': `Bearer ${token(ctx)}` },
      maxUsd: 10,
    })
    expectStatus(reply, [200], 'the plan purchase was not accepted')
    if (reply.body.status !== 'active') {
      throw new StepFailure(`the plan is "${String(reply.body.status)}", not active`, { asked: reply.asked, got: describeReply(reply) })
    }
    const price = reply.priceMicros === undefined ? 'price unknown' : `${usdc(reply.priceMicros)} USDC`
    const credit = typeof reply.body.creditMicros === 'string' ? `, credit ${usdc(BigInt(reply.body.creditMicros))} USDC` : ''
    return { summary: `bought plan ${PLAN_ID} with x402 (${price}${reply.tx ? `, tx ${reply.tx}` : ''})${credit}` }
  },
}

const SITE: Record<string, string> = {
  'demo-site/index.html': `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Demo pricing</title><link rel="stylesheet" href="style.css"></head>
<body><main><h1>One plan, one price</h1><p class="price">Everything for $10 a month.</p>
<p>Pin anything that looks wrong, then submit your review.</p><button type="button">Buy now</button></main></body></html>
`,
  'demo-site/style.css': 'body { font: 18px/1.5 system-ui, sans-serif; margin: 3em; } .price { font-size: 2em; color: #0a5; }\n',
}

export const reviewSession: Step = {
  title: 'create a review session',
  async run(ctx) {
    const zip = storedZip(SITE)
    const reply = expectStatus(
      await send('POST', `${ctx.urls.gateway}/api/v1/annotate/reviews`, {
        headers: { authorization: `Bearer ${token(ctx)}`, 'idempotency-key': `demo-${randomUUID()}` },
        body: { zipData: zip.toString('base64'), entryFile: 'index.html' },
      }),
      [200, 201],
      'the review session was not created',
    )
    const shareUrl = field(reply, 'shareUrl')
    const reviewId = field(reply, 'reviewId')
    // The link a human opens: check it answers before handing it out.
    const page = await send('GET', shareUrl)
    expectStatus(page, [200], 'the shareUrl does not open')
    ctx.links.push(['review page (open it, pin, submit)', shareUrl])
    const remaining = reply.headers.get('x-plan-credit-remaining-micros')
    const credit = remaining === null ? '' : `; plan credit left ${usdc(BigInt(remaining))} USDC (x-plan-credit-remaining-micros)`
    return {
      summary: `review session ${reviewId} for a ${Object.keys(SITE).length}-file site (${zip.length} bytes zipped)${credit}`,
      details: [`shareUrl: ${shareUrl}`],
    }
  },
}
