// The browser paywall end to end: the real CLI (every role, the local EVM), Chromium driven by
// playwright-core, and a wallet injected into the page as `window.ethereum` (EIP-1193) whose
// answers come from a viem private-key account funded by the dev faucet. No paid GET operation
// exists, so the page is opened where a person would: the URL of the paid POST rememberMemory
// (0.001 USD a write). The person fills the body, clicks Pay, sees the answer and the settlement's
// transaction, and the buyer is charged exactly once. API clients still get the JSON 402.
import t from 'tap'
import { mkdtempSync } from 'node:fs'
import { request } from 'node:http'
import os from 'node:os'
import path from 'node:path'
import type { Browser } from 'playwright-core'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
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

t.test('a person pays a paid operation from the paywall page with a browser wallet', async (t) => {
  const buyer = privateKeyToAccount(generatePrivateKey())
  await faucet(cli.gateway, buyer.address, FUNDS)
  const signed: TypedDataRequest[] = []

  const page = await browser.newPage({ viewport: { width: 390, height: 844 } })
  t.teardown(() => page.close())
  const problems: string[] = []
  page.on('console', (message) => {
    // The 402s themselves (the page, the script's challenge) are logged as failed loads; anything else counts.
    if (message.type() === 'error' && !message.text().includes('status of 402')) problems.push(message.text())
  })
  page.on('pageerror', (error) => problems.push(error.message))
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

  const opened = await page.goto(`${cli.memory}/api/v1/memories`)
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
  t.equal(await balanceOf(cli.gateway, buyer.address), FUNDS - WRITE_PRICE, 'charged exactly once')
  t.same(problems, [], 'no script error and no CSP violation')
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
    t.match(answer.headers.get('www-authenticate'), /^Payment /)
    t.equal(answer.headers.get('cache-control'), 'no-store')
  }
  const html = await navigate(`${cli.memory}/api/v1/memories`, 'POST', JSON.stringify({ content: 'x' }))
  t.equal(html.status, 402)
  t.match(html.headers['content-type'], /^text\/html/)
  t.equal(html.headers.vary, 'Accept')
  t.ok(html.headers['payment-required'], 'PAYMENT-REQUIRED kept')
  t.match(html.headers['www-authenticate'], /^Payment /, 'WWW-Authenticate: Payment kept')
  t.equal(html.headers['cache-control'], 'no-store')
  t.match(html.text, '<h1>Payment required</h1>')
  t.match(html.text, '<dd id="paywall-price">0.001000 USD</dd>', "the price of this request's 402")
  const script = await fetch(`${cli.gateway}/paywall/paywall.js`)
  t.equal(script.status, 200, 'the gateway serves the script too')
  t.ok(script.headers.get('etag'))
})
