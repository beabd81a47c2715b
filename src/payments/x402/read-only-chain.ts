// The chain as facilitator mode without a wallet sees it: CHAIN_RPC_URL answers what the money
// decisions ask (receipts, the authorization's nonce, balances) and nothing is ever signed here.
// The facilitator broadcasts settlements; refunds need SETTLER_PRIVATE_KEY, so without it they wait.
import { zeroAddress } from 'viem'
import type { ChainPort } from '../chain/index.ts'

export const NO_WALLET = 'this gateway has no wallet: X402_FACILITATOR_URL settles through the facilitator, and refunds need SETTLER_PRIVATE_KEY (the refund wallet)'

/** `chain` with every write refused. Its service address is the zero address: a refund wallet that holds nothing. */
export function readOnlyChain(chain: ChainPort): ChainPort {
  const refuse = async (): Promise<never> => {
    throw new Error(NO_WALLET)
  }
  return {
    kind: chain.kind,
    chainId: chain.chainId,
    usdc: chain.usdc,
    serviceAddress: zeroAddress,
    confirmations: chain.confirmations,
    settleAuthorization: refuse,
    transfer: refuse,
    resend: refuse,
    settlementStatus: (txHash) => chain.settlementStatus(txHash),
    transactionKnown: (txHash) => chain.transactionKnown(txHash),
    inclusion: (txHash, expected) => chain.inclusion(txHash, expected),
    authorizationFate: (from, nonce, validBefore) => chain.authorizationFate(from, nonce, validBefore),
    isAuthorizationUsed: (from, nonce) => chain.isAuthorizationUsed(from, nonce),
    findAuthorizationTx: (from, nonce) => chain.findAuthorizationTx(from, nonce),
    balanceOf: (address) => chain.balanceOf(address),
    close: () => chain.close(),
  }
}
