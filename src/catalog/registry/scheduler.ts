// The task scheduler service (its own server): meter and plan of its marketplace rail, its discovery
// and account operations; the task operations live in scheduler-tasks.ts.
import type { Meter, PlanSpec } from '../types.ts'
import { CursorQuery } from '../schemas/common.ts'
import { Account, AccountKeyCreated, AccountKeyRevoked, AccountKeys, AccountLedger, KeyIdParams, Rates, SchedulerIndex, Siblings } from '../schemas/scheduler.ts'
import { defineService, problem } from './common.ts'
import { CEILING_TEXT, schedulerOp, taskOperations, WALLET_HOW } from './scheduler-tasks.ts'

const ACCOUNT_KEY_HOW =
  'Free (0 USD). Authenticate with the scheduler account API key as Authorization: Bearer <ACCOUNT_API_KEY>; a wallet proof cannot replace it (API_KEY_INVALID / API_KEY_NOT_FOUND otherwise).'

// Marketplace rail of the scheduler (src/scheduler/marketplace.ts): a task created with a plan
// access token instead of a payment; each finished run reports its cost on this meter (1 unit =
// 1 micro-USD of the rate card) and is debited from the holder's plan.
const schedulerMeter: Meter = { name: 'scheduler-usage', unit: 'usd-micro', unitPriceMicros: 1n, includedUnits: 0 }

const schedulerPlans: PlanSpec[] = [
  {
    id: 'scheduler-credit-5',
    kind: 'credit',
    title: 'Scheduler credit, 5 USD',
    description:
      '5.00 USD of prepaid credit for scheduler tasks on the marketplace rail: create tasks with Authorization: Bearer <accessToken> instead of an escrow payment; ' +
      'each finished run is debited its actual cost at the rate card (GET {scheduler_url}/api/v1/rates). Credit does not expire.',
    priceMicros: 5_000_000n,
    creditMicros: 5_000_000n,
    covers: ['scheduler'],
  },
]

export const scheduler = defineService({
  slug: 'scheduler',
  title: 'Task scheduler',
  description:
    'Runs recurring (cron or every minute/hour/day/week) or on-demand python 3.12 / node 22 scripts in fresh sandboxes with outbound internet access. ' +
    'Direct rail: escrow USDC (refundable; unused escrow is refunded on deletion). Marketplace rail: marketplace access plus usage reporting, max_amount_usdc_micros is a non-refundable lifetime cap; ' +
    'access with a plan token (plan scheduler-credit-5), each run reports its cost on the meter scheduler-usage.',
  server: 'scheduler',
  access: 'payg',
  meter: schedulerMeter,
  plans: schedulerPlans,
  operations: [
    schedulerOp({
      operationId: 'getSchedulerIndex',
      method: 'GET',
      path: '/api/v1',
      summary: 'Scheduler catalog: links and operations',
      description: 'Free, no proof. Lists the scheduler operations with their proofs and links to openapi.json, llms.txt, rates and siblings.',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { response: { 200: SchedulerIndex } },
      keywords: ['catalog', 'index', 'discovery'],
    }),
    schedulerOp({
      operationId: 'getSchedulerRates',
      method: 'GET',
      path: '/api/v1/rates',
      summary: 'Scheduler rates, hard caps and LLM profiles',
      description:
        'Free, no proof. Per-second sandbox rate, per-call sibling fee, dependency install budget and cost, overhead, hard caps and llm_profiles (default reserve per run: quick 0.05 USD, standard 0.15 USD, bulk 0.15 USD). ' +
        CEILING_TEXT,
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { response: { 200: Rates } },
      keywords: ['rates', 'pricing', 'cost', 'caps', 'llm profiles', 'ceiling'],
    }),
    schedulerOp({
      operationId: 'listSiblings',
      method: 'GET',
      path: '/api/v1/_siblings',
      summary: 'First-party siblings usable in tool_list',
      description:
        'Free, no proof. Lists the first-party siblings task code can reach with call(name, path, body?, method?) for a flat per-call fee: urlshortener, cdn, forms, screenshot, inbox.',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { response: { 200: Siblings } },
      keywords: ['siblings', 'tool_list', 'tools', 'urlshortener', 'cdn', 'forms', 'screenshot', 'inbox'],
    }),
    // The task API (scheduler-tasks.ts) sits between discovery and the account operations.
    ...taskOperations,
    schedulerOp({
      operationId: 'getAccount',
      method: 'GET',
      path: '/api/v1/account',
      summary: 'Scheduler account: plan, status, period, credit, counters and keys',
      description: `Returns the account plan, status, current period, credit balance, tasks_active and runs_lifetime counters and the full key list. ${ACCOUNT_KEY_HOW}`,
      proof: 'api-key',
      pricing: { kind: 'free' },
      schemas: { response: { 200: Account, 401: problem } },
      keywords: ['account', 'credit', 'plan', 'keys'],
    }),
    schedulerOp({
      operationId: 'listAccountKeys',
      method: 'GET',
      path: '/api/v1/account/keys',
      summary: 'List the API keys of the scheduler account',
      description: `Keys with id, prefix, created_at, revoked_at and last_used_at (never the key itself). ${ACCOUNT_KEY_HOW}`,
      proof: 'api-key',
      pricing: { kind: 'free' },
      schemas: { response: { 200: AccountKeys, 401: problem } },
      keywords: ['api keys', 'keys', 'credentials'],
    }),
    schedulerOp({
      operationId: 'getAccountLedger',
      method: 'GET',
      path: '/api/v1/account/ledger',
      summary: 'Audit trail of account credit and spend (cursor-paginated)',
      description:
        'All credit and spend movements of the account (kinds grant, reversal, cost_finalize), newest first. Pagination: ?limit= (1 to 100, default 20) and ?cursor= (next_cursor of the previous page). ' +
        ACCOUNT_KEY_HOW,
      proof: 'api-key',
      pricing: { kind: 'free' },
      schemas: { querystring: CursorQuery, response: { 200: AccountLedger, 401: problem } },
      keywords: ['ledger', 'credit', 'audit', 'grant', 'reversal'],
    }),
    schedulerOp({
      operationId: 'createAccountKey',
      method: 'POST',
      path: '/api/v1/account/keys',
      summary: 'Create an API key for the scheduler account of the calling wallet',
      description:
        'Opens the scheduler account of the wallet (once) and returns a new API key, shown once, for the key-authenticated account endpoints (GET /api/v1/account, keys, ledger). ' +
        WALLET_HOW,
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { response: { 201: AccountKeyCreated, 401: problem } },
      keywords: ['api key', 'create key', 'account', 'credentials'],
    }),
    schedulerOp({
      operationId: 'revokeAccountKey',
      method: 'DELETE',
      path: '/api/v1/account/keys/{id}',
      summary: 'Revoke an API key of the scheduler account',
      description: `Revokes the key; answers 200 whether or not it was already revoked, 404 for a key of another account. ${ACCOUNT_KEY_HOW}`,
      proof: 'api-key',
      pricing: { kind: 'free' },
      schemas: { params: KeyIdParams, response: { 200: AccountKeyRevoked, 401: problem, 404: problem } },
      keywords: ['revoke', 'api key', 'delete key'],
    }),
  ],
})
