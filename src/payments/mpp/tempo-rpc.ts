// The Tempo RPC port: how the MPP module (and mppx inside it) reaches a Tempo JSON-RPC node to
// simulate, broadcast and look up TIP-20 payments. Production points it at https://rpc.tempo.xyz
// (chain 4217); tests point it at the scripted responder in test/helpers/tempo-rpc.ts.
import { createClient, http, type Client } from 'viem'
import { viemTempoChains } from './lazy.ts'

/** Tempo mainnet chain id (viem/tempo/chains `tempo`). */
export const TEMPO_CHAIN_ID = 4217

/** The shape mppx's `getClient` option takes: one viem client per requested chain id. */
export type TempoClientFactory = (parameters: { chainId?: number | undefined }) => Client | Promise<Client>

export interface TempoClientOptions {
  /** Per-request HTTP timeout (ms). Keep it below the pull transaction's ~25 s validity. */
  timeoutMs?: number
}

const DEFAULT_TIMEOUT_MS = 10_000

/**
 * A `getClient` factory for one Tempo RPC URL. Retries are off (`retryCount: 0`): mppx and the
 * guard decide what a failure means, and a retried `eth_sendRawTransaction*` after a timeout
 * would only muddy whether the payment went out. Asking for another chain id fails loudly.
 */
export function tempoClientFromUrl(rpcUrl: string, options: TempoClientOptions = {}): TempoClientFactory {
  const { tempo } = viemTempoChains() // only where a Tempo RPC is configured
  const client = createClient({
    chain: tempo,
    transport: http(rpcUrl, { timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS, retryCount: 0 }),
  })
  return ({ chainId }) => {
    if (chainId !== undefined && chainId !== client.chain.id) {
      throw new Error(`Tempo RPC ${rpcUrl} serves chain ${client.chain.id}, not ${chainId}`)
    }
    return client as Client
  }
}
