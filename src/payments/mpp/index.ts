// MPP (`Payment` auth scheme, Tempo `charge`) for the 402 gateway; see mpp.ts.
export { createMpp, mppChainTruth, mppReconciler, MPP_INTENT, MPP_METHOD, TEMPO_USDC } from './mpp.ts'
export type { Mpp, MppKeyValue, MppOptions } from './mpp.ts'
export { TEMPO_CHAIN_ID, tempoClientFromUrl } from './tempo-rpc.ts'
export type { TempoClientFactory, TempoClientOptions } from './tempo-rpc.ts'
