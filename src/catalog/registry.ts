// The declarative service registry: every operation of SPEC.md with its route, TypeBox schemas,
// access mode, proof, pricing and meter. Routes, /openapi.json, /manifest.json, /services,
// llms.txt, the advisor and the payment guard's prices are all derived from this one table.
import type { Meter, OperationSpec, PlanSpec, Registry, ServiceSpec } from './types.ts'
import { CursorQuery, ProblemSchema } from './schemas/common.ts'
import { CapabilityParams, ReviewDocument, ReviewIdParams, ReviewRequest, ReviewSession, ReviewStatus, ReviewSubmission } from './schemas/reviews.ts'
import { SongRequest, SongResult } from './schemas/songs.ts'
import { SPEECH_MAX_CHARACTERS, SPEECH_VOICES, SpeechRequest, SpeechResult } from './schemas/speech.ts'
import { ClaimStarted, ClaimStartRequest, ClaimVerified, ClaimVerifyRequest, Guide, GuideQuery, GuideRequest, PlanIdParams, PlanPurchase, Registration } from './schemas/gateway.ts'
import {
  Account,
  AccountKeyCreated,
  AccountKeyRevoked,
  AccountKeys,
  AccountLedger,
  KeyIdParams,
  OwnerUsage,
  Rates,
  Run,
  RunIdParams,
  RunList,
  SchedulerIndex,
  Siblings,
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
} from './schemas/scheduler.ts'
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
} from './schemas/memory.ts'

// ------------------------------------------------------------------ shared wording

const PAYG_HOW =
  'How to pay: call without payment to get 402 Payment Required with a signed challenge (x402 v2 PAYMENT-REQUIRED header, x402 v1 JSON body, MPP WWW-Authenticate: Payment). ' +
  'Settle it with x402 (USDC on eip155:8453, scheme exact; retry with the PAYMENT-SIGNATURE header, or X-PAYMENT for x402 v1) or with MPP (method tempo, intent charge, currency USD; retry with Authorization: Payment), ' +
  'sending exactly one proof. No account and no upstream API key are needed; you are charged only when the work succeeds. ' +
  'Optional: add Svc-Agent-Authorization: Bearer <accessToken> (from POST /auth/register) to be recognised across calls.'

const WALLET_HOW =
  'Free (0 USD). Owner proof: a wallet proof of the paying wallet, either a CAIP-122 Sign-In-With-X message in the SIGN-IN-WITH-X header ' +
  '(an unproven call answers 401 with the challenge) or a $0 x402 / MPP proof. An account API key cannot replace it. ' +
  'Tasks created on the marketplace rail belong to the plan holder instead: prove it with the same Authorization: Bearer <accessToken> (no wallet proof).'

const ACCOUNT_KEY_HOW =
  'Free (0 USD). Authenticate with the scheduler account API key as Authorization: Bearer <ACCOUNT_API_KEY>; a wallet proof cannot replace it (API_KEY_INVALID / API_KEY_NOT_FOUND otherwise).'

const REVIEW_PLANS_TEXT =
  'Plans covering it: reviews-credit-5 (5.00 USD of prepaid credit, debited 0.020000 USD per review, 250 reviews) and reviews-monthly (15.00 USD per 30 days, up to 1000 reviews a period).'

const PLAN_HOW =
  'Access: plan; this operation never answers 402. How to get access: (1) POST /auth/register once (free, no body) for {agentId, accessToken}; ' +
  '(2) buy a covering plan with POST /plans/{planId}/purchase, which answers a priced 402 settled by x402 or MPP (send your token in Svc-Agent-Authorization: Bearer); ' +
  '(3) call with Authorization: Bearer <accessToken>. Without a token: 401 bearer_required with a registration recipe. Without a covering plan: 403 plan_required listing the plans that cover the call.'

const problem = ProblemSchema

// ------------------------------------------------------------------ gateway services

const reviewsMeter: Meter = { name: 'requests', unit: 'request', unitPriceMicros: 20_000n, includedUnits: 0 }

const reviewPlans: PlanSpec[] = [
  {
    id: 'reviews-credit-5',
    kind: 'credit',
    title: 'Review credit, 5 USD',
    description: '5.00 USD of prepaid credit for annotation reviews, debited 0.020000 USD per created review session (250 sessions). Credit does not expire.',
    priceMicros: 5_000_000n,
    creditMicros: 5_000_000n,
    covers: ['reviews-create'],
  },
  {
    id: 'reviews-monthly',
    kind: 'subscription',
    title: 'Reviews monthly',
    description: '15.00 USD per 30-day period for up to 1000 annotation review sessions in the period.',
    priceMicros: 15_000_000n,
    periodDays: 30,
    callsPerPeriod: 1000,
    covers: ['reviews-create'],
  },
]

const reviews: ServiceSpec = {
  slug: 'reviews-create',
  title: 'Annotation review sessions',
  description:
    'Creates a review session in which a human annotates a live web page or a hosted static code bundle; the full review JSON is POSTed to your callbackUrl when the human submits. ' +
    `Sold on plans (0.020000 USD per request from plan credit). ${REVIEW_PLANS_TEXT}`,
  server: 'gateway',
  access: 'plan',
  meter: reviewsMeter,
  plans: reviewPlans,
  operations: [
    {
      operationId: 'createReviewSession',
      service: 'reviews-create',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/annotate/reviews',
      summary: 'Create an annotation review session for a web page or a static site bundle',
      description:
        'Creates a review session and returns {reviewId, shareUrl, bundleUrl?}. Send the shareUrl to the human reviewer. ' +
        'Send exactly one of url (a live page) or zipData (base64 zip of static HTML/CSS/JS, at most 10 MiB decoded; hosted for the reviewer, bundleUrl then downloads the original zip). ' +
        'entryFile names the entry page inside the zip (default index.html). If callbackUrl is set, the full review JSON is POSTed to it when the human submits. ' +
        `Price: 0.020000 USD per request, debited from a plan (meter requests, no free units). ${REVIEW_PLANS_TEXT} ${PLAN_HOW}`,
      tags: ['reviews'],
      access: 'plan',
      proof: 'plan-bearer',
      pricing: { kind: 'plan-credit' },
      schemas: {
        body: ReviewRequest,
        response: { 200: ReviewSession, 201: ReviewSession, 400: problem, 401: problem, 402: problem, 403: problem, 409: problem, 413: problem, 422: problem },
      },
      keywords: ['review', 'annotate', 'annotation', 'feedback', 'human', 'website', 'web page', 'html', 'zip', 'bundle', 'comments', 'qa', 'design review'],
    },
    {
      operationId: 'getReviewSession',
      service: 'reviews-create',
      server: 'gateway',
      method: 'GET',
      path: '/api/v1/annotate/reviews/{reviewId}',
      summary: 'Read a review session: its status, callback delivery and the submitted review',
      description:
        'Free with the access token that created the session (Authorization: Bearer <accessToken>); another agent gets 404. ' +
        'Returns {reviewId, status (open | submitted), createdAt, source, shareUrl, bundleUrl?, callback (url, secret, state waiting | pending | delivered | failed, webhookId, attempts[]) or null, review (the submitted review JSON) or null}. ' +
        'Poll it when you cannot receive callbacks: the review appears here the moment the human submits.',
      tags: ['reviews'],
      access: 'payg',
      proof: 'agent-bearer',
      pricing: { kind: 'free' },
      schemas: { params: ReviewIdParams, response: { 200: ReviewStatus, 401: problem, 404: problem } },
      keywords: ['review status', 'poll', 'submitted review', 'annotations', 'callback delivery'],
    },
    {
      operationId: 'submitReview',
      service: 'reviews-create',
      server: 'gateway',
      method: 'POST',
      path: '/reviews/{capability}/submission',
      summary: "The reviewer page's submission of the human's review (once per session)",
      description:
        'Called by the reviewer page at shareUrl; the capability in the path is the only credential. Accepts {comment, pins[], console[]} once: ' +
        'the review is stored, returned, POSTed to the callbackUrl (Standard Webhooks signature) and shown by GET /api/v1/annotate/reviews/{reviewId}. ' +
        'A second submission answers 409 review_submitted.',
      tags: ['reviews'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { params: CapabilityParams, body: ReviewSubmission, response: { 200: ReviewDocument, 404: problem, 409: problem } },
      keywords: ['submit review', 'reviewer'],
    },
  ],
}

const songs: ServiceSpec = {
  slug: 'songmodel-3-pro',
  title: 'Song generation (songmodel-3-pro)',
  description:
    'Generates one to three complete songs from a prompt, optionally maps vocal functions onto instruments and masters the audio, ranks candidates with local DSP and returns hosted MP3 URLs. ' +
    '0.080000 USD per song; the first song per claimed account is free.',
  server: 'gateway',
  access: 'payg',
  meter: { name: 'songs', unit: 'song', unitPriceMicros: 80_000n, includedUnits: 1 },
  plans: [],
  operations: [
    {
      operationId: 'generateSongs',
      service: 'songmodel-3-pro',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/audio/songs/songmodel-3-pro',
      summary: 'Generate songs (music with or without vocals) from a text prompt',
      description:
        'Generates candidateCount (1 to 3) complete songs from prompt, ranks them with local DSP (tempo, structure, loudness, selectionTarget hints) and returns the hosted MP3 of the candidate judged objectively closest, ' +
        'with per-candidate scores and analysis. Options: durationSec 30 to 300, instrumental, negativePrompt, up to 20 ordered sections, mastering (targetLufs / truePeakDb / fadeOutSec; omit to return the audio unchanged), ' +
        'instrumentalLeadMapping (1 to 8 items) and up to 10 referenceImageUrls. ' +
        'Price: 0.080000 USD per song (80000 micros); each candidate is billed at the per-song price, so the charge is candidateCount x 0.080000 USD. ' +
        'The first song per account is free (1 included unit; applies to agents claimed by a human with a verified e-mail). ' +
        PAYG_HOW,
      tags: ['audio'],
      access: 'payg',
      proof: 'payment',
      pricing: { kind: 'per-unit', unitsFromBody: 'candidateCount', defaultUnits: 1, maxUnits: 3 },
      schemas: { body: SongRequest, response: { 200: SongResult, 402: problem } },
      keywords: [
        'music',
        'song',
        'track',
        'audio',
        'mp3',
        'compose',
        'soundtrack',
        'jingle',
        'beat',
        'instrumental',
        'vocals',
        'lyrics',
        'mastering',
        'podcast',
        'intro',
        'background music',
      ],
    },
  ],
}

const speech: ServiceSpec = {
  slug: 'speechmodel-3.1-flash-tts',
  title: 'Speech generation (speechmodel-3.1-flash-tts)',
  description: 'Converts text to speech and returns a hosted WAV (24 kHz mono 16-bit). 0.015000 USD per started 1,000 characters of input.',
  server: 'gateway',
  access: 'payg',
  // The going rate of hosted TTS APIs (about 15 USD per million characters for standard voices).
  meter: { name: 'speech-characters', unit: '1000 characters', unitPriceMicros: 15_000n, includedUnits: 0 },
  plans: [],
  operations: [
    {
      operationId: 'synthesizeSpeech',
      service: 'speechmodel-3.1-flash-tts',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/audio/speech/speechmodel-3.1-flash-tts',
      summary: 'Text to speech: synthesize spoken audio (WAV) from text',
      description:
        `Converts input text (1 to ${SPEECH_MAX_CHARACTERS} characters) to speech and returns the hosted audio URL (WAV, 24 kHz mono 16-bit) with size, duration, voice, model and the USDC amount charged. ` +
        `Optional voice (${SPEECH_VOICES.join(', ')}; default alloy) and speed (0.5 to 2). ` +
        'Price: 0.015000 USD per started 1,000 characters of input (15000 micros; 1 to 1,000 characters cost 0.015000, 1,001 to 2,000 cost 0.030000); no free units. ' +
        PAYG_HOW,
      tags: ['audio'],
      access: 'payg',
      proof: 'payment',
      pricing: { kind: 'per-unit', unitsFromText: { field: 'input', perCharacters: 1000 }, maxUnits: Math.ceil(SPEECH_MAX_CHARACTERS / 1000) },
      schemas: { body: SpeechRequest, response: { 200: SpeechResult, 402: problem } },
      keywords: ['tts', 'text to speech', 'voice', 'speak', 'narration', 'read aloud', 'voiceover', 'wav', 'audio'],
    },
  ],
}

const advisor: ServiceSpec = {
  slug: 'advisor',
  title: 'Seller advisor',
  description:
    'Free seller advisor: ranks the built operations of the catalog against the goal you describe, says what each match costs and how to pay, and never buys anything. ' +
    'Operations that match but are not built yet are listed apart (unavailable), never recommended.',
  server: 'gateway',
  access: 'payg',
  plans: [],
  operations: [
    {
      operationId: 'postAgentQuote',
      service: 'advisor',
      server: 'gateway',
      method: 'POST',
      path: '/advisor/agent/quote',
      summary: 'Quote: recommended operations, prices and payment steps toward the goal',
      description:
        'Takes the goal plus known budget (budgetMicros, integer micros) or requirements and returns the guide: ranked operations with price, free units, how to pay and next steps. ' +
        'Costs 0 and never executes the purchase. Proof: the $0 wallet proof; call once without it to receive the 402 challenge, sign the $0 amount and retry with Payment-Signature (x402) or Authorization: Payment (MPP). ' +
        'Without the wallet use GET or POST /advisor/agent/guide.',
      tags: ['advisor'],
      access: 'payg',
      proof: 'wallet',
      pricing: { kind: 'free' },
      schemas: { body: GuideRequest, response: { 200: Guide, 402: problem } },
      keywords: ['advisor', 'quote', 'recommend', 'budget', 'which service', 'price'],
    },
    {
      operationId: 'getAgentGuide',
      service: 'advisor',
      server: 'gateway',
      method: 'GET',
      path: '/advisor/agent/guide',
      summary: 'Free guide: ranked operations, prices and payment steps per goal',
      description:
        'Free, no credential. Query parameters: goal (URL-encoded, 1-2000 characters), optional budgetMicros (integer micros). ' +
        'Answers with ranked operations, each with price, free units and payment steps, plus next steps; never buys anything.',
      tags: ['advisor'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { querystring: GuideQuery, response: { 200: Guide } },
      keywords: ['advisor', 'guide', 'recommend', 'which service', 'price', 'discovery'],
    },
    {
      operationId: 'postAgentGuide',
      service: 'advisor',
      server: 'gateway',
      method: 'POST',
      path: '/advisor/agent/guide',
      summary: 'Free guide (JSON body): ranked operations, prices and payment steps per goal',
      description:
        'JSON-body version of /advisor/agent/guide: body {goal, budgetMicros?, requirements?}. Free, no credential; answers with ranked operations, each with price, free units and payment steps; never buys anything.',
      tags: ['advisor'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { body: GuideRequest, response: { 200: Guide } },
      keywords: ['advisor', 'guide', 'recommend', 'which service', 'price', 'discovery'],
    },
  ],
}

const plans: ServiceSpec = {
  slug: 'plans',
  title: 'Plan purchase',
  description:
    'Buys credit or subscription plans that unlock plan-access operations. The plans, their prices and whether each can be bought today (purchasable) are listed in /manifest.json; ' +
    'a plan is sold only while at least one operation it covers is built.',
  server: 'gateway',
  access: 'payg',
  plans: [],
  operations: [
    {
      operationId: 'purchasePlan',
      service: 'plans',
      server: 'gateway',
      method: 'POST',
      path: '/plans/{planId}/purchase',
      summary: 'Buy a plan (credit or subscription) for plan-access operations',
      description:
        'Buys the plan named in the path for the registered agent and activates it at once. ' +
        'Plans, prices and coverage: /manifest.json (plans) and /services/{slug}. Only plans marked purchasable: true are sold; a plan whose covered operations are all not built yet ' +
        'answers 409 plan_unavailable before any 402 (nothing is charged), with the plans that can be bought. ' +
        'Price: the plan price, paid by x402 or MPP: the first call answers a priced 402; settle it and retry. ' +
        'Identify the buyer with Svc-Agent-Authorization: Bearer <accessToken> from POST /auth/register (Authorization: Bearer also works with x402). ' +
        PAYG_HOW,
      tags: ['plans'],
      access: 'payg',
      proof: 'payment',
      pricing: { kind: 'plan-price' },
      schemas: { params: PlanIdParams, response: { 200: PlanPurchase, 401: problem, 402: problem, 404: problem, 409: problem } },
      keywords: ['plan', 'subscription', 'credit', 'buy', 'purchase', 'prepaid'],
    },
  ],
}

const auth: ServiceSpec = {
  slug: 'auth',
  title: 'Agent registration',
  description: 'Anonymous, free registration that issues the bearer access token used for plan access.',
  server: 'gateway',
  access: 'payg',
  plans: [],
  operations: [
    {
      operationId: 'registerAgent',
      service: 'auth',
      server: 'gateway',
      method: 'POST',
      path: '/auth/register',
      summary: 'Register an agent anonymously and get a bearer access token',
      description:
        'Free, no body, no credential. Returns {agentId, accessToken, tokenType: "Bearer"}; the token is shown once. ' +
        'Use it as Authorization: Bearer <accessToken> on plan operations and as Svc-Agent-Authorization: Bearer <accessToken> when buying plans or paying per call. See /auth.md.',
      tags: ['auth'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { response: { 201: Registration } },
      keywords: ['register', 'signup', 'token', 'bearer', 'identity', 'account'],
    },
    {
      operationId: 'startAgentClaim',
      service: 'auth',
      server: 'gateway',
      method: 'POST',
      path: '/auth/claim',
      summary: 'Start a human claim of this agent: e-mails a verification code',
      description:
        'Free; send the agent access token as Authorization: Bearer. Body {email}. The human receives a one-time code (valid 24 h) and completes the claim with POST /auth/claim/verify. ' +
        'Only claimed agents get free included units (e.g. the first song per account).',
      tags: ['auth'],
      access: 'payg',
      proof: 'agent-bearer',
      pricing: { kind: 'free' },
      schemas: { body: ClaimStartRequest, response: { 202: ClaimStarted, 401: problem } },
      keywords: ['claim', 'email', 'verify', 'human', 'free units', 'included'],
    },
    {
      operationId: 'verifyAgentClaim',
      service: 'auth',
      server: 'gateway',
      method: 'POST',
      path: '/auth/claim/verify',
      summary: 'Complete a claim with the e-mailed code',
      description: 'Free, no credential: the code itself proves the e-mail address. Body {code}. Answers the claimed agent and its free included units.',
      tags: ['auth'],
      access: 'payg',
      proof: 'none',
      pricing: { kind: 'free' },
      schemas: { body: ClaimVerifyRequest, response: { 200: ClaimVerified, 404: problem } },
      keywords: ['claim', 'email', 'verify', 'code'],
    },
  ],
}

// ------------------------------------------------------------------ scheduler

type SchedulerOp = Omit<OperationSpec, 'service' | 'server' | 'access' | 'tags'> & { tags?: string[] }

function schedulerOp(operation: SchedulerOp): OperationSpec {
  return { service: 'scheduler', server: 'scheduler', access: 'payg', tags: ['scheduler'], ...operation }
}

const CEILING_TEXT =
  'estimated_ceiling_micros = max_runtime_sec x sandbox per-second rate + max_sibling_calls x sibling fee + dependencies x install budget per package (s) x install cost per second + the llm profile max_cost_usdc_micros_per_run (if llm is set) + overhead; see GET /api/v1/rates.'

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

const MARKETPLACE_HOW =
  'Marketplace rail: instead of paying, send Authorization: Bearer <accessToken> of an agent holding a plan that covers the scheduler (scheduler-credit-5; POST /auth/register, then POST /plans/scheduler-credit-5/purchase on the gateway). ' +
  'No 402 and no X-Pay-Amount-Micros; max_amount_usdc_micros is a non-refundable lifetime cap; each finished run reports its cost as usage (meter scheduler-usage) and is debited from the plan. ' +
  'The token then proves ownership of the task on the owner endpoints. Unknown token: 401 bearer_required; no covering plan with credit for one per-run ceiling: 403 plan_required listing the plans.'

const scheduler: ServiceSpec = {
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
        'Price: you choose the amount. Direct rail: pay max_amount_usdc_micros as refundable escrow, named in X-Pay-Amount-Micros (must equal it) and paid with an x402 or MPP charge answering the 402. ' +
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
        'Price: the top-up amount, paid with x402 or MPP. ' +
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
}

// ------------------------------------------------------------------ memory

type MemoryOp = Omit<OperationSpec, 'service' | 'server' | 'access' | 'tags'> & { tags?: string[] }

function memoryOp(operation: MemoryOp): OperationSpec {
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

const memory: ServiceSpec = {
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
        '(3) otherwise 0.001000 USD per write (one memory-ops unit) paid with x402 or MPP. ' +
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
        'Price: you choose the amount, paid with x402 or MPP. ' +
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
}

export const registry: Registry = {
  services: [reviews, songs, speech, advisor, plans, auth, scheduler, memory],
}

// ------------------------------------------------------------------ lookups

const byOperationId = new Map<string, { operation: OperationSpec; service: ServiceSpec }>()
for (const service of registry.services) {
  for (const operation of service.operations) {
    if (byOperationId.has(operation.operationId)) throw new Error(`duplicate operationId ${operation.operationId}`)
    byOperationId.set(operation.operationId, { operation, service })
  }
}

export function allOperations(): OperationSpec[] {
  return registry.services.flatMap((service) => service.operations)
}

export function findOperation(operationId: string): OperationSpec | undefined {
  return byOperationId.get(operationId)?.operation
}

export function serviceOf(operationId: string): ServiceSpec | undefined {
  return byOperationId.get(operationId)?.service
}

export function findService(slug: string): ServiceSpec | undefined {
  return registry.services.find((service) => service.slug === slug)
}

export function findPlan(planId: string): PlanSpec | undefined {
  for (const service of registry.services) {
    const plan = service.plans.find((candidate) => candidate.id === planId)
    if (plan) return plan
  }
  return undefined
}
