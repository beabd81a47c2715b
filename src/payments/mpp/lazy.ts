// mppx and viem/tempo, loaded by their first use rather than at start: about 1,400 modules, 0.4 s
// of a start and 60 MB of resident memory, which a gateway without a Tempo RPC needs only for $0
// proofs (docs/BENCHMARKS.md, "Startup and idle memory"). A require of their ES modules, so the
// synchronous paths (a challenge, a header's parse) stay synchronous; each is loaded once.
import { createRequire } from 'node:module'

const load = createRequire(import.meta.url)

function once<T>(specifier: string): () => T {
  let loaded: T | undefined
  return () => (loaded ??= load(specifier) as T)
}

export const mppxRoot = once<typeof import('mppx')>('mppx')
export const mppxServer = once<typeof import('mppx/server')>('mppx/server')
export const mppxClient = once<typeof import('mppx/client')>('mppx/client')
export const mppxTempo = once<typeof import('mppx/tempo')>('mppx/tempo')
export const viemTempo = once<typeof import('viem/tempo')>('viem/tempo')
export const viemTempoChains = once<typeof import('viem/tempo/chains')>('viem/tempo/chains')
