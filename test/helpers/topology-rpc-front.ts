// The topology drill's RPC front: a node:http JSON-RPC proxy before the anvil node, the address the
// roles know as CHAIN_RPC_URL. Faults of the RPC happen here, so the node itself never loses a
// block: `down` refuses (listener closed) or drops (accepted, then reset) every connection, as an
// RPC endpoint that restarts or whose load balancer lost it; `slow` holds every answer for a while
// (the request reaches the node at once, only its answer is late, so a write may land while the
// caller has given up on it). The drill's block producer and its checks talk to the node directly.
import http from 'node:http'
import type { Socket } from 'node:net'

export type RpcDownMode = 'refuse' | 'reset'

export interface RpcFront {
  url: string
  port: number
  /** Requests answered, connections refused or reset while down, answers held back while slow. */
  stats: { proxied: number; dropped: number; delayed: number }
  /** Stops answering; resolves once every request already passed to the node has its answer there. */
  down(mode: RpcDownMode): Promise<void>
  /** Answers again (listening on the same port). */
  up(): Promise<void>
  /** Each answer waits `delayMs()` ms before it is written; undefined: no delay. */
  slow(delayMs: (() => number) | undefined): void
  isUp(): boolean
  close(): Promise<void>
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** A front on `port` (0: a free one) of 127.0.0.1 before the node at `nodeUrl`. */
export async function startRpcFront(nodeUrl: string, port = 0): Promise<RpcFront> {
  const node = new URL(nodeUrl)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 })
  const stats = { proxied: 0, dropped: 0, delayed: 0 }
  const sockets = new Set<Socket>()
  let mode: 'up' | RpcDownMode = 'up'
  let delay: (() => number) | undefined
  let inFlight = 0
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('error', () => res.destroy())
    req.on('end', () => {
      if (mode !== 'up') {
        stats.dropped += 1
        res.destroy()
        return
      }
      inFlight += 1
      const upstream = http.request({ host: node.hostname, port: node.port, path: node.pathname, method: 'POST', headers: { 'content-type': 'application/json' }, agent })
      upstream.on('response', (answer) => {
        const body: Buffer[] = []
        answer.on('data', (chunk: Buffer) => body.push(chunk))
        answer.on('error', () => res.destroy())
        answer.on('end', async () => {
          inFlight -= 1
          const hold = delay?.() ?? 0
          if (hold > 0) {
            stats.delayed += 1
            await sleep(hold)
          }
          // Gone down while the answer was held: the caller never gets it, as from a dying endpoint.
          if (mode !== 'up' || res.destroyed) return void res.destroy()
          stats.proxied += 1
          res.writeHead(answer.statusCode ?? 502, { 'content-type': answer.headers['content-type'] ?? 'application/json' })
          res.end(Buffer.concat(body))
        })
      })
      upstream.on('error', () => {
        inFlight -= 1
        res.destroy()
      })
      upstream.end(Buffer.concat(chunks))
    })
  })
  server.on('connection', (socket: Socket) => {
    if (mode === 'reset') {
      stats.dropped += 1
      socket.destroy()
      return
    }
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  server.keepAliveTimeout = 5_000
  const listen = (on: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(on, '127.0.0.1', () => {
        server.off('error', reject)
        resolve()
      })
    })
  await listen(port)
  const bound = (server.address() as { port: number }).port
  const cut = () => {
    for (const socket of sockets) socket.destroy()
  }
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    stats,
    async down(how) {
      if (mode !== 'up') return
      mode = how
      if (how === 'refuse') server.close()
      cut()
      // A write the node already took is mined before anything else happens to it (a state dump).
      for (const deadline = Date.now() + 10_000; inFlight > 0 && Date.now() < deadline; ) await sleep(20)
    },
    async up() {
      if (mode === 'up') return
      const was = mode
      mode = 'up'
      if (was === 'refuse') await listen(bound)
    },
    slow(delayMs) {
      delay = delayMs
    },
    isUp: () => mode === 'up',
    async close() {
      mode = 'refuse'
      cut()
      agent.destroy()
      await new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()))
    },
  }
}
