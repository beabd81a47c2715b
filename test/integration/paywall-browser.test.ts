// The browser paywall end to end: the real CLI (every role, the local EVM), Chromium driven by
// playwright-core, and a wallet injected into the page as `window.ethereum` (EIP-1193) whose
// answers come from a viem private-key account funded by the dev faucet. No paid GET operation
// exists, so the page is opened where a person would: the URL of the paid POST rememberMemory
// (0.001 USD a write). The person fills the body, clicks Pay, sees the answer and the settlement's
// transaction, and the buyer is charged exactly once. API clients still get the JSON 402.
import t from 'tap'
import type { Test } from 'tap'
import { mkdtempSync } from 'node:fs'
import { request } from 'node:http'
import os from 'node:os'
import path from 'node:path'
import type { Browser, Page, Request } from 'playwright-core'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf, faucet } from '../helpers/dev-chain.ts'
import { launchChromium } from '../helpers/reviewer-driver.ts'

// The browser global of the functions evaluated in the page (the project's tsconfig has no DOM lib).
declare const window: any

const WRITE_PRICE = 1_000n
const FUNDS = 1_000_000n
const CHROME_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8'

/** A request as a browser navigation sends it (fetch() would set Sec-Fetch-Mode: cors itself). */
function navigate(url: string, method: string, body: string): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(
      url,
      { method, headers: { accept: CHROME_ACCEPT, 'sec-fetch-mode': 'navigate', 'sec-fetch-dest': 'document', 'content-type': 'application/json' } },
      (incoming) => {
        let text = ''
        incoming.on('data', (chunk: Buffer) => (text += chunk.toString()))
        incoming.on('end', () => resolve({ status: incoming.statusCode ?? 0, headers: incoming.headers, text }))
      },
    )
    outgoing.on('error', reject)
    outgoing.end(body)
  })
}

let cli: CliProcess
let browser: Browser
t.before(async () => {
  cli = await startCli({ dataDir: mkdtempSync(path.join(os.tmpdir(), 'agw-paywall-')) })
  browser = await launchChromium()
})
t.teardown(async () => {
  await browser?.close()
  await cli?.stop('SIGKILL')
})

interface TypedDataRequest {
  domain: Record<string, unknown>
  types: Record<string, { name: string; type: string }[]>
  primaryType: string
  message: Record<string, unknown>
}

interface PaywallSession {
  page: Page
  /** Every authorization the wallet signed. */
  signed: TypedDataRequest[]
  /** Script errors and CSP violations seen on the page. */
  problems: string[]
  /** The paid requests the page sent (those carrying PAYMENT-SIGNATURE), in order. */
  paidRequests: Request[]
  /** Every request the page sent to the URL it pays (the challenge fetches and the paid ones). */
  calls: Request[]
}

const memoriesUrl = () => `${cli.memory}/api/v1/memories`

/** A phone-sized page whose `window.ethereum` is answered by the viem account `buyer`. */
async function openPaywall(t: Test, buyer: PrivateKeyAccount): Promise<PaywallSession> {
  const signed: TypedDataRequest[] = []
  const page = await browser.newPage({ viewport: { width: 390, height: 844 } })
  t.teardown(() => page.close())
  const problems: string[] = []
  page.on('console', (message) => {
    // The 402s themselves (the page, the script's challenge) are logged as failed loads; anything else counts.
    if (message.type() === 'error' && !message.text().includes('status of 402') && !message.text().includes('net::ERR_CONNECTION_RESET')) problems.push(message.text())
  })
  page.on('pageerror', (error) => problems.push(error.message))
  const paidRequests: Request[] = []
  const calls: Request[] = []
  page.on('request', (request) => {
    if (request.url() !== memoriesUrl() || request.resourceType() !== 'fetch') return
    calls.push(request)
    if (request.headers()['payment-signature']) paidRequests.push(request)
  })
  // The wallet: every EIP-1193 request of the page is answered here, by the viem account.
  await page.exposeFunction('walletRequest', async (method: string, params: unknown[]) => {
    switch (method) {
      case 'eth_requestAccounts':
      case 'eth_accounts':
        return [buyer.address]
      case 'eth_chainId':
        return '0x2105'
      case 'eth_signTypedData_v4': {
        const [from, json] = params as [string, string]
        if (from.toLowerCase() !== buyer.address.toLowerCase()) throw new Error(`asked to sign for ${from}`)
        const typed = JSON.parse(json) as TypedDataRequest
        signed.push(typed)
        const { EIP712Domain: _domain, ...types } = typed.types
        const message = Object.fromEntries(
          Object.entries(typed.message).map(([key, value]) => [key, ['value', 'validAfter', 'validBefore'].includes(key) ? BigInt(value as string) : value]),
        )
        return buyer.signTypedData({ domain: typed.domain, types, primaryType: typed.primaryType, message } as never)
      }
      default:
        throw new Error(`unsupported wallet method ${method}`)
    }
  })
  await page.addInitScript(() => {
    window.ethereum = { request: ({ method, params }: { method: string; params?: unknown[] }) => window.walletRequest(method, params ?? []) }
  })
  return { page, signed, problems, paidRequests, calls }
}

/** The decoded v2 PaymentPayload a paid request carried. */
function paymentOf(request: Request): { extensions?: Record<string, { info?: { id?: unknown } }> } {
  return JSON.parse(Buffer.from(request.headers()['payment-signature'] ?? '', 'base64').toString('utf8'))
}

function paymentIdOf(request: Request): unknown {
  return paymentOf(request).extensions?.['payment-identifier']?.info?.id
}

/** A funded buyer, and the page open at the paid URL with its body filled. */
async function readyToPay(t: Test, content: string): Promise<PaywallSession & { buyer: PrivateKeyAccount }> {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, FUNDS)
  const session = await openPaywall(t, buyer)
  await session.page.goto(memoriesUrl())
  await session.page.getByLabel('Request body (JSON) sent with POST').fill(JSON.stringify({ content, tags: ['paywall'] }))
  return { ...session, buyer }
}

t.test('a person pays a paid operation from the paywall page with a browser wallet', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, FUNDS)
  const { page, signed, problems, paidRequests } = await openPaywall(t, buyer)

  const opened = await page.goto(memoriesUrl())
  t.equal(opened?.status(), 402, 'the page comes with a 402')
  t.equal(opened?.headers().vary, 'Accept')
  await page.getByRole('heading', { level: 1, name: 'Payment required' }).waitFor()
  t.equal(await page.locator('#paywall-price').textContent(), '0.001000 USD', 'the price')
  t.match(await page.locator('main').textContent(), 'POST /api/v1/memories')
  t.ok(await page.getByRole('link', { name: 'Encrypted agent memory' }).isVisible(), 'a link to the service')
  t.ok(await page.getByRole('button', { name: 'Pay with a browser wallet' }).isVisible(), 'the wallet button, since a wallet is injected')
  const width = await page.evaluate(() => window.document.documentElement.scrollWidth)
  t.ok(width <= 390, `fits a phone's width (${width}px)`)

  await page.getByLabel('Request body (JSON) sent with POST').fill(JSON.stringify({ content: 'Paid from a browser wallet', tags: ['paywall'] }))
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  await page.locator('#paywall-result').waitFor({ state: 'visible', timeout: 30_000 })

  t.match(await page.locator('#paywall-result-status').textContent(), /^201/, 'the write was made')
  t.match(await page.locator('#paywall-transaction').textContent(), /^0x[0-9a-f]{64} \(eip155:8453, payer 0x/i, 'the settlement transaction is shown')
  t.match(await page.locator('#paywall-response').textContent(), '"id"', 'the answer is shown')
  t.match(await page.getByRole('status').textContent(), 'Paid.')
  t.equal(signed.length, 1, 'the wallet signed once')
  t.same(
    signed[0]?.domain,
    { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' },
    'the EIP-712 domain of USDC on Base',
  )
  t.equal(signed[0]?.message.value, WRITE_PRICE.toString())
  t.equal(paidRequests.length, 1)
  const [paidRequest] = paidRequests
  t.match(paidRequest && paymentIdOf(paidRequest), /^[A-Za-z0-9_-]{16,128}$/, "a payment-identifier in the extension's format, since the 402 declares it")
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'charged exactly once')
  t.same(problems, [], 'no script error and no CSP violation')
})

t.test('after a purchase the Pay button stays disabled, and a forced second click buys nothing', async (t) => {
  const { page, buyer, signed, problems, paidRequests, calls } = await readyToPay(t, 'Bought once')
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  await page.locator('#paywall-result').waitFor({ state: 'visible', timeout: 30_000 })
  t.match(await page.locator('#paywall-result-status').textContent(), /^201/, 'the write was made')
  const button = page.locator('#paywall-pay')
  t.ok(await button.isDisabled(), 'the button is disabled after the purchase')
  t.match(await button.textContent(), /paid/i, 'and says it was paid')
  t.match(await page.locator('#paywall-response').textContent(), '"id"', 'the answer stays shown')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'charged once')

  // Someone re-enables the button (devtools, an extension) and clicks again, twice.
  const before = calls.length
  await page.evaluate(() => {
    const pay = window.document.getElementById('paywall-pay')
    pay.disabled = false
    pay.click()
    pay.dispatchEvent(new window.MouseEvent('click', { bubbles: true }))
  })
  await page.waitForTimeout(2_000)
  t.equal(calls.length - before, 0, 'no request is sent again')
  t.equal(signed.length, 1, 'the wallet is not asked to sign again')
  t.equal(paidRequests.length, 1, 'one paid request')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'still charged exactly once')
  t.ok(await button.isDisabled(), 'the button is disabled again')
  t.match(await page.locator('#paywall-result-status').textContent(), /^201/, 'the answer is still the purchase')
  t.same(problems, [])
})

t.test('a paid answer lost on the way back: the retry sends the same payment id and gets the replayed answer, one charge', async (t) => {
  const { page, buyer, problems, paidRequests } = await readyToPay(t, 'Answer lost once')
  // The first paid request reaches the server (which does the work and settles), then its answer is cut off.
  let lost: { status: number; transaction: string | undefined } | undefined
  await page.route(memoriesUrl(), async (route) => {
    const request = route.request()
    if (lost === undefined && request.resourceType() === 'fetch' && request.headers()['payment-signature']) {
      const response = await route.fetch()
      const receipt = response.headers()['payment-response']
      lost = { status: response.status(), transaction: receipt && JSON.parse(Buffer.from(receipt, 'base64').toString('utf8')).transaction }
      await route.abort('connectionreset')
      return
    }
    await route.continue()
  })
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  const button = page.locator('#paywall-pay')
  await page.waitForFunction(() => !window.document.getElementById('paywall-pay').disabled, undefined, { timeout: 30_000 })
  t.equal(lost?.status, 201, 'the server made the write and settled; only its answer was lost')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'the lost answer was paid for')
  t.notOk(await page.locator('#paywall-result').isVisible(), 'no answer to show')
  t.match(await page.getByRole('status').textContent(), /again/i, 'the person is told to try again')
  t.match(await button.textContent(), 'Pay with a browser wallet', 'the button is enabled for the retry')

  const replayed = page.waitForResponse((response) => response.url() === memoriesUrl() && response.request().headers()['payment-signature'] !== undefined)
  await button.click()
  const answer = await replayed
  await page.locator('#paywall-result').waitFor({ state: 'visible', timeout: 30_000 })
  t.equal(paidRequests.length, 2, 'the payment was sent twice')
  const [first, second] = paidRequests.map(paymentIdOf)
  t.match(first, /^[A-Za-z0-9_-]{16,128}$/, 'with a payment id')
  t.equal(second, first, 'the retry reuses the attempt’s payment id')
  t.equal(answer.headers()['x-payment-identifier-replay'], 'true', 'the server replayed the first answer')
  t.equal(answer.status(), 201)
  t.match(await page.locator('#paywall-result-status').textContent(), /^201/, 'the replayed answer is shown')
  t.match(await page.locator('#paywall-transaction').textContent(), lost?.transaction ?? 'no transaction', 'with the first payment’s transaction')
  t.match(await page.getByRole('status').textContent(), 'Paid.')
  t.ok(await button.isDisabled(), 'and the button is disabled now')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'charged exactly once')
  t.same(problems, [])
})

t.test('a changed request is a new purchase attempt with a new payment id', async (t) => {
  const { page, buyer, paidRequests } = await readyToPay(t, 'First body')
  // The first paid request never reaches the server (the connection fails on the way out).
  let cut = false
  await page.route(memoriesUrl(), async (route) => {
    const request = route.request()
    if (!cut && request.resourceType() === 'fetch' && request.headers()['payment-signature']) {
      cut = true
      return route.abort('connectionreset')
    }
    return route.continue()
  })
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  await page.waitForFunction(() => !window.document.getElementById('paywall-pay').disabled, undefined, { timeout: 30_000 })
  t.ok(cut, 'the first payment was cut off')
  // The person edits the body: another request, so another attempt (the server would call the old id a conflict).
  await page.getByLabel('Request body (JSON) sent with POST').fill(JSON.stringify({ content: 'Second body', tags: ['paywall'] }))
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  await page.locator('#paywall-result').waitFor({ state: 'visible', timeout: 30_000 })
  t.match(await page.locator('#paywall-result-status').textContent(), /^201/, 'the edited request was made')
  t.notOk(await page.locator('#paywall-result').getByText('payment_identifier_conflict').isVisible())
  const ids = paidRequests.map(paymentIdOf)
  t.equal(ids.length, 2)
  t.match(ids[1], /^[A-Za-z0-9_-]{16,128}$/)
  t.not(ids[0], ids[1], 'another request gets another id')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'charged once, for the write made')
})

t.test('a 402 that does not declare payment-identifier gets no payment id', async (t) => {
  const { page, buyer, paidRequests } = await readyToPay(t, 'No identifier declared')
  // The challenge the page fetches, with the declaration taken out of its PAYMENT-REQUIRED header.
  await page.route(memoriesUrl(), async (route) => {
    const request = route.request()
    if (request.resourceType() !== 'fetch' || request.headers()['payment-signature']) return route.continue()
    const response = await route.fetch()
    const header = response.headers()['payment-required']
    if (!header) return route.fulfill({ response })
    const required = JSON.parse(Buffer.from(header, 'base64').toString('utf8'))
    delete required.extensions['payment-identifier']
    return route.fulfill({ response, headers: { ...response.headers(), 'payment-required': Buffer.from(JSON.stringify(required)).toString('base64') } })
  })
  await page.getByRole('button', { name: 'Pay with a browser wallet' }).click()
  await page.locator('#paywall-result').waitFor({ state: 'visible', timeout: 30_000 })
  t.match(await page.locator('#paywall-result-status').textContent(), /^201/)
  t.equal(paidRequests.length, 1)
  const [paid] = paidRequests
  t.equal(paid && paymentOf(paid).extensions?.['payment-identifier'], undefined, 'no payment-identifier is sent')
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE)
})

t.test('a browser without a wallet is told how to pay from an agent', async (t) => {
  const page = await browser.newPage()
  t.teardown(() => page.close())
  await page.goto(`${cli.memory}/api/v1/memories`)
  await page.getByText('No browser wallet was found').waitFor()
  t.notOk(await page.getByRole('button', { name: 'Pay with a browser wallet' }).isVisible())
  t.match(await page.locator('main').textContent(), 'wrapFetchWithPayment')
  t.match(await page.locator('main').textContent(), `${cli.gateway}/mcp`)
})

t.test('API clients still get the JSON 402, browsers the page with the same payment headers', async (t) => {
  const call = (headers: Record<string, string>) =>
    fetch(`${cli.memory}/api/v1/memories`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ content: 'x' }) })
  const answers = [await call({ accept: 'application/json' }), await call({}), await call({ accept: '*/*' })]
  for (const answer of answers) {
    t.equal(answer.status, 402)
    t.match(answer.headers.get('content-type'), /^application\/problem\+json/)
    t.equal(answer.headers.get('vary'), null)
    const body = (await answer.json()) as Record<string, unknown>
    t.equal(body.code, 'payment_required')
    t.equal(body.x402Version, 1)
    t.ok(answer.headers.get('payment-required'))
    // The embedded default has no Tempo RPC: a priced 402 offers no MPP challenge.
    t.equal(answer.headers.get('www-authenticate'), null)
    t.equal(answer.headers.get('cache-control'), 'no-store')
  }
  const html = await navigate(`${cli.memory}/api/v1/memories`, 'POST', JSON.stringify({ content: 'x' }))
  t.equal(html.status, 402)
  t.match(html.headers['content-type'], /^text\/html/)
  t.equal(html.headers.vary, 'Accept')
  t.ok(html.headers['payment-required'], 'PAYMENT-REQUIRED kept')
  t.equal(html.headers['www-authenticate'], undefined, 'no WWW-Authenticate added (none on the JSON 402 either)')
  t.equal(html.headers['cache-control'], 'no-store')
  t.match(html.text, '<h1>Payment required</h1>')
  t.match(html.text, '<dd id="paywall-price">0.001000 USD</dd>', "the price of this request's 402")
  const script = await fetch(`${cli.gateway}/paywall/paywall.js`)
  t.equal(script.status, 200, 'the gateway serves the script too')
  t.ok(script.headers.get('etag'))
})
