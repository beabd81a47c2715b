// anvil's automine can leave a transaction in its pool for good: a sender's transactions that
// arrive out of nonce order (replicas sharing the settler key, a rebroadcast after a crash) are
// sometimes never promoted from "queued" once the gap is mined, and a ready transaction is
// sometimes never mined because the miner missed its wake-up. A block mined by hand does not
// promote the queued ones; re-importing them in nonce order does (their hashes are unchanged, so
// every waiter still finds its receipt). A real node has no such pool: this runs on the dev
// chain only. `diagnose` is pure; the doctor around it polls and acts.
import { formatTransaction, pad, serializeTransaction } from 'viem'
import type { Address, Hex, Transaction } from 'viem'
import type { ChainLogger } from './types.ts'

type Rpc = <T>(method: string, params: unknown[]) => Promise<T>

/** txpool_content: sender → nonce → transaction (JSON-RPC form). */
type PoolSection = Record<string, Record<string, Record<string, unknown>>>
export interface PoolContent {
  pending: PoolSection
  queued: PoolSection
}

export interface PoolObservation {
  /** Hashes of ready transactions. */
  ready: Set<string>
  /** Hashes of queued transactions whose nonce is already the sender's next (promotable). */
  promotable: Set<string>
}

export type PoolAction = { kind: 'none' } | { kind: 'mine'; hashes: string[] } | { kind: 'reimport'; hashes: string[] }

/** What the pool holds that automine should already have taken; `nonces` is each queued sender's mined count. */
export function observePool(content: PoolContent, nonces: ReadonlyMap<string, number>): PoolObservation {
  const ready = new Set<string>()
  for (const byNonce of Object.values(content.pending)) for (const tx of Object.values(byNonce)) ready.add(String(tx.hash))
  const promotable = new Set<string>()
  for (const [sender, byNonce] of Object.entries(content.queued)) {
    const readyCount = Object.keys(content.pending[sender] ?? {}).length
    const next = (nonces.get(sender.toLowerCase()) ?? Number.POSITIVE_INFINITY) + readyCount
    for (const [nonce, tx] of Object.entries(byNonce)) if (Number(nonce) <= next) promotable.add(String(tx.hash))
  }
  return { ready, promotable }
}

/**
 * A transaction is stuck when two observations, a poll apart, both show it where automine should
 * already have taken it: queued though promotable (re-import the pool), or ready (mine a block).
 */
export function diagnose(previous: PoolObservation | undefined, current: PoolObservation): PoolAction {
  if (!previous) return { kind: 'none' }
  const queued = [...current.promotable].filter((hash) => previous.promotable.has(hash))
  if (queued.length > 0) return { kind: 'reimport', hashes: queued }
  const ready = [...current.ready].filter((hash) => previous.ready.has(hash))
  if (ready.length > 0) return { kind: 'mine', hashes: ready }
  return { kind: 'none' }
}

export interface PoolDoctor {
  /** One poll: observe, diagnose against the previous poll, act. Exposed for tests. */
  check(): Promise<PoolAction>
  /** Pauses the checks (after the one running): nothing is mined by the doctor until the release. */
  hold(): Promise<() => void>
  stop(): Promise<void>
}

export function startPoolDoctor(deps: {
  rpc: Rpc
  /** Senders whose transactions anvil signs itself (impersonated): re-sent with eth_sendTransaction. */
  impersonated: readonly Address[]
  everyMs?: number
  logger?: ChainLogger | undefined
}): PoolDoctor {
  const { rpc, logger } = deps
  const impersonated = new Set(deps.impersonated.map((a) => a.toLowerCase()))
  let previous: PoolObservation | undefined
  let stopped = false
  let holds = 0
  /** One check at a time: a poll that finds one still running is skipped. */
  let running: Promise<PoolAction> | undefined
  const once = (): Promise<PoolAction> => {
    running ??= check().finally(() => {
      running = undefined
    })
    return running
  }

  async function observe(): Promise<{ content: PoolContent; observation: PoolObservation } | undefined> {
    const status = await rpc<{ pending: Hex; queued: Hex }>('txpool_status', [])
    if (BigInt(status.pending) === 0n && BigInt(status.queued) === 0n) return undefined
    const content = await rpc<PoolContent>('txpool_content', [])
    const nonces = new Map<string, number>()
    for (const sender of Object.keys(content.queued)) {
      nonces.set(sender.toLowerCase(), Number(BigInt(await rpc<Hex>('eth_getTransactionCount', [sender, 'latest']))))
    }
    return { content, observation: observePool(content, nonces) }
  }

  /** Everything the pool holds, dropped and sent again in nonce order per sender. */
  async function reimport(content: PoolContent): Promise<void> {
    const all = [...Object.values(content.pending), ...Object.values(content.queued)]
      .flatMap((byNonce) => Object.values(byNonce))
      .map((raw) => formatTransaction(raw as never) as Transaction)
      .sort((a, b) => (a.from === b.from ? a.nonce - b.nonce : a.from < b.from ? -1 : 1))
    await rpc('anvil_dropAllTransactions', [])
    for (const tx of all) {
      try {
        if (impersonated.has(tx.from.toLowerCase())) {
          await rpc('eth_sendTransaction', [
            { from: tx.from, to: tx.to, data: tx.input, value: `0x${tx.value.toString(16)}`, gas: `0x${tx.gas.toString(16)}`, nonce: `0x${tx.nonce.toString(16)}` },
          ])
        } else {
          const signature = { r: pad(tx.r, { size: 32 }), s: pad(tx.s, { size: 32 }), yParity: tx.yParity ?? Number(tx.v) % 2 }
          await rpc('eth_sendRawTransaction', [serializeTransaction(tx as never, signature)])
        }
      } catch (error) {
        logger?.warn({ err: error, txHash: tx.hash }, 'dev chain: a transaction could not be put back in the pool')
      }
    }
  }

  async function check(): Promise<PoolAction> {
    const seen = await observe()
    if (!seen) {
      previous = undefined
      return { kind: 'none' }
    }
    const action = diagnose(previous, seen.observation)
    previous = seen.observation
    if (action.kind === 'reimport') {
      logger?.warn({ txHashes: action.hashes }, 'dev chain: transactions queued behind a nonce already mined; putting the pool back in order')
      await reimport(seen.content)
      previous = undefined
    } else if (action.kind === 'mine') {
      logger?.warn({ txHashes: action.hashes }, 'dev chain: ready transactions left unmined; mining a block')
      await rpc('evm_mine', [])
      previous = undefined
    }
    return action
  }

  const everyMs = deps.everyMs ?? 500
  const timer = setInterval(() => {
    if (stopped || running || holds > 0) return
    once().catch((error: unknown) => logger?.debug({ err: error }, 'dev chain: pool check failed'))
  }, everyMs)
  timer.unref()

  return {
    check: once,
    async hold() {
      holds += 1
      await running?.catch(() => undefined)
      let released = false
      return () => {
        if (!released) holds -= 1
        released = true
      }
    },
    async stop() {
      stopped = true
      clearInterval(timer)
      await running?.catch(() => undefined)
    },
  }
}
