// `agent-gateway pay URL`: one request paid by hand, on the embedded default. The request goes out
// as it is; on a 402 the real x402 client (@x402/fetch with @x402/evm's exact scheme, as the demo
// uses it, src/demo/clients.ts) takes over: just before it signs, a throwaway wallet is funded from
// the dev faucet with exactly the amount the chosen requirement asks, then the signed request is
// sent again. The answer and the PAYMENT-RESPONSE receipt are printed. Spend controls stay on (the
// default assets only, a per-payment cap), and they are checked before the hook, so a refused 402
// funds nothing.
import { parseArgs } from 'node:util'
import { x402Client } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { usdc } from '../demo/output.ts'
import { loadConfig } from '../platform/config.ts'
import { DEFAULT_MAX_USD, PAY_USAGE } from './pay-usage.ts'

export interface PayIo {
  out: { write(text: string): unknown }
  err: { write(text: string): unknown }
}

/** A request the CLI may send: what the arguments asked. */
interface PayRequest {
  url: URL
  method: string
  headers: Headers
  body: string | undefined
  /** Where /dev/faucet may be, in the order tried. */
  faucets: string[]
  maxUsd: number
}

class UsageError extends Error {}
/** The command cannot go on: the message is printed as it is, exit 1. */
class PayFailure extends Error {}

const REQUEST_TIMEOUT_MS = 180_000

const parse = (argv: string[]) =>
  parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      method: { type: 'string', short: 'X' },
      data: { type: 'string', short: 'd' },
      header: { type: 'string', short: 'H', multiple: true },
      gateway: { type: 'string' },
      'max-usd': { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })

function httpUrl(name: string, value: string): URL {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new UsageError(`${name} "${value}" is not a URL`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${name} "${value}" is not an http(s) URL`)
  return url
}

/** The gateway the environment names (as the server computes it), if the environment is valid. */
function configuredGateway(): string | undefined {
  try {
    return loadConfig().publicBaseUrl
  } catch {
    return undefined
  }
}

function requestOf(values: ReturnType<typeof parse>['values'], positionals: string[]): PayRequest {
  if (positionals.length === 0) throw new UsageError('a URL is required')
  if (positionals.length > 1) throw new UsageError(`one URL at a time (got ${positionals.length}: ${positionals.join(' ')})`)
  const url = httpUrl('URL', positionals[0] as string)
  const method = (values.method ?? (values.data === undefined ? 'GET' : 'POST')).toUpperCase()
  if (!/^[A-Z]+$/.test(method)) throw new UsageError(`--method "${values.method}" is not an HTTP method`)
  const headers = new Headers()
  for (const header of values.header ?? []) {
    const colon = header.indexOf(':')
    if (colon <= 0) throw new UsageError(`-H "${header}": expected "Name: value"`)
    try {
      headers.append(header.slice(0, colon).trim(), header.slice(colon + 1).trim())
    } catch {
      throw new UsageError(`-H "${header}": not a valid header`)
    }
  }
  let body: string | undefined
  if (values.data !== undefined) {
    try {
      JSON.parse(values.data)
    } catch (error) {
      throw new UsageError(`--data is not JSON: ${(error as Error).message}`)
    }
    body = values.data
    if (!headers.has('content-type')) headers.set('content-type', 'application/json')
  }
  const maxUsd = values['max-usd'] === undefined ? DEFAULT_MAX_USD : Number(values['max-usd'])
  if (!Number.isFinite(maxUsd) || maxUsd <= 0) throw new UsageError(`--max-usd "${values['max-usd']}" is not a positive number of USD`)
  // --gateway, else the URL's own server (the gateway's operations), then the environment's gateway.
  const faucets = values.gateway !== undefined ? [values.gateway.replace(/\/+$/, '')] : [url.origin]
  if (values.gateway !== undefined) httpUrl('--gateway', values.gateway)
  else {
    const configured = configuredGateway()
    if (configured !== undefined && configured !== url.origin) faucets.push(configured)
  }
  return { url, method, headers, body, faucets, maxUsd }
}

/** fetch, with transport errors (nothing listening, a deadline) turned into a sentence naming the address. */
async function send(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  const request = new Request(input, init)
  try {
    return await fetch(request)
  } catch (error) {
    const origin = new URL(request.url).origin
    const cause = (error as { cause?: { code?: string; message?: string } }).cause
    if ((error as Error).name === 'TimeoutError') throw new PayFailure(`no answer from ${origin} within ${REQUEST_TIMEOUT_MS / 1000} s`)
    if (cause?.code === 'ECONNREFUSED' || cause?.code === 'ENOTFOUND' || cause?.code === 'EAI_AGAIN') {
      throw new PayFailure(`nothing answers at ${origin} (${cause.code}); is the server running (\`npm start\`)?`)
    }
    throw new PayFailure(`the request to ${origin} failed: ${cause?.message ?? (error as Error).message}`)
  }
}

/** Funds `address` with `micros` test USDC from the first faucet that has one: where, and the mint's transaction. */
async function fund(faucets: string[], address: string, micros: bigint): Promise<{ faucet: string; tx: string }> {
  const tried: string[] = []
  for (const base of faucets) {
    const faucet = `${base}/dev/faucet`
    let response: Response
    try {
      response = await send(faucet, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ address, amountMicros: micros.toString() }),
        signal: AbortSignal.timeout(60_000),
      })
    } catch (error) {
      tried.push(`${faucet}: ${(error as Error).message}`)
      continue
    }
    const text = await response.text()
    if (response.status === 404) {
      tried.push(`${faucet}: 404`)
      continue
    }
    if (response.status !== 200) throw new PayFailure(`the faucet ${faucet} did not fund the wallet: ${response.status} ${text.slice(0, 300)}`)
    const tx = (JSON.parse(text) as { txHash?: string }).txHash ?? 'unknown'
    return { faucet, tx }
  }
  throw new PayFailure(
    `no dev faucet to fund the wallet (${tried.join('; ')}). \`pay\` works on the embedded default's local dev chain ` +
      '(a server started without CHAIN_RPC_URL); if its gateway is elsewhere, name it with --gateway URL',
  )
}

/** The body for a person: JSON indented, text as it is, anything else by its size and type. */
async function printable(response: Response): Promise<string> {
  const type = response.headers.get('content-type') ?? ''
  const bytes = Buffer.from(await response.arrayBuffer())
  if (bytes.length === 0) return '(empty body)'
  if (/json/i.test(type)) {
    try {
      return JSON.stringify(JSON.parse(bytes.toString('utf8')), null, 2)
    } catch {
      // not JSON after all: shown as text
    }
  }
  if (type === '' || /^text\/|json|xml|javascript/i.test(type)) return bytes.toString('utf8').trimEnd()
  return `(${bytes.length} bytes of ${type.split(';')[0]})`
}

/** The receipt as decoded, less each extension's JSON Schema (what its info looks like, not what it says). */
function readableReceipt(receipt: object): object {
  const { extensions, ...rest } = receipt as { extensions?: Record<string, unknown> }
  if (extensions === undefined || extensions === null || typeof extensions !== 'object') return receipt
  const trimmed = Object.fromEntries(
    Object.entries(extensions).map(([name, value]) => {
      if (value === null || typeof value !== 'object') return [name, value]
      const { schema: _schema, ...info } = value as Record<string, unknown>
      return [name, info]
    }),
  )
  return { ...rest, extensions: trimmed }
}

async function pay(request: PayRequest, io: PayIo): Promise<number> {
  const say = (line: string) => io.out.write(`${line}\n`)
  say(`agent-gateway pay: ${request.method} ${request.url.href}`)
  const account = privateKeyToAccount(generatePrivateKey())
  let paid: bigint | undefined
  let failure: PayFailure | undefined
  const client = new x402Client()
    .register('eip155:8453', new ExactEvmScheme(account))
    .setSpendControls({ maxAmountPerPayment: `$${request.maxUsd}` })
    .onBeforePaymentCreation(async ({ selectedRequirements: asked }) => {
      const micros = BigInt(asked.amount)
      say(`402 asked ${usdc(micros)} USDC (x402 ${asked.scheme} on ${asked.network}, pay to ${asked.payTo})`)
      try {
        const { faucet, tx } = await fund(request.faucets, account.address, micros)
        say(`throwaway wallet ${account.address} funded with ${usdc(micros)} test USDC by ${faucet} (tx ${tx})`)
      } catch (error) {
        failure = error instanceof PayFailure ? error : new PayFailure(`funding the wallet failed: ${(error as Error).message}`)
        return { abort: true, reason: failure.message }
      }
      paid = micros
    })
  const paying = wrapFetchWithPayment(send, client)
  let response: Response
  try {
    response = await paying(request.url, { method: request.method, headers: request.headers, body: request.body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) })
  } catch (error) {
    if (failure !== undefined) throw failure
    if (error instanceof PayFailure) throw error
    const message = (error as Error).message
    const cap = /spendControls\.maxAmountPerPayment/.test(message) ? ` (the cap is --max-usd ${request.maxUsd}; raise it to pay more)` : ''
    throw new PayFailure(`the x402 client would not pay: ${message}${cap}`)
  }
  if (paid === undefined && response.status !== 402) say('no payment asked: nothing funded, nothing paid')
  say(`HTTP ${response.status} ${response.statusText}`.trimEnd())
  const type = response.headers.get('content-type')
  if (type) say(`content-type: ${type}`)
  const receiptHeader = response.headers.get('payment-response') ?? response.headers.get('x-payment-response')
  say('')
  say(await printable(response))
  if (receiptHeader) {
    say('')
    say(`payment receipt (${response.headers.has('payment-response') ? 'PAYMENT-RESPONSE' : 'X-PAYMENT-RESPONSE'}):`)
    try {
      say(JSON.stringify(readableReceipt(decodePaymentResponseHeader(receiptHeader)), null, 2))
    } catch {
      say(receiptHeader)
    }
  } else if (paid !== undefined) {
    say('')
    say('no payment receipt: the answer carries no PAYMENT-RESPONSE (the payment did not settle)')
  }
  return response.status >= 200 && response.status < 300 ? 0 : 1
}

/** Runs `agent-gateway pay` with the arguments after `pay`; the exit code (0 answered 2xx, 1 otherwise, 2 bad arguments). */
export async function runPay(argv: string[], io: PayIo = { out: process.stdout, err: process.stderr }): Promise<number> {
  let request: PayRequest
  try {
    const { values, positionals } = parse(argv)
    if (values.help) {
      io.out.write(PAY_USAGE)
      return 0
    }
    request = requestOf(values, positionals)
  } catch (error) {
    io.err.write(`agent-gateway pay: ${(error as Error).message}\n\n${PAY_USAGE}`)
    return 2
  }
  try {
    return await pay(request, io)
  } catch (error) {
    if (!(error instanceof PayFailure)) throw error
    io.err.write(`agent-gateway pay: ${error.message}\n`)
    return 1
  }
}
