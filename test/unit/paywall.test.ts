// The browser paywall (src/payments/paywall): who gets the page (a browser navigation, never an API
// client), what the pure page says and escapes, how the PAYMENT-REQUIRED header is read (extensions
// ignored), and, through the real error handler of src/platform/http.ts, that a browser gets HTML
// with every payment header unchanged while API clients get exactly the JSON 402 they got before.
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { createHttpApp, type ProblemPages } from '../../src/platform/http.ts'
import { AppError } from '../../src/platform/errors.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createPaywall, exactTermsOf, isBrowserNavigation, prefersHtml, renderPaywallPage, type PaywallView } from '../../src/payments/paywall/index.ts'

const CHROME_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7'
const FIREFOX_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8'
const BROWSER = { accept: CHROME_ACCEPT, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document' }
const PAY_TO = '0x000000000000000000000000000000000000c0de'

t.test('only a browser navigation prefers HTML', async (t) => {
  t.ok(prefersHtml(CHROME_ACCEPT))
  t.ok(prefersHtml(FIREFOX_ACCEPT))
  t.ok(prefersHtml('text/html'))
  for (const accept of [
    undefined,
    '',
    '*/*',
    'application/json',
    'application/json, */*',
    'text/html, application/json',
    'application/json;q=1, text/html;q=0.5',
    'text/*',
    'text/html;q=0',
  ]) {
    t.notOk(prefersHtml(accept), `Accept ${JSON.stringify(accept)} keeps JSON`)
  }
  t.ok(isBrowserNavigation(BROWSER))
  t.ok(isBrowserNavigation({ accept: FIREFOX_ACCEPT }), 'a browser without fetch metadata')
  t.notOk(isBrowserNavigation({ accept: CHROME_ACCEPT, 'sec-fetch-mode': 'cors', 'sec-fetch-dest': 'empty' }), "a page's own fetch")
  t.notOk(isBrowserNavigation({ accept: CHROME_ACCEPT, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'iframe' }), 'a frame')
  t.notOk(isBrowserNavigation({ 'sec-fetch-mode': 'navigate' }), 'navigation metadata without an HTML Accept')
})

function challengeHeader(extra: Record<string, unknown> = {}): string {
  const required = {
    x402Version: 2,
    error: 'Payment required',
    resource: { url: 'https://memory.test/api/v1/memories', description: 'Remember', mimeType: 'application/json' },
    accepts: [
      { scheme: 'upto', network: 'eip155:8453', amount: '5' },
      {
        scheme: 'exact',
        network: 'eip155:8453',
        amount: '1000',
        asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
        payTo: PAY_TO,
        maxTimeoutSeconds: 300,
        extra: { name: 'USD Coin', version: '2', future: { nested: true } },
      },
    ],
    extensions: { bazaar: { info: { input: {} } }, 'payment-identifier': { required: false } },
    ...extra,
  }
  return Buffer.from(JSON.stringify(required)).toString('base64')
}

t.test('the PAYMENT-REQUIRED header is read field by field', async (t) => {
  t.same(exactTermsOf(challengeHeader()), {
    resourceUrl: 'https://memory.test/api/v1/memories',
    amount: '1000',
    network: 'eip155:8453',
    asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    assetName: 'USD Coin',
    payTo: PAY_TO,
  })
  t.equal(exactTermsOf('not base64 json'), undefined)
  t.equal(exactTermsOf(Buffer.from('{"accepts":[{"scheme":"exact","network":"solana:x"}]}').toString('base64')), undefined)
})

const HOSTILE = `<script>alert("x")</script>&'`

function hostileView(): PaywallView {
  return {
    operation: { operationId: 'rememberMemory', summary: HOSTILE, description: `desc ${HOSTILE}`, method: 'POST', path: `/api/v1/${HOSTILE}` },
    resourceUrl: `https://memory.test/${HOSTILE}`,
    priceUsd: '0.001000',
    amountHeader: undefined,
    network: 'eip155:8453',
    asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
    assetName: HOSTILE,
    payTo: PAY_TO,
    exampleBody: JSON.stringify({ content: HOSTILE }),
    service: { title: HOSTILE, url: `https://gw.test/services/"${HOSTILE}` },
    plans: [{ id: 'memory-credit-5', title: HOSTILE, priceUsd: '5.000000', purchaseUrl: 'https://gw.test/plans/memory-credit-5/purchase' }],
    gatewayUrl: 'https://gw.test',
  }
}

t.test('the page escapes every text and runs no inline script', async (t) => {
  const html = renderPaywallPage(hostileView())
  t.notMatch(html, /<script>alert/, 'no markup from the registry or the URL survives')
  t.notMatch(html, /"x"\)/, 'quotes are escaped')
  t.match(html, '&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;')
  const scripts = html.match(/<script[^>]*>/g) ?? []
  t.same(scripts, ['<script type="module" src="/paywall/paywall.js">'], 'one script, ours, by URL')
  t.notMatch(html, /\son[a-z]+=/i, 'no inline event handlers')
  t.notMatch(html, /style=/, 'no inline styles')
  t.notMatch(html, /https?:\/\/(?!gw\.test|memory\.test)/, 'no third-party URL')
})

t.test('the page says what the operation is, what it costs and how to pay', async (t) => {
  const view: PaywallView = {
    ...hostileView(),
    operation: { operationId: 'rememberMemory', summary: 'Remember', description: 'Stores content.', method: 'POST', path: '/api/v1/memories' },
    assetName: 'USD Coin',
    service: { title: 'Encrypted agent memory', url: 'https://gw.test/services/memory' },
    plans: [{ id: 'memory-credit-5', title: 'Memory credit', priceUsd: '5.000000', purchaseUrl: 'https://gw.test/plans/memory-credit-5/purchase' }],
    resourceUrl: 'https://memory.test/api/v1/memories',
    exampleBody: '{\n  "content": "text"\n}',
  }
  const html = renderPaywallPage(view)
  t.match(html, '<html lang="en">')
  t.match(html, '<meta name="viewport" content="width=device-width, initial-scale=1">')
  t.match(html, '<h1>Payment required</h1>')
  t.match(html, '<summary>About this operation</summary>\n<p>Stores content.</p>', 'the description, folded')
  t.match(html, '<code>POST /api/v1/memories</code>')
  t.match(html, '<dd id="paywall-price">0.001000 USD</dd>')
  t.match(html, '<code>eip155:8453</code>')
  t.match(html, `<code>${PAY_TO}</code>`)
  t.match(html, '<a href="https://gw.test/services/memory">Encrypted agent memory</a>')
  t.match(html, 'https://gw.test/plans/memory-credit-5/purchase')
  t.match(html, '<label for="paywall-body">', 'the body field has a label')
  t.match(html, '<button type="button" id="paywall-pay">Pay with a browser wallet</button>')
  t.match(html, 'role="status"')
  t.match(html, 'wrapFetchWithPayment', 'the @x402/fetch snippet')
  t.match(html, 'payingFetch(&#39;https://memory.test/api/v1/memories&#39;, { method: &#39;POST&#39;')
  t.match(html, 'https://gw.test/mcp', 'the MCP endpoint')
  t.notMatch(html, 'paywall-amount', 'no amount field for a priced operation')
  const chosen = renderPaywallPage({ ...view, priceUsd: undefined, amountHeader: 'x-pay-amount-micros', exampleBody: undefined })
  t.match(chosen, 'data-amount-header="x-pay-amount-micros"')
  t.match(chosen, '<label for="paywall-amount">')
  t.match(chosen, 'the amount you choose')
  t.notMatch(chosen, 'paywall-body')
})

/** A listener with one paid route that answers the 402 the guard raises, with or without the paywall. */
async function listener(t: Test, pages: ProblemPages | undefined): Promise<FastifyInstance> {
  const app = createHttpApp({ name: 'memory', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 16, problemPages: pages })
  app.post('/api/v1/memories', { config: { operationId: 'rememberMemory' } }, async () => {
    throw new AppError('payment_required', 'POST /api/v1/memories costs 0.001000 USD. Pay with x402 or MPP and retry.', {
      status: 402,
      headers: { 'PAYMENT-REQUIRED': challengeHeader(), 'WWW-Authenticate': 'Payment id="abc", method="tempo"', 'cache-control': 'no-store' },
      extensions: { x402Version: 1, accepts: [], priceMicros: '1000' },
    })
  })
  app.get('/api/v1/free', async () => {
    throw new AppError('not_found')
  })
  await app.ready()
  t.teardown(() => app.close())
  return app
}

function withoutVolatile(headers: Record<string, unknown>): Record<string, unknown> {
  const { date: _date, 'x-request-id': _id, ...rest } = headers
  return rest
}

t.test('through the error handler: HTML for a browser, the unchanged 402 for everyone else', async (t) => {
  const pages = createPaywall({ registry, gatewayUrl: 'https://gw.test', payTo: PAY_TO }).pagesFor('memory')
  const plain = await listener(t, undefined)
  const paywalled = await listener(t, pages)
  const body = { content: 'hello' }

  for (const headers of [{}, { accept: '*/*' }, { accept: 'application/json' }, { accept: 'text/html, application/json' }, { accept: CHROME_ACCEPT, 'sec-fetch-mode': 'cors' }]) {
    const before = await plain.inject({ method: 'POST', url: '/api/v1/memories', headers, payload: body })
    const after = await paywalled.inject({ method: 'POST', url: '/api/v1/memories', headers, payload: body })
    t.equal(after.statusCode, 402)
    t.equal(after.body, before.body, `${JSON.stringify(headers)}: the same JSON`)
    t.same(withoutVolatile(after.headers), withoutVolatile(before.headers), `${JSON.stringify(headers)}: the same headers`)
  }

  const json = await plain.inject({ method: 'POST', url: '/api/v1/memories', payload: body })
  const page = await paywalled.inject({ method: 'POST', url: '/api/v1/memories', headers: BROWSER, payload: body })
  t.equal(page.statusCode, 402)
  t.match(page.headers['content-type'], /^text\/html; charset=utf-8/)
  for (const name of ['payment-required', 'www-authenticate', 'cache-control']) t.equal(page.headers[name], json.headers[name], `${name} unchanged`)
  t.equal(page.headers.vary, 'Accept')
  t.match(page.headers['content-security-policy'], "default-src 'none'; script-src 'self'")
  t.match(page.body, '<dd id="paywall-price">0.001000 USD</dd>', 'the price of the 402, not a list price')
  t.match(page.body, 'payingFetch(&#39;https://memory.test/api/v1/memories&#39;', "the 402's resource URL")
  t.match(page.body, 'Encrypted agent memory')
  t.match(page.body, 'memory-credit-5', 'the plan that covers memory')

  const other = await paywalled.inject({ method: 'GET', url: '/api/v1/free', headers: BROWSER })
  t.equal(other.statusCode, 404, 'other problems stay problem+json')
  t.match(other.headers['content-type'], /problem\+json/)
})

t.test('a browser opening the URL of a paid POST gets the page; an API client still gets the 404', async (t) => {
  const pages = createPaywall({ registry, gatewayUrl: 'https://gw.test', payTo: PAY_TO }).pagesFor('memory')
  const app = await listener(t, pages)
  const opened = await app.inject({ method: 'GET', url: '/api/v1/memories', headers: BROWSER })
  t.equal(opened.statusCode, 402)
  t.match(opened.body, '<dd id="paywall-price">0.001000 USD</dd>', "the registry's price per write")
  t.match(opened.body, '<textarea id="paywall-body"')
  t.match(opened.body, '&quot;content&quot;', 'the body starts from the required fields')
  t.equal(opened.headers['payment-required'], undefined, 'no challenge without the body: the script asks for it')
  t.equal(opened.headers['cache-control'], 'no-store')
  const deposit = await app.inject({ method: 'GET', url: '/api/v1/deposits', headers: BROWSER })
  t.match(deposit.body, 'data-amount-header="x-pay-amount-micros"', 'a deposit names its amount')
  const api = await app.inject({ method: 'GET', url: '/api/v1/memories', headers: { accept: 'application/json' } })
  t.equal(api.statusCode, 404)
  t.equal(api.json().code, 'route_not_found')
  const elsewhere = await app.inject({ method: 'GET', url: '/api/v1/tasks', headers: BROWSER })
  t.equal(elsewhere.statusCode, 404, "another listener's operation is not offered here")
})

t.test('the script and style sheet are served with a long cache and an ETag', async (t) => {
  const pages = createPaywall({ registry, gatewayUrl: 'https://gw.test', payTo: PAY_TO }).pagesFor('memory')
  const app = await listener(t, pages)
  const script = await app.inject({ method: 'GET', url: '/paywall/paywall.js' })
  t.equal(script.statusCode, 200)
  t.match(script.headers['content-type'], /^text\/javascript/)
  t.match(script.headers['cache-control'], /max-age=\d{5,}/)
  t.match(script.body, 'eth_signTypedData_v4')
  const etag = script.headers.etag as string
  t.match(etag, /^"[A-Za-z0-9_-]+"$/)
  const again = await app.inject({ method: 'GET', url: '/paywall/paywall.js', headers: { 'if-none-match': etag } })
  t.equal(again.statusCode, 304)
  const css = await app.inject({ method: 'GET', url: '/paywall/paywall.css' })
  t.match(css.headers['content-type'], /^text\/css/)
  t.equal((await app.inject({ method: 'GET', url: '/paywall/other.js' })).statusCode, 404)
})
