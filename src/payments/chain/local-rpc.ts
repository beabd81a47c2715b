// JSON-RPC to the embedded dev chain (anvil on 127.0.0.1) over node:http. The dev chain's own
// calls (its start, the pool doctor, the state saver, the faucet) then never load fetch's HTTP
// stack (undici: ~50 ms of the main thread) before the process serves, and a state dump of any size
// is read whole. The chain port that settles and refunds (rpc.ts) keeps viem's HTTP transport.
import { Agent, request } from 'node:http'

/** A JSON-RPC error object the node answered, or a transport failure (code undefined). */
export class LocalRpcError extends Error {
  readonly code: number | undefined
  constructor(message: string, code?: number) {
    super(message)
    this.name = 'LocalRpcError'
    this.code = code
  }
}

export type LocalRpc = <T>(method: string, params: unknown[], options?: { timeoutMs?: number }) => Promise<T>

export interface LocalRpcClient {
  call: LocalRpc
  /** Closes the kept-alive connections. */
  close(): void
}

/** A client of the JSON-RPC endpoint at `url`; each call fails after `timeoutMs` (default 5 s) unless it sets its own. */
export function localRpcClient(url: string, defaults: { timeoutMs?: number } = {}): LocalRpcClient {
  const target = new URL(url)
  if (target.protocol !== 'http:') throw new TypeError(`the dev chain answers plain HTTP, got ${url}`)
  const agent = new Agent({ keepAlive: true, maxSockets: 8 })
  let id = 0
  const call: LocalRpc = <T>(method: string, params: unknown[], options: { timeoutMs?: number } = {}) =>
    new Promise<T>((resolve, reject) => {
      const body = JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params })
      const req = request(
        target,
        {
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
          timeout: options.timeoutMs ?? defaults.timeoutMs ?? 5_000,
        },
        (res) => {
          const chunks: Buffer[] = []
          res.on('data', (chunk: Buffer) => chunks.push(chunk))
          res.on('error', (error) => reject(new LocalRpcError(`${method}: ${error.message}`)))
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8')
            if (res.statusCode !== 200) return reject(new LocalRpcError(`${method}: HTTP ${res.statusCode} ${text.slice(0, 200)}`))
            let answer: { result?: T; error?: { code?: number; message?: string } }
            try {
              answer = JSON.parse(text) as typeof answer
            } catch {
              return reject(new LocalRpcError(`${method}: not JSON: ${text.slice(0, 200)}`))
            }
            if (answer.error) return reject(new LocalRpcError(`${method}: ${answer.error.message ?? 'error'}`, answer.error.code))
            resolve(answer.result as T)
          })
        },
      )
      req.on('timeout', () => req.destroy(new LocalRpcError(`${method}: timed out`)))
      req.on('error', (error) => reject(error instanceof LocalRpcError ? error : new LocalRpcError(`${method}: ${error.message}`)))
      req.end(body)
    })
  return { call, close: () => agent.destroy() }
}
