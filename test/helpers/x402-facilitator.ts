// The official x402 facilitator (`x402Facilitator` from @x402/core with @x402/evm's exact scheme,
// v2 and v1) served over HTTP on a local chain: POST /verify, POST /settle, GET /supported, as a
// hosted facilitator answers them. Its wallet (anvil account #2) pays the gas. Faults are injected
// per /settle call: `answerLost` settles on-chain and then never answers (the caller times out),
// `failWith5xx` answers 502 without settling.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { x402Facilitator } from '@x402/core/facilitator'
import type { PaymentPayload, PaymentRequirements } from '@x402/core/types'
import { SettleError } from '@x402/core/types'
import { toFacilitatorEvmSigner } from '@x402/evm'
import { registerExactEvmScheme } from '@x402/evm/exact/facilitator'
import { createWalletClient, defineChain, http, publicActions, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'

/** anvil's well-known dev account #2: the facilitator's gas wallet (public knowledge, dev only). */
export const FACILITATOR_KEY: Hex = '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a'

export type SettleFault = 'answerLost' | 'failWith5xx' | undefined

export interface SettleCall {
  payer: string
  nonce: string
  version: number
  /** What happened: answered (with success or not), lost after settling, or refused with a 5xx. */
  outcome: 'answered' | 'lost' | '5xx'
  success?: boolean
  transaction?: string
}

export interface TestFacilitator {
  url: string
  /** Every /settle call, in order. */
  settles: SettleCall[]
  verifies: number
  /** Requests refused for a missing or wrong Authorization header. */
  unauthorized: number
  /** Decides the fault of each /settle call (default: none). */
  fault: (call: { payer: string; nonce: string; attempt: number }) => SettleFault
  close(): Promise<void>
}

async function body(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>
}

function send(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(JSON.stringify(value))
}

/** The authorization (payer, nonce) a /verify or /settle body carries. */
function authorizationOf(payload: PaymentPayload): { payer: string; nonce: string } {
  const auth = (payload.payload as { authorization?: { from?: string; nonce?: string } }).authorization ?? {}
  return { payer: String(auth.from ?? '').toLowerCase(), nonce: String(auth.nonce ?? '').toLowerCase() }
}

export async function startTestFacilitator(options: { rpcUrl: string; apiKey?: string; lostAnswerMs?: number }): Promise<TestFacilitator> {
  const account = privateKeyToAccount(FACILITATOR_KEY)
  const chain = defineChain({ id: 8453, name: 'base (anvil)', nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [options.rpcUrl] } } })
  const wallet = createWalletClient({ account, chain, transport: http(options.rpcUrl), pollingInterval: 50 }).extend(publicActions)
  const signer = toFacilitatorEvmSigner(Object.assign(wallet, { address: account.address }) as unknown as Parameters<typeof toFacilitatorEvmSigner>[0], {
    confirmationTimeoutMs: 20_000,
  })
  const facilitator = registerExactEvmScheme(new x402Facilitator(), { signer, networks: 'eip155:8453' })
  const attempts = new Map<string, number>()
  const sockets = new Set<import('node:net').Socket>()
  const state: TestFacilitator = {
    url: '',
    settles: [],
    verifies: 0,
    unauthorized: 0,
    fault: () => undefined,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
  const server = createServer(async (req, res) => {
    try {
      if (options.apiKey && req.headers.authorization !== `Bearer ${options.apiKey}`) {
        state.unauthorized += 1
        return send(res, 401, { error: 'unauthorized' })
      }
      if (req.method === 'GET' && req.url === '/supported') return send(res, 200, facilitator.getSupported())
      if (req.method !== 'POST' || (req.url !== '/verify' && req.url !== '/settle')) return send(res, 404, { error: 'not found' })
      const { paymentPayload, paymentRequirements } = (await body(req)) as { paymentPayload: PaymentPayload; paymentRequirements: PaymentRequirements }
      if (req.url === '/verify') {
        state.verifies += 1
        return send(res, 200, await facilitator.verify(paymentPayload, paymentRequirements))
      }
      const { payer, nonce } = authorizationOf(paymentPayload)
      const attempt = (attempts.get(nonce) ?? 0) + 1
      attempts.set(nonce, attempt)
      const fault = state.fault({ payer, nonce, attempt })
      const call: SettleCall = { payer, nonce, version: paymentPayload.x402Version, outcome: 'answered' }
      state.settles.push(call)
      if (fault === 'failWith5xx') {
        call.outcome = '5xx'
        return send(res, 502, { error: 'upstream unavailable' })
      }
      let answer: Awaited<ReturnType<typeof facilitator.settle>>
      try {
        answer = await facilitator.settle(paymentPayload, paymentRequirements)
      } catch (error) {
        if (!(error instanceof SettleError)) throw error
        answer = { success: false, errorReason: error.errorReason, errorMessage: error.errorMessage, transaction: error.transaction, network: error.network }
      }
      call.success = answer.success
      call.transaction = answer.transaction
      if (fault === 'answerLost') {
        // Settled; the answer never reaches the caller (it gives up first, then the connection is cut).
        call.outcome = 'lost'
        setTimeout(() => req.socket.destroy(), options.lostAnswerMs ?? 10_000).unref()
        return
      }
      send(res, answer.success ? 200 : 400, answer)
    } catch (error) {
      send(res, 500, { error: (error as Error).message })
    }
  })
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return state
}
