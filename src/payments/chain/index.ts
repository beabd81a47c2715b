// The chain port: settlement and refunds go through ChainPort only.
export type { ChainLogger, ChainPort, DevChain, SettlementResult, TransferAuthorization } from './types.ts'
export { createRpcChain, errorReason } from './rpc.ts'
export type { RpcChain, RpcChainOptions, WalletLock } from './rpc.ts'
export { postgresWalletLock, walletLockKey } from './wallet-lock.ts'
export { ANVIL_ACCOUNT_0_KEY, startDevChain } from './dev.ts'
export type { DevChainOptions, StartedDevChain } from './dev.ts'
export { BASE_CHAIN_ID, BASE_USDC, testUsdcFaucetAbi, usdcAbi } from './usdc-abi.ts'
