// Review sessions end to end, through the real CLI on real Postgres and Redis, with real clients:
// @x402/fetch buys the plan on the embedded local EVM, Debian's Chromium (playwright-core) plays
// the human at shareUrl, and a receiver verifies the callback with the `standardwebhooks` package.
// Covered: an uploaded site and a live page reviewed, pinned, submitted and delivered; exactly 0.02
// of plan credit per session and none for refused input; the zip attack corpus and the SSRF suite
// through the API; and, in Chromium, that an uploaded site's scripts cannot reach the gateway's
// origin, its cookies or the reviewer page's capability.
import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { readdirSync, existsSync } from 'node:fs'
import path from 'node:path'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { Webhook } from 'standardwebhooks'
import yazl from 'yazl'
import type { Browser } from 'playwright-core'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { reachableRedis, throwawayDatabase } from '../helpers/servers.ts'
import { attackCorpus } from '../helpers/zip-corpus.ts'
import { SUBMISSION_MAX_BYTES } from '../../src/reviews/limits.ts'
import { launchChromium, pinElement, setOverallComment, submitReview } from '../helpers/reviewer-driver.ts'

type Json = Record<string, any>

let cli: CliProcess | undefined
let browser: Browser | undefined
let token = ''
let liveSite: http.Server
let receiver: http.Server
const received: Array<{ headers: http.IncomingHttpHeaders; body: string }> = []
let receiverAnswers: number[] = []

const port = (server: http.Server) => (server.address() as AddressInfo).port

async function listen(handler: http.RequestListener): Promise<http.Server> {
  const server = http.createServer(handler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return server
}

function zipOf(files: Record<string, string>): Promise<Buffer> {
  const zip = new yazl.ZipFile()
  for (const [name, text] of Object.entries(files)) zip.addBuffer(Buffer.from(text), name)
  zip.end()
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    zip.outputStream.on('data', (chunk: Buffer) => chunks.push(chunk))
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)))
    zip.outputStream.on('error', reject)
  })
}

const SITE_HTML = `<!doctype html><html><head><meta charset="utf-8"><title>Pricing</title><link rel="stylesheet" href="css/site.css"></head>
<body><main><h1>Plans</h1><p class="price" data-testid="price">One plan: $10</p><button id="buy">Buy now</button></main>
<script src="js/app.js"></script></body></html>`

// Runs inside the uploaded site: everything it can learn is written into #probe for the test to read.
const PROBE_JS = `
(async () => {
  const out = {}
  const attempt = (name, fn) => { try { out[name] = String(fn()) } catch (e) { out[name] = 'blocked:' + e.name } }
  attempt('parentHref', () => parent.location.href)
  attempt('topHref', () => top.location.href)
  attempt('parentBody', () => parent.document.body.innerHTML.length)
  attempt('cookie', () => document.cookie)
  attempt('referrer', () => document.referrer)
  attempt('name', () => window.name)
  attempt('ancestor', () => location.ancestorOrigins && location.ancestorOrigins[0])
  attempt('history', () => history.length)
  try { const r = await fetch(window.GATEWAY + '/healthz', { credentials: 'include' }); out.fetchGateway = 'status:' + r.status + ':' + (await r.text()).slice(0, 50) } catch (e) { out.fetchGateway = 'blocked:' + e.name }
  try { const r = await fetch(window.GATEWAY + '/dev/outbox'); out.fetchOutbox = 'status:' + r.status } catch (e) { out.fetchOutbox = 'blocked:' + e.name }
  document.getElementById('probe').textContent = JSON.stringify(out)
})()
`

t.before(async () => {
  const databaseUrl = await throwawayDatabase(t)
  const redisUrl = await reachableRedis(t)
  if (databaseUrl === undefined || redisUrl === undefined) return
  liveSite = await listen((request, response) => {
    if (request.url === '/redirect-private') {
      response.writeHead(302, { location: 'http://10.0.0.1/admin' }).end()
      return
    }
    if (request.url === '/style.css') {
      response.writeHead(200, { 'content-type': 'text/css' }).end('h1 { color: rgb(10, 20, 30) }')
      return
    }
    response
      .writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'x-frame-options': 'DENY',
        'content-security-policy': "frame-ancestors 'none'",
        'set-cookie': 'session=live-site-secret; Path=/',
      })
      .end(
        `<!doctype html><html><head><title>Live page</title><link rel="stylesheet" href="http://127.0.0.1:${port(liveSite)}/style.css"></head><body><h1 id="headline">Live headline</h1><a href="/about" id="about">About us</a></body></html>`,
      )
  })
  receiver = await listen((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks).toString() })
      response.writeHead(receiverAnswers.shift() ?? 204).end()
    })
  })
  cli = await startCli({
    env: {
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      REVIEWS_EGRESS_ALLOW: `127.0.0.1:${port(liveSite)},127.0.0.1:${port(receiver)}`,
      REVIEWS_CALLBACK_RETRY_DELAY_SEC: '1',
    },
  })
  const agent = (await (await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })).json()) as Json
  token = agent.accessToken
  const buyer = privateKeyToAccount(generatePrivateKey())
  const funded = await fetch(`${cli.gateway}/dev/faucet`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ address: buyer.address, amountMicros: '6000000' }),
  })
  if (funded.status !== 200) throw new Error(`faucet: ${funded.status}`)
  const paying = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
  const purchase = await paying(`${cli.gateway}/plans/reviews-credit-5/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${token}` } })
  if (purchase.status !== 200) throw new Error(`plan purchase: ${purchase.status} ${await purchase.text()}`)
  browser = await launchChromium()
})

t.teardown(async () => {
  await browser?.close()
  await cli?.stop('SIGKILL')
  liveSite?.close()
  receiver?.close()
})

function create(body: Json, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${cli?.gateway}/api/v1/annotate/reviews`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, ...headers },
    body: JSON.stringify(body),
  })
}

async function waitFor<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const until = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

function reviewBlobs(): string[] {
  // LocalBlobStore keeps key segments as `<segment>.d` directories.
  const dir = path.join(cli?.env.DATA_DIR ?? '', 'blobs', 'reviews.d')
  return existsSync(dir) ? readdirSync(dir) : []
}

t.test('an uploaded site: created on plan credit, pinned in Chromium, delivered signed to callbackUrl', async (t) => {
  if (!cli || !browser) return t.skip('no Postgres/Redis', () => {})
  const zip = await zipOf({ 'site/index.html': SITE_HTML, 'site/css/site.css': 'main { padding: 2em }', 'site/js/app.js': 'console.error("app failed to load prices")' })
  const body = { zipData: zip.toString('base64'), callbackUrl: `http://127.0.0.1:${port(receiver)}/hooks/review` }
  const created = await create(body, { 'idempotency-key': 'zip-review-1' })
  t.equal(created.status, 200, await created.clone().text())
  t.equal(created.headers.get('x-plan-credit-remaining-micros'), '4980000', 'exactly 0.02 of plan credit')
  const session = (await created.json()) as Json
  t.match(session, { reviewId: /^[0-9a-f-]{36}$/, shareUrl: new RegExp(`^${cli.gateway}/reviews/[A-Za-z0-9_-]{64}$`), callbackSecret: /^whsec_/ })
  t.equal(session.bundleUrl, `${session.shareUrl}/bundle.zip`)

  const again = await create(body, { 'idempotency-key': 'zip-review-1' })
  t.equal(again.status, 200)
  t.equal(((await again.json()) as Json).reviewId, session.reviewId, 'a retried create answers the first session')
  t.equal(again.headers.get('x-plan-credit-remaining-micros'), null, 'and is not debited again')
  const conflict = await create({ ...body, callbackUrl: `http://127.0.0.1:${port(receiver)}/other` }, { 'idempotency-key': 'zip-review-1' })
  t.equal(conflict.status, 409, 'the same key with another body is refused')
  t.equal(((await conflict.json()) as Json).code, 'idempotency_conflict', "in the reviews service's own case")

  const bundle = await fetch(session.bundleUrl)
  t.equal(bundle.status, 200)
  t.same(Buffer.from(await bundle.arrayBuffer()), zip, 'bundleUrl serves the original zip bytes')
  t.match(bundle.headers.get('content-disposition'), /^attachment/)

  const page = await browser.newPage()
  await page.goto(session.shareUrl)
  await pinElement(page, '[data-testid="price"]', 'The price is missing its currency code', 'blocking')
  await setOverallComment(page, 'Looks good apart from the price.')
  const submitted = (await submitReview(page)) as Json
  t.equal(submitted.reviewId, session.reviewId)
  await page.close()

  const delivery = await waitFor('the callback', () => received.find((r) => r.body.includes(session.reviewId)))
  const verified = new Webhook(session.callbackSecret).verify(delivery.body, {
    'webhook-id': String(delivery.headers['webhook-id']),
    'webhook-timestamp': String(delivery.headers['webhook-timestamp']),
    'webhook-signature': String(delivery.headers['webhook-signature']),
  }) as Json
  t.equal(verified.type, 'review.submitted')
  t.equal(verified.data.reviewId, session.reviewId)
  const pin = verified.data.pins[0]
  t.equal(verified.data.pins.length, 1)
  t.equal(pin.comment, 'The price is missing its currency code')
  t.equal(pin.severity, 'blocking')
  t.match(pin.text, /One plan: \$10/)
  t.equal(pin.tag, 'p')
  t.match(pin.selector, /price/, 'the selector names the clicked element')
  t.equal(verified.data.comment, 'Looks good apart from the price.')
  t.ok(
    verified.data.console.some((entry: Json) => /app failed to load prices/.test(entry.message)),
    "the reviewed page's console errors are captured",
  )
  t.throws(() => new Webhook(`whsec_${Buffer.alloc(32, 1).toString('base64')}`).verify(delivery.body, delivery.headers as Record<string, string>), 'another secret does not verify')

  // The receiver has the body before the attempt is recorded (the worker logs it after the answer).
  const status = await waitFor('the delivery to be recorded', async () => {
    const view = (await (await fetch(`${cli?.gateway}/api/v1/annotate/reviews/${session.reviewId}`, { headers: { authorization: `Bearer ${token}` } })).json()) as Json
    return view.callback.state === 'delivered' ? view : undefined
  })
  t.equal(status.status, 'submitted')
  t.equal(status.callback.state, 'delivered')
  t.equal(status.callback.attempts.length, 1)
  t.same(status.review, verified.data, 'GET returns the delivered review')
  const resubmit = await fetch(`${session.shareUrl}/submission`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ comment: '', pins: [], console: [] }),
  })
  t.equal(resubmit.status, 409, 'a session takes one submission')
  const refusal = (await resubmit.json()) as Json
  const capability = new URL(session.shareUrl).pathname.split('/')[2] as string
  t.equal(refusal.instance, '/reviews/{capability}/submission', 'the problem names the route, not the capability')
  t.notOk(JSON.stringify(refusal).includes(capability), 'the capability appears nowhere in the problem')
  t.notOk(cli.output().includes(capability), 'nor in the service log')
  // The declared length decides before any of the body is read; the server then closes the
  // connection, so a client still uploading megabytes may meet EPIPE instead of the answer.
  const oversize = await new Promise<{ status: number | undefined; type: string | undefined; body: string }>((resolve, reject) => {
    const request = http.request(`${session.shareUrl}/submission`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(SUBMISSION_MAX_BYTES + 1) },
    })
    request.on('error', reject)
    request.on('response', (response) => {
      let body = ''
      response.setEncoding('utf8')
      response.on('data', (chunk: string) => {
        body += chunk
      })
      response.on('end', () => {
        resolve({ status: response.statusCode, type: response.headers['content-type'], body })
        request.destroy()
      })
    })
    request.flushHeaders()
  })
  t.equal(oversize.status, 413, 'a submission larger than SUBMISSION_MAX_BYTES is refused for its size (under the 16 MiB listener limit)')
  t.match(oversize.type, /^application\/problem\+json/)
  t.match(JSON.parse(oversize.body), { code: 'payload_too_large', instance: '/reviews/{capability}/submission' })

  const stranger = (await (await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })).json()) as Json
  const hidden = await fetch(`${cli.gateway}/api/v1/annotate/reviews/${session.reviewId}`, { headers: { authorization: `Bearer ${stranger.accessToken}` } })
  t.equal(hidden.status, 404, 'another agent cannot read it')
})

t.test('a live page: proxied on the isolated origin, pinned, delivered after a failed first attempt', async (t) => {
  if (!cli || !browser) return t.skip('no Postgres/Redis', () => {})
  receiverAnswers = [503]
  const created = await create({ url: `http://127.0.0.1:${port(liveSite)}/`, callbackUrl: `http://127.0.0.1:${port(receiver)}/hooks/live` })
  t.equal(created.status, 200, await created.clone().text())
  t.equal(created.headers.get('x-plan-credit-remaining-micros'), '4960000', 'exactly 0.02 more')
  const session = (await created.json()) as Json
  t.notOk(session.bundleUrl, 'no bundle for a live page')

  const page = await browser.newPage()
  await page.goto(session.shareUrl)
  await pinElement(page, '#headline', 'Headline is too generic', 'suggestion')
  await submitReview(page)
  await page.close()

  const status = await waitFor('delivery after a retry', async () => {
    const view = (await (await fetch(`${cli?.gateway}/api/v1/annotate/reviews/${session.reviewId}`, { headers: { authorization: `Bearer ${token}` } })).json()) as Json
    return view.callback.state === 'delivered' ? view : undefined
  })
  t.equal(status.callback.attempts.length, 2, 'the 503 was retried')
  t.match(status.callback.attempts[0], { outcome: 'failed', statusCode: 503 })
  t.match(status.callback.attempts[1], { outcome: 'delivered' })
  const deliveries = received.filter((r) => r.body.includes(session.reviewId))
  t.equal(deliveries.length, 2)
  t.equal(deliveries[0]?.headers['webhook-id'], deliveries[1]?.headers['webhook-id'], 'one webhook-id across attempts')
  const review = JSON.parse(deliveries[1]?.body ?? '{}').data as Json
  t.equal(review.pins[0].selector, '#headline')
  t.equal(review.pins[0].page.url, `http://127.0.0.1:${port(liveSite)}/`, "the pin names the live page's address")
  t.same(review.source, { kind: 'url', url: `http://127.0.0.1:${port(liveSite)}/` })
})

t.test('refused input: the zip attack corpus and the SSRF suite answer 4xx naming the cause, charge nothing and store nothing', async (t) => {
  if (!cli) return t.skip('no Postgres/Redis', () => {})
  const blobsBefore = reviewBlobs()
  t.ok(blobsBefore.length >= 1, 'the sessions created so far are in the blob store (the check below can see a change)')
  for (const attack of attackCorpus()) {
    const response = await create({ zipData: attack.zipBase64, ...(attack.entryFile ? { entryFile: attack.entryFile } : {}) })
    const problem = (await response.json()) as Json
    t.equal(response.status, attack.status, `${attack.name}: ${response.status}`)
    t.match(response.headers.get('content-type'), /application\/problem\+json/)
    t.equal(problem.reason, attack.reason, `${attack.name} names its cause`)
    t.equal(response.headers.get('x-plan-credit-remaining-micros'), null)
  }
  const livePort = port(liveSite)
  const ssrf: Array<[string, string]> = [
    ['url', 'http://127.0.0.1:9/'],
    ['url', `http://localhost:${livePort}/`],
    ['url', 'http://2130706433/'],
    ['url', 'http://0x7f.1/'],
    ['url', 'http://[::1]/'],
    ['url', 'http://[::ffff:127.0.0.1]/'],
    ['url', 'http://10.1.2.3/'],
    ['url', 'http://192.168.1.1/'],
    ['url', 'http://169.254.169.254/latest/meta-data/'],
    ['url', 'http://[fd00:ec2::254]/'],
    ['url', 'http://100.100.100.200/'],
    ['url', 'file:///etc/passwd'],
    ['url', 'http://user:pass@example.com/'],
    ['url', `http://127.0.0.1:${livePort}/redirect-private`],
    ['callbackUrl', 'http://127.0.0.1:9/hook'],
    ['callbackUrl', 'http://169.254.169.254/'],
    ['callbackUrl', 'http://[::ffff:10.0.0.1]/'],
    ['callbackUrl', `http://localhost:${port(receiver)}/hook`],
  ]
  for (const [field, value] of ssrf) {
    const body = field === 'url' ? { url: value } : { url: `http://127.0.0.1:${livePort}/`, callbackUrl: value }
    const response = await create(body)
    const problem = (await response.json()) as Json
    t.equal(response.status, 400, `${field} ${value} refused`)
    t.equal(problem.code, 'url_not_allowed', `${field} ${value}: ${problem.detail}`)
    t.equal(problem.field, `body.${field}`)
  }
  const neither = await create({})
  t.equal(neither.status, 400)
  const both = await create({ url: `http://127.0.0.1:${livePort}/`, zipData: 'UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==' })
  t.equal(both.status, 400)
  t.same(reviewBlobs(), blobsBefore, 'nothing was stored')
  const next = await create({ url: `http://127.0.0.1:${livePort}/` })
  t.equal(next.headers.get('x-plan-credit-remaining-micros'), '4940000', 'none of them was charged')
})

t.test("an uploaded site's scripts cannot read the gateway's origin, its cookies or the capability (Chromium)", async (t) => {
  if (!cli || !browser) return t.skip('no Postgres/Redis', () => {})
  const zip = await zipOf({
    'index.html': `<!doctype html><html><head><title>Probe</title><script>window.GATEWAY = ${JSON.stringify(cli.gateway)}</script></head><body><pre id="probe">pending</pre><script src="probe.js"></script></body></html>`,
    'probe.js': PROBE_JS,
  })
  const session = (await (await create({ zipData: zip.toString('base64') })).json()) as Json
  const capability = new URL(session.shareUrl).pathname.split('/').pop() as string
  const context = await browser.newContext()
  await context.addCookies([{ name: 'gateway_session', value: 'gateway-cookie-secret', url: cli.gateway }])
  const page = await context.newPage()
  await page.goto(session.shareUrl)
  const frame = await waitFor('the site frame', () => page.frames().find((f) => /\.localhost:/.test(f.url())))
  await frame.waitForFunction("document.getElementById('probe')?.textContent !== 'pending'", undefined, { timeout: 15_000 })
  const seen = JSON.parse((await frame.textContent('#probe')) ?? '{}') as Record<string, string>
  t.match(seen.parentHref, /^blocked:SecurityError/, 'parent.location is cross-origin')
  t.match(seen.topHref, /^blocked:SecurityError/)
  t.match(seen.parentBody, /^blocked:SecurityError/, "the reviewer page's DOM is out of reach")
  t.equal(seen.cookie, '', 'no cookie of the gateway, none of ours')
  t.notMatch(seen.referrer ?? '', capability, 'the referrer does not carry the capability')
  t.equal(seen.name, '')
  t.match(seen.fetchGateway, /^blocked:/, "the gateway's origin cannot be fetched from the site (CSP connect-src 'self')")
  t.match(seen.fetchOutbox, /^blocked:/)
  const everything = JSON.stringify(seen) + (await frame.content()) + frame.url()
  t.notOk(everything.includes(capability), 'the capability appears nowhere the site can read')
  t.notOk(everything.includes('gateway-cookie-secret'))
  await context.close()
})
