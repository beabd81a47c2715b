// The scheduler's task operations, with the wording they share with the rest of the scheduler
// (owner proof, per-run ceiling) and the helper that fills in what every scheduler operation has in common.
import type { OperationSpec } from '../types.ts'
import { CursorQuery } from '../schemas/common.ts'
import {
  OwnerUsage,
  Run,
  RunIdParams,
  RunList,
  Task,
  TaskClone,
  TaskCloneRequest,
  TaskCreateHeaders,
  TaskCreateRequest,
  TaskDeleted,
  TaskEnvRequest,
  TaskEnvResult,
  TaskFundHeaders,
  TaskFundRequest,
  TaskIdParams,
  TaskLedger,
  TaskPatchRequest,
  TriggerResult,
  WebhookDisabled,
  WebhookSecret,
} from '../schemas/scheduler.ts'
import { PAYG_HOW, problem } from './common.ts'

// The operations of the scheduler share its service, server, access and default tag.
type SchedulerOp = Omit<OperationSpec, 'service' | 'server' | 'access' | 'tags'> & { tags?: string[] }

export function schedulerOp<const O extends SchedulerOp>(operation: O): O & OperationSpec {
  return { service: 'scheduler', server: 'scheduler', access: 'payg', tags: ['scheduler'], ...operation }
}

export const WALLET_HOW =
  'Free (0 USD). Owner proof: a wallet proof of the paying wallet, either a CAIP-122 Sign-In-With-X message in the SIGN-IN-WITH-X header ' +
  '(an unproven call answers 401 with the challenge) or a $0 x402 / MPP proof. An account API key cannot replace it. ' +
  'Tasks created on the marketplace rail belong to the plan holder instead: prove it with the same Authorization: Bearer <accessToken> (no wallet proof).'

export const CEILING_TEXT =
  'estimated_ceiling_micros = max_runtime_sec x sandbox per-second rate + max_sibling_calls x sibling fee + dependencies x install budget per package (s) x install cost per second + the llm profile max_cost_usdc_micros_per_run (if llm is set) + overhead; see GET /api/v1/rates.'

const MARKETPLACE_HOW =
  'Marketplace rail: instead of paying, send Authorization: Bearer <accessToken> of an agent holding a plan that covers the scheduler (scheduler-credit-5; POST /auth/register, then POST /plans/scheduler-credit-5/purchase on the gateway). ' +
  'No 402 and no X-Pay-Amount-Micros; max_amount_usdc_micros is a non-refundable lifetime cap; each finished run reports its cost as usage (meter scheduler-usage) and is debited from the plan. ' +
  'The token then proves ownership of the task on the owner endpoints. Unknown token: 401 bearer_required; no covering plan with credit for one per-run ceiling: 403 plan_required listing the plans.'

// The task API (create, fund, manage, run, audit and delete tasks), in registry order.
export const taskOperations = [
  schedulerOp({
    operationId: 'createTask',
    method: 'POST',
    path: '/api/v1/tasks',
    summary: 'Create a scheduled or on-demand task that runs a python or node script',
    description:
      'Creates a task that runs source (python 3.12 or node 22) in a fresh sandbox with outbound internet, on a schedule ({cron, timezone} or {every: minute|hourly|daily|weekly, at: "HH:MM", dayOfWeek, timezone}) or on demand (no schedule). ' +
      'Returns the task (201; the same Idempotency-Key with the same body returns the same task, with another body 409 IDEMPOTENCY_CONFLICT), including estimated_ceiling_micros, the per-run ceiling reserved before each run. ' +
      `${CEILING_TEXT} Size max_amount_usdc_micros >= estimated_ceiling_micros x the number of runs wanted; if it is below one ceiling the task starts paused_insufficient_funds. ` +
      'Bounds: source at most 262144 characters, max_runtime_sec 1 to 3600, max_sibling_calls 0 to 100, tool_list at most 50 entries, at most 20 dependencies, env at most 50 keys with values up to 4096 characters. ' +
      'max_sibling_spend_micros is required when tool_list is unset and max_sibling_calls > 0. Everything except notify_email, end_at, tool_list (additions), max_sibling_spend_micros and max_runtime_sec (raises) is immutable afterwards. ' +
      'Helpers inside the script: generate_text (needs llm), call (siblings / paid capabilities), store_artifact (needs artifacts.enabled), request_continuation. ' +
      'Price: you choose the amount. Direct rail: pay max_amount_usdc_micros as refundable escrow, named in X-Pay-Amount-Micros (must equal it) and paid with an x402 charge (or MPP where offered) answering the 402. ' +
      'Headers: Idempotency-Key (required). ' +
      PAYG_HOW +
      ' ' +
      MARKETPLACE_HOW,
    proof: 'payment',
    pricing: { kind: 'amount-header', header: 'x-pay-amount-micros' },
    schemas: {
      headers: TaskCreateHeaders,
      body: TaskCreateRequest,
      response: { 200: Task, 201: Task, 401: problem, 402: problem, 403: problem, 409: problem },
    },
    keywords: [
      'cron',
      'schedule',
      'scheduled',
      'recurring',
      'python',
      'node',
      'javascript',
      'script',
      'job',
      'every',
      'hourly',
      'hour',
      'daily',
      'weekly',
      'minute',
      'sandbox',
      'automation',
      'run',
      'task',
    ],
  }),
  schedulerOp({
    operationId: 'fundTask',
    method: 'POST',
    path: '/api/v1/tasks/{id}/fund',
    summary: 'Top up a task; resumes a task paused for insufficient funds',
    description:
      'Adds top_up_amount_micros to the task escrow (direct rail) or cap (marketplace rail); a task in paused_insufficient_funds becomes active again when the top-up covers the shortfall. ' +
      'Direct rail: X-Pay-Amount-Micros must equal top_up_amount_micros; Idempotency-Key is required; the payment must come through the protocol and wallet that created the task (else 409 CHANNEL_MISMATCH). ' +
      'Price: the top-up amount, paid with x402 (or MPP where offered). ' +
      PAYG_HOW +
      ' Marketplace rail: send the plan token of the task owner (Authorization: Bearer <accessToken>) instead of a payment; the lifetime cap is raised by top_up_amount_micros and nothing is charged (409 CHANNEL_MISMATCH for a payment; 403 plan_required without a covering plan).',
    proof: 'payment',
    pricing: { kind: 'amount-header', header: 'x-pay-amount-micros' },
    schemas: {
      params: TaskIdParams,
      headers: TaskFundHeaders,
      body: TaskFundRequest,
      response: { 200: Task, 401: problem, 402: problem, 403: problem, 404: problem, 409: problem },
    },
    keywords: ['fund', 'top up', 'escrow', 'deposit', 'resume', 'insufficient funds'],
  }),
  schedulerOp({
    operationId: 'cloneTask',
    method: 'POST',
    path: '/api/v1/tasks/clone',
    summary: 'Get a fresh task spec copied from an existing task',
    description: `Returns a body for POST /api/v1/tasks copied from task_id, with env values masked; use it to change immutable fields (clone, edit, create). ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { body: TaskCloneRequest, response: { 200: TaskClone, 401: problem, 404: problem } },
    keywords: ['clone', 'copy', 'duplicate', 'template'],
  }),
  schedulerOp({
    operationId: 'updateTask',
    method: 'PATCH',
    path: '/api/v1/tasks/{id}',
    summary: 'Update the mutable fields of a task',
    description:
      'Updates notify_email, end_at, tool_list (additions only; removing an entry answers 409 IMMUTABLE_TOOL_REMOVAL), max_sibling_spend_micros (raises only) and max_runtime_sec (raises only; 409 RUN_IN_FLIGHT while a run is claimed or running). ' +
      'Any other field answers IMMUTABLE_FIELD naming it; clone and recreate instead. Returns the task. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, body: TaskPatchRequest, response: { 200: Task, 401: problem, 404: problem, 409: problem } },
    keywords: ['update', 'patch', 'edit', 'modify', 'notify', 'email'],
  }),
  schedulerOp({
    operationId: 'replaceTaskEnv',
    method: 'PUT',
    path: '/api/v1/tasks/{id}/env',
    summary: 'Replace the sandbox environment variables of a task',
    description:
      'Replaces all env variables of the task with {env} (at most 50 keys, values up to 4096 characters). Values are encrypted at rest and never returned; the answer lists the key names only. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, body: TaskEnvRequest, response: { 200: TaskEnvResult, 401: problem, 404: problem } },
    keywords: ['env', 'environment', 'variables', 'secrets', 'api key'],
  }),
  schedulerOp({
    operationId: 'pauseTask',
    method: 'POST',
    path: '/api/v1/tasks/{id}/pause',
    summary: 'Pause a task manually',
    description: `Moves an active task to paused; future runs are skipped until resumed. Returns the task. ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: Task, 401: problem, 404: problem, 409: problem } },
    keywords: ['pause', 'stop', 'suspend'],
  }),
  schedulerOp({
    operationId: 'resumeTask',
    method: 'POST',
    path: '/api/v1/tasks/{id}/resume',
    summary: 'Resume a manually paused task',
    description:
      'Moves a paused task back to active when its balance covers the per-run ceiling; otherwise 409 (fund it first with POST /api/v1/tasks/{id}/fund). Returns the task. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: Task, 401: problem, 404: problem, 409: problem } },
    keywords: ['resume', 'unpause', 'restart'],
  }),
  schedulerOp({
    operationId: 'enableTaskWebhook',
    method: 'PUT',
    path: '/api/v1/tasks/{id}/webhook',
    summary: 'Enable or rotate the inbound webhook of a task',
    description:
      'Enables the webhook (or rotates its secret) and returns {secret} (prefix whsec_) once, never again; the previous secret stops working. ' +
      'Keep the secret server-side; POST /api/v1/tasks/{id}/webhook with Authorization: Bearer <secret> then runs the task synchronously. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: WebhookSecret, 401: problem, 404: problem } },
    keywords: ['webhook', 'secret', 'rotate', 'inbound', 'trigger'],
  }),
  schedulerOp({
    operationId: 'disableTaskWebhook',
    method: 'DELETE',
    path: '/api/v1/tasks/{id}/webhook',
    summary: 'Disable the inbound webhook of a task',
    description: `Disables the webhook; its secret is invalid immediately. ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: WebhookDisabled, 401: problem, 404: problem } },
    keywords: ['webhook', 'disable'],
  }),
  schedulerOp({
    operationId: 'runTaskWebhook',
    method: 'POST',
    path: '/api/v1/tasks/{id}/webhook',
    summary: 'Run a task synchronously from its webhook',
    description:
      'Runs the task now and returns the finished run inline (stdout/stderr truncated, logs_url). Billed from the task deposit, not from the caller. ' +
      'One webhook run in flight at a time: a concurrent call answers 429. Any JSON body is accepted and ignored by the scheduler. ' +
      'Authenticate with Authorization: Bearer <WEBHOOK_SECRET> (whsec_…, from PUT /api/v1/tasks/{id}/webhook); no payment proof.',
    proof: 'webhook-secret',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: Run, 401: problem, 404: problem, 409: problem, 429: problem } },
    keywords: ['webhook', 'inbound', 'trigger', 'synchronous', 'run'],
  }),
  schedulerOp({
    operationId: 'getTask',
    method: 'GET',
    path: '/api/v1/tasks/{id}',
    summary: 'Fetch a task: status, balances, next run, lifetime cost',
    description:
      'Returns the task with status, caps, next_run_at, cumulative_cost_micros, balance_micros and estimated_ceiling_micros; a paused task carries recovery_hint. env is never returned. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: Task, 401: problem, 404: problem } },
    keywords: ['task', 'status', 'balance', 'get'],
  }),
  schedulerOp({
    operationId: 'runTaskNow',
    method: 'POST',
    path: '/api/v1/tasks/{id}/runs',
    summary: 'Run a task now, synchronously, and return the result',
    description:
      'Runs the task immediately and waits until the run is finalized; returns the run (stdout/stderr truncated, logs_url). Does not advance next_run_at. Billed from the task balance. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: Run, 401: problem, 404: problem, 409: problem } },
    keywords: ['run now', 'execute', 'synchronous', 'manual run'],
  }),
  schedulerOp({
    operationId: 'triggerTask',
    method: 'POST',
    path: '/api/v1/tasks/{id}/trigger',
    summary: 'Queue an asynchronous run of a task',
    description: `Pulls next_run_at to now; dispatch runs it within about 1 minute. Returns immediately (202). On a task that is not active it is a no-op (queued false). ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 202: TriggerResult, 401: problem, 404: problem } },
    keywords: ['trigger', 'queue', 'asynchronous', 'run soon'],
  }),
  schedulerOp({
    operationId: 'listTaskRuns',
    method: 'GET',
    path: '/api/v1/tasks/{id}/runs',
    summary: 'List recent runs of a task (cursor-paginated)',
    description: `Slim run rows, newest first. Pagination: ?limit= (1 to 100, default 20) and ?cursor= (the next_cursor of the previous page; null on the last page). ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, querystring: CursorQuery, response: { 200: RunList, 401: problem, 404: problem } },
    keywords: ['runs', 'history', 'list', 'executions'],
  }),
  schedulerOp({
    operationId: 'getRun',
    method: 'GET',
    path: '/api/v1/runs/{id}',
    summary: 'Fetch one run with its output and logs URL',
    description: `Returns one run with truncated stdout and stderr and a logs_url for the full logs. ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: RunIdParams, response: { 200: Run, 401: problem, 404: problem } },
    keywords: ['run', 'output', 'stdout', 'stderr', 'logs'],
  }),
  schedulerOp({
    operationId: 'getOwnerUsage',
    method: 'GET',
    path: '/api/v1/owner/usage',
    summary: 'Spend rollup across all tasks of the calling wallet',
    description: `Per-task and total runs, cumulative cost, balances and refunds for the wallet that proves ownership. ${WALLET_HOW}`,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { response: { 200: OwnerUsage, 401: problem } },
    keywords: ['usage', 'spend', 'cost', 'rollup', 'owner'],
  }),
  schedulerOp({
    operationId: 'getTaskLedger',
    method: 'GET',
    path: '/api/v1/tasks/{id}/ledger',
    summary: 'Money-movement ledger of one task',
    description:
      'Append-only trail of one task; the response names its rail. Direct rail: rows are charges, refunds, run costs and dust forfeits with on-chain transaction hashes; their SUM equals max_amount minus cumulative cost and is 0 on a terminal task. ' +
      'Marketplace rail: operational audit rows only (marketplace usage is authoritative). ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: TaskLedger, 401: problem, 404: problem } },
    keywords: ['ledger', 'escrow', 'refund', 'transactions', 'audit'],
  }),
  schedulerOp({
    operationId: 'deleteTask',
    method: 'DELETE',
    path: '/api/v1/tasks/{id}',
    summary: 'Delete a task and refund the unused escrow',
    description:
      'Closes the task (status deleted) and cancels future runs. Direct rail: max_amount minus cumulative cost is refunded on-chain; marketplace rail: nothing is refunded. Idempotent. ' +
      WALLET_HOW,
    proof: 'wallet',
    pricing: { kind: 'free' },
    schemas: { params: TaskIdParams, response: { 200: TaskDeleted, 401: problem, 404: problem } },
    keywords: ['delete', 'close', 'cancel', 'refund'],
  }),
] satisfies OperationSpec[]
