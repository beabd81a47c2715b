// The gateway's own free services: the seller advisor, plan purchase and agent registration.
import {
  ClaimStarted,
  ClaimStartRequest,
  ClaimVerified,
  ClaimVerifyRequest,
  Guide,
  GuideQuery,
  GuideRequest,
  PlanIdParams,
  PlanPurchase,
  Registration,
} from '../schemas/gateway.ts'
import { defineService, PAYG_HOW, problem } from './common.ts'

export const advisor = defineService({
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
})

export const plans = defineService({
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
        'Price: the plan price, paid by x402 (or MPP where offered): the first call answers a priced 402; settle it and retry. ' +
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
})

export const auth = defineService({
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
})
