// The slice of Circle's FiatToken (USDC v2.x) ABI the chain port uses. Matches real USDC on
// Base and the dev TestUSDC (contracts/TestUSDC.sol) alike.
import type { Address } from 'viem'
import { BASE_CHAIN_ID, TRANSFER_WITH_AUTHORIZATION_FIELDS, USDC_BASE_ADDRESS } from '../networks.ts'

/** Canonical native USDC on Base mainnet (chain id 8453). */
export const BASE_USDC: Address = USDC_BASE_ADDRESS as Address
export { BASE_CHAIN_ID }

const authorizationInputs = TRANSFER_WITH_AUTHORIZATION_FIELDS

export const usdcAbi = [
  {
    type: 'function',
    name: 'transferWithAuthorization',
    stateMutability: 'nonpayable',
    inputs: [...authorizationInputs, { name: 'v', type: 'uint8' }, { name: 'r', type: 'bytes32' }, { name: 's', type: 'bytes32' }],
    outputs: [],
  },
  {
    type: 'function',
    name: 'transferWithAuthorization',
    stateMutability: 'nonpayable',
    inputs: [...authorizationInputs, { name: 'signature', type: 'bytes' }],
    outputs: [],
  },
  {
    type: 'function',
    name: 'authorizationState',
    stateMutability: 'view',
    inputs: [
      { name: 'authorizer', type: 'address' },
      { name: 'nonce', type: 'bytes32' },
    ],
    outputs: [{ name: '', type: 'bool' }],
  },
  {
    type: 'function',
    name: 'balanceOf',
    stateMutability: 'view',
    inputs: [{ name: 'account', type: 'address' }],
    outputs: [{ name: '', type: 'uint256' }],
  },
  {
    type: 'function',
    name: 'transfer',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'to', type: 'address' },
      { name: 'value', type: 'uint256' },
    ],
    outputs: [{ name: '', type: 'bool' }],
  },
  {
    type: 'event',
    name: 'Transfer',
    inputs: [
      { name: 'from', type: 'address', indexed: true },
      { name: 'to', type: 'address', indexed: true },
      { name: 'value', type: 'uint256', indexed: false },
    ],
    anonymous: false,
  },
  {
    type: 'event',
    name: 'AuthorizationUsed',
    inputs: [
      { name: 'authorizer', type: 'address', indexed: true },
      { name: 'nonce', type: 'bytes32', indexed: true },
    ],
    anonymous: false,
  },
] as const

/** Dev-only faucet of TestUSDC. Real USDC's `mint` is restricted to Circle's minters. */
export const testUsdcFaucetAbi = [
  {
    type: 'function',
    name: 'mint',
    stateMutability: 'nonpayable',
    inputs: [
      { name: 'to', type: 'address' },
      { name: 'amount', type: 'uint256' },
    ],
    outputs: [{ name: '', type: 'bool' }],
  },
] as const
