// Memory service ({memory_url}/api/v1). SPEC names recall, expand, account and withdraw paths;
// the remember and deposit paths and every payload are "not shown" there and designed here.
import { Type } from '@sinclair/typebox'
import { IdempotencyKey, MicrosHeader, MicrosString, Nullable, REFUND_OUTBOX_STATES, StringEnum, Timestamp } from './common.ts'

const Context = Type.String({
  minLength: 1,
  maxLength: 128,
  pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]*$',
  description: 'Namespace the memory belongs to, e.g. project:website or user/alice',
})
const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 20, uniqueItems: true, description: 'Up to 20 labels' })
const MemoryId = Type.String({ format: 'uuid' })

export const RememberRequest = Type.Object(
  {
    content: Type.String({ minLength: 1, maxLength: 32768, description: 'Text to remember, 1 to 32768 characters; encrypted at rest' }),
    context: Type.Optional(Context),
    tags: Type.Optional(Tags),
    metadata: Type.Optional(Type.Object({}, { additionalProperties: true, maxProperties: 32, description: 'Free-form JSON object (at most 32 keys), encrypted at rest' })),
  },
  { additionalProperties: false },
)

export const RememberHeaders = Type.Object({
  'idempotency-key': Type.Optional(IdempotencyKey),
})

export const Rail = StringEnum(['direct', 'marketplace', 'payg'] as const, {
  description: 'direct: debited from the deposit; marketplace: one memory-ops unit of a plan; payg: paid per call with x402 (or MPP where offered)',
})
const AccountRail = StringEnum(['direct', 'marketplace', 'payg'] as const)

export const RememberResult = Type.Object(
  {
    id: MemoryId,
    context: Nullable(Type.String()),
    tags: Type.Array(Type.String()),
    createdAt: Timestamp,
    tokens: Type.Integer({ minimum: 0, description: 'Embedding input tokens' }),
    rail: Rail,
    chargedMicros: MicrosString({ description: 'Amount charged for this write' }),
    balanceMicros: Type.Optional(MicrosString({ description: 'Direct rail: deposit left after the debit' })),
  },
  { additionalProperties: false },
)

export const DepositHeaders = Type.Object({
  'x-pay-amount-micros': MicrosHeader({ description: 'Amount to deposit in integer micros; the 402 challenge asks for exactly this' }),
})

export const DepositResult = Type.Object(
  {
    owner: Type.String({ description: 'Wallet address' }),
    depositedMicros: MicrosString(),
    balanceMicros: MicrosString(),
    txHash: Nullable(Type.String()),
  },
  { additionalProperties: false },
)

export const RecallRequest = Type.Object(
  {
    query: Type.String({ minLength: 1, maxLength: 2000 }),
    context: Type.Optional(Context),
    tags: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 20, uniqueItems: true, description: 'Only memories carrying all of these tags' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, default: 10 })),
  },
  { additionalProperties: false },
)

export const RecallResult = Type.Object(
  {
    results: Type.Array(
      Type.Object(
        {
          id: MemoryId,
          content: Type.String(),
          score: Type.Number({ description: 'Reciprocal-rank-fusion score of the keyword and vector rankings: comparable within one response, higher is better' }),
          createdAt: Timestamp,
          tags: Type.Array(Type.String()),
          context: Nullable(Type.String()),
          kind: StringEnum(['raw', 'derived'] as const),
        },
        { additionalProperties: false },
      ),
      { description: 'Best first' },
    ),
    embeddings: StringEnum(['upstream', 'local-model', 'lexical'] as const, { description: 'Which embedder ranked the vector half of the fusion' }),
  },
  { additionalProperties: false },
)

export const ExpandRequest = Type.Object({ ids: Type.Array(MemoryId, { minItems: 1, maxItems: 50, uniqueItems: true }) }, { additionalProperties: false })

export const MemoryRecord = Type.Object(
  {
    id: MemoryId,
    kind: StringEnum(['raw', 'derived'] as const, { description: 'derived records come from dreaming' }),
    content: Type.String(),
    context: Nullable(Type.String()),
    tags: Type.Array(Type.String()),
    metadata: Type.Object({}, { additionalProperties: true }),
    derivedFrom: Type.Array(MemoryId),
    createdAt: Timestamp,
  },
  { additionalProperties: false },
)

export const ExpandResult = Type.Object(
  {
    records: Type.Array(MemoryRecord, { description: 'Found records, in the order asked; unknown ids are left out' }),
    missing: Type.Array(MemoryId, { description: 'Asked ids that are not yours or do not exist' }),
  },
  { additionalProperties: false },
)

export const MemoryAccount = Type.Object(
  {
    owner: Type.String({ description: 'Wallet address, or agent:<agentId> for a plan holder' }),
    rail: Nullable(AccountRail, { description: 'How the first write was paid; null before it' }),
    depositMicros: MicrosString({ description: 'Total deposited (settled deposits)' }),
    spentMicros: MicrosString({ description: 'Total debited from the deposit for writes and dreaming' }),
    refundedMicros: MicrosString({ description: 'Total withdrawn on-chain' }),
    balanceMicros: MicrosString({ description: 'Withdrawable remainder: deposits − debits − dreaming − withdrawals' }),
    pendingDepositMicros: MicrosString({ description: 'Deposits whose settlement is not known yet (not spendable)' }),
    records: Type.Integer({ minimum: 0, description: 'Stored memories (raw and derived)' }),
    derivedRecords: Type.Integer({ minimum: 0, description: 'Of which written by dreaming' }),
    embeddings: Type.Object(
      {
        mode: StringEnum(['upstream', 'local-model', 'lexical'] as const, {
          description: 'lexical = the model-free default (stemmed BM25 over the blind index plus hashed character n-gram vectors)',
        }),
        model: Type.String(),
        dims: Type.Integer({ minimum: 1 }),
      },
      { additionalProperties: false },
    ),
    dreaming: Type.Object(
      { enabled: Type.Boolean(), detail: Type.String(), model: Type.Optional(Type.String()) },
      { additionalProperties: false, description: 'Background consolidation; off when no model is configured' },
    ),
    ledger: Type.Array(
      Type.Object(
        {
          kind: StringEnum(['deposit', 'debit', 'dream', 'refund', 'reversal'] as const),
          amountMicros: Type.String({ pattern: '^-?[0-9]+$', description: 'Signed integer micros: + deposit, − debit, dream, refund' }),
          memoryId: Nullable(Type.String()),
          txHash: Nullable(Type.String()),
          createdAt: Timestamp,
        },
        { additionalProperties: false },
      ),
      { description: 'The latest 50 ledger rows, newest first; the totals above are sums over every row' },
    ),
  },
  { additionalProperties: false },
)

export const WithdrawResult = Type.Object(
  {
    refundedMicros: MicrosString({
      description: 'What the withdrawal named by withdrawalId returns on-chain (0 when it was cancelled, or with none). With replay true this call refunded nothing new',
    }),
    txHash: Nullable(Type.String(), {
      description:
        "The refund's on-chain transaction once signed and sent (status sending; final once status is confirmed); null before it is signed, while a new one is to be signed, and with none",
    }),
    status: StringEnum(['none', ...REFUND_OUTBOX_STATES] as const, {
      description:
        "The refund's state now. none: no withdrawal to answer (nothing withdrawable; see settlingMicros); pending: owed, about to be sent; waiting: signed once every deposit it returns is confirmed on-chain (or the refund wallet can pay it); sending / failed: on its way or retried; confirmed: sent and final; cancelled: the deposits it returned never reached the chain",
    }),
    withdrawalId: Nullable(Type.String({ format: 'uuid' }), {
      description: 'The withdrawal this answer is about: created by this call, or (replay true) the last one, answered as it stands now; null when there is none',
    }),
    settlingMicros: MicrosString({
      description: 'Deposits whose payment is still settling: in no withdrawal yet (not in refundedMicros); withdrawable once settled. Withdraw again then',
    }),
    replay: Type.Boolean({
      description:
        'true when this call created no withdrawal: it answers the last one (idempotent repeat, or a concurrent call that lost the race), or there is none (status none)',
    }),
  },
  { additionalProperties: false },
)
