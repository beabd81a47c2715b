// The encrypted agent memory service (its own server): its marketplace plan, meter and operations.
import type { OperationSpec, PlanSpec } from '../types.ts'
import {
  DepositHeaders,
  DepositResult,
  ExpandRequest,
  ExpandResult,
  MemoryAccount,
  RecallRequest,
  RecallResult,
  RememberHeaders,
  RememberRequest,
  RememberResult,
  WithdrawResult,
} from '../schemas/memory.ts'
import { defineService, PAYG_HOW, problem } from './common.ts'

type MemoryOp = Omit<OperationSpec, 'service' | 'server' | 'access' | 'tags'> & { tags?: string[] }

function memoryOp<const O extends MemoryOp>(operation: O): O & OperationSpec {
  return { service: 'memory', server: 'memory', access: 'payg', tags: ['memory'], ...operation }
}

const MEMORY_WALLET_HOW =
  'Free (0 USD). Owner proof: a CAIP-122 Sign-In-With-X message in the SIGN-IN-WITH-X header (an unproven call answers 401 with the challenge) or a $0 MPP proof of the owning wallet; ' +
  'memories written on the marketplace rail belong to the plan holder: send its Authorization: Bearer <accessToken> instead.'

// Marketplace rail of the memory service: each remember on a plan token consumes one memory-ops
// unit (0.001 USD of plan credit); recall, expand and account are free; dreaming is included.
const memoryPlans: PlanSpec[] = [
  {
    id: 'memory-credit-5',
    kind: 'credit',
    title: 'Memory credit, 5 USD',
    description:
      '5.00 USD of prepaid credit for the memory service on the marketplace rail: remember with Authorization: Bearer <accessToken> instead of paying; ' +
      'each write consumes one memory-ops unit (0.001000 USD, so 5,000 writes); recall, expand and account are free; dreaming is included. Credit does not expire.',
    priceMicros: 5_000_000n,
    creditMicros: 5_000_000n,
    covers: ['memory'],
  },
]

export const memory = defineService({
  slug: 'memory',
  title: 'Encrypted agent memory',
  description:
    'Long-term memory for agents: remember (paid) stores, embeds and encrypts content (AES-256-GCM, per-owner keys, stored permanently); recall, expand, account and withdraw are free. ' +
    'Marketplace rail: each remember consumes one usage unit (meter memory-ops, 0.001000 USD per op). Direct rail: deposit USDC once, each write debits the embedding rate (100000 micro-USDC per million input tokens), withdrawal refunds the rest on-chain. ' +
    'Dreaming (background consolidation) is priced per million tokens: larger model input 300000 / output 2500000 micro-USDC, smaller model input 100000 / output 400000.',
  server: 'memory',
  access: 'payg',
  meter: { name: 'memory-ops', unit: 'ops', unitPriceMicros: 1_000n, includedUnits: 0 },
  plans: memoryPlans,
  operations: [
    memoryOp({
      operationId: 'rememberMemory',
      method: 'POST',
      path: '/api/v1/memories',
      summary: 'Remember: store, embed and encrypt content in long-term memory',
      description:
        'Stores content (1 to 32768 characters) with optional context namespace, tags and metadata; embeds it and encrypts it at rest (AES-256-GCM, per-owner keys). Readable by recall right after the write. ' +
        'Optional Idempotency-Key: a retry with the same key is charged once. ' +
        'Three ways to pay, the first that applies: (1) marketplace rail: Authorization: Bearer <accessToken> of an agent holding a plan covering memory (memory-credit-5) consumes one memory-ops unit, no 402; ' +
        '(2) direct rail: a SIGN-IN-WITH-X proof of a wallet with a deposit (POST /api/v1/deposits) debits the embedding rate, ceil(tokens × 100000 / 1e6) micro-USDC, from it (402 insufficient_deposit when the balance is short); ' +
        '(3) otherwise 0.001000 USD per write (one memory-ops unit) paid with x402 (or MPP where offered). ' +
        PAYG_HOW,
      proof: 'payment',
      pricing: { kind: 'per-unit' },
      schemas: { headers: RememberHeaders, body: RememberRequest, response: { 201: RememberResult, 402: problem } },
      keywords: ['remember', 'store', 'save', 'write', 'memory', 'note', 'embed', 'knowledge'],
    }),
    memoryOp({
      operationId: 'depositMemoryFunds',
      method: 'POST',
      path: '/api/v1/deposits',
      summary: 'Deposit USDC for direct-rail memory writes',
      description:
        'Deposits the amount named in X-Pay-Amount-Micros (integer micros) to the calling wallet; later writes debit the embedding rate from it and DELETE /api/v1/deposits refunds the remainder on-chain. No body. ' +
        'Price: you choose the amount, paid with x402 (or MPP where offered). ' +
        PAYG_HOW,
      proof: 'payment',
      pricing: { kind: 'amount-header', header: 'x-pay-amount-micros' },
      schemas: { headers: DepositHeaders, response: { 200: DepositResult, 402: problem } },
      keywords: ['deposit', 'prepay', 'balance', 'fund'],
    }),
    memoryOp({
      operationId: 'recallMemories',
      method: 'POST',
      path: '/api/v1/contexts',
      summary: 'Recall: search long-term memory (free)',
      description:
        'Hybrid semantic and keyword search over your memories; returns up to limit (1 to 50, default 10) results, best first, optionally within a context namespace and tags. ' +
        MEMORY_WALLET_HOW,
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { body: RecallRequest, response: { 200: RecallResult, 401: problem } },
      keywords: ['recall', 'search', 'retrieve', 'query', 'memory', 'context'],
    }),
    memoryOp({
      operationId: 'expandMemories',
      method: 'POST',
      path: '/api/v1/contexts/expand',
      summary: 'Expand: fetch full memory records by id (free)',
      description: `Returns the full records (content, context, tags, metadata, provenance) of up to 50 ids from recall. ${MEMORY_WALLET_HOW}`,
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { body: ExpandRequest, response: { 200: ExpandResult, 401: problem } },
      keywords: ['expand', 'fetch', 'records', 'memory'],
    }),
    memoryOp({
      operationId: 'getMemoryAccount',
      method: 'GET',
      path: '/api/v1/account',
      summary: 'Memory account: deposit, spend, balance and record count (free)',
      description: `Returns the owner wallet, rail, total deposited, total spent, withdrawable balance and number of stored records. ${MEMORY_WALLET_HOW}`,
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { response: { 200: MemoryAccount, 401: problem } },
      keywords: ['account', 'balance', 'memory'],
    }),
    memoryOp({
      operationId: 'withdrawMemoryDeposit',
      method: 'DELETE',
      path: '/api/v1/deposits',
      summary: 'Withdraw the remaining memory deposit on-chain (free)',
      description: `Refunds the remaining direct deposit to the owning wallet on-chain and returns the amount and transaction hash. ${MEMORY_WALLET_HOW}`,
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { response: { 200: WithdrawResult, 401: problem } },
      keywords: ['withdraw', 'refund', 'deposit'],
    }),
  ],
})
