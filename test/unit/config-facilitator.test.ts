// Facilitator mode's configuration: X402_FACILITATOR_URL (http/https, no credentials, needs
// CHAIN_RPC_URL, makes SETTLER_PRIVATE_KEY optional), X402_FACILITATOR_HEADERS (a JSON object or
// Name: value lines; errors name the header, never its value) and X402_FACILITATOR_TIMEOUT_MS.
import t from 'tap'
import { ConfigError, loadConfig } from '../../src/platform/config.ts'

const PAY_TO = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
const base = { CHAIN_RPC_URL: 'https://base.example/rpc', PAY_TO_ADDRESS: PAY_TO, X402_FACILITATOR_URL: 'https://facilitator.example/x402' }

function refused(env: Record<string, string>): ConfigError {
  try {
    loadConfig(env, '/srv')
  } catch (error) {
    if (error instanceof ConfigError) return error
    throw error
  }
  throw new Error('accepted')
}

t.test('unset: self-settlement, SETTLER_PRIVATE_KEY required with CHAIN_RPC_URL as before', async (t) => {
  const config = loadConfig({}, '/srv')
  t.equal(config.x402FacilitatorUrl, undefined)
  t.same(config.x402FacilitatorHeaders, {})
  t.equal(config.x402FacilitatorTimeoutMs, 30_000)
  t.equal(refused({ CHAIN_RPC_URL: base.CHAIN_RPC_URL, PAY_TO_ADDRESS: PAY_TO }).variable, 'SETTLER_PRIVATE_KEY')
})

t.test('set: no SETTLER_PRIVATE_KEY needed; CHAIN_RPC_URL is', async (t) => {
  const config = loadConfig({ ...base, X402_FACILITATOR_TIMEOUT_MS: '5000' }, '/srv')
  t.equal(config.x402FacilitatorUrl, base.X402_FACILITATOR_URL)
  t.equal(config.settlerPrivateKey, undefined)
  t.equal(config.x402FacilitatorTimeoutMs, 5000)
  const noRpc = refused({ X402_FACILITATOR_URL: base.X402_FACILITATOR_URL })
  t.equal(noRpc.variable, 'CHAIN_RPC_URL')
  t.match(noRpc.message, /required when X402_FACILITATOR_URL is set/)
})

t.test('the URL must be http(s), without a user name or password', async (t) => {
  t.equal(refused({ ...base, X402_FACILITATOR_URL: 'ftp://facilitator.example' }).variable, 'X402_FACILITATOR_URL')
  t.equal(refused({ ...base, X402_FACILITATOR_URL: 'not a url' }).variable, 'X402_FACILITATOR_URL')
  const withSecret = refused({ ...base, X402_FACILITATOR_URL: 'https://user:sekrit@facilitator.example' })
  t.equal(withSecret.variable, 'X402_FACILITATOR_URL')
  t.notMatch(withSecret.message, /sekrit/)
  t.equal(refused({ ...base, X402_FACILITATOR_TIMEOUT_MS: '0' }).variable, 'X402_FACILITATOR_TIMEOUT_MS')
})

t.test('headers: a JSON object or Name: value lines', async (t) => {
  const json = loadConfig({ ...base, X402_FACILITATOR_HEADERS: '{"Authorization": "Bearer sk_1", "X-Api-Key": "k:2"}' }, '/srv')
  t.same(json.x402FacilitatorHeaders, { Authorization: 'Bearer sk_1', 'X-Api-Key': 'k:2' })
  const lines = loadConfig({ ...base, X402_FACILITATOR_HEADERS: 'Authorization: Bearer sk_1\r\n  X-Api-Key: k:2\n' }, '/srv')
  t.same(lines.x402FacilitatorHeaders, { Authorization: 'Bearer sk_1', 'X-Api-Key': 'k:2' }, 'a colon in the value is kept')
})

t.test('bad headers are refused naming the variable, never echoing a value', async (t) => {
  const cases: [string, RegExp][] = [
    ['{"Authorization": ', /not valid JSON/],
    ['["Authorization"]', /JSON object/],
    ['{"Authorization": 42}', /Authorization must have a string value/],
    ['{"Bad Name": "sekrit"}', /invalid header name/],
    ['{"Content-Type": "sekrit"}', /must not set Content-Type/],
    ['Authorization: Bearer sekrit\nsekrit-without-a-name', /line 2 has no "Name:"/],
    ['{"Authorization": "Bearer sekrit\\u0007"}', /printable ASCII/],
  ]
  for (const [value, message] of cases) {
    const error = refused({ ...base, X402_FACILITATOR_HEADERS: value })
    t.equal(error.variable, 'X402_FACILITATOR_HEADERS', value)
    t.match(error.message, message)
    t.notMatch(error.message, /sekrit/, 'the value is not echoed')
  }
})
