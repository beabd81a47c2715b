// Steps 1–4: the server answers, a throwaway wallet gets test USDC from the dev chain's faucet,
// the advisor finds the operations the demo is about to call, and an agent registers.
import { describeReply, expectStatus, field, send, StepFailure, type Json, type Reply } from './clients.ts'
import type { Step } from './context.ts'
import { usdc } from './output.ts'

/** What the wallet gets from the faucet: a budget above everything the demo buys (a 5 USDC plan and cents). */
export const FAUCET_MICROS = 10_000_000n

const START_HINT = 'start it with `npm start` in another terminal (or point the demo elsewhere: --gateway, --scheduler, --memory)'

async function probe(name: string, base: string): Promise<Reply> {
  try {
    return await send('GET', `${base}/readyz`, { timeoutMs: 10_000 })
  } catch (error) {
    if (error instanceof StepFailure && error.message.startsWith('nothing answers')) {
      const hint = name === 'gateway' ? START_HINT : `the demo needs every role: start them all with \`npm start\`, or pass --${name.split(' ')[0]} URL`
      throw new StepFailure(`nothing answers at ${base} (the ${name}) — ${hint}`, { asked: error.asked })
    }
    throw error
  }
}

export const serverAnswers: Step = {
  title: 'the server answers',
  async run(ctx) {
    const gateway = await probe('gateway', ctx.urls.gateway)
    expectStatus(gateway, [200], 'the gateway is not ready')
    const memory = await probe('memory service', ctx.urls.memory)
    expectStatus(memory, [200], 'the memory service is not ready')
    const scheduler = await probe('scheduler', ctx.urls.scheduler)
    const executor = ((scheduler.body.reasons ?? {}) as Record<string, Json | undefined>).executor
    if (scheduler.status === 503 && executor && typeof executor.reason === 'string') {
      // It serves, but cannot run scripts here (bubblewrap missing, say): its steps are skipped.
      ctx.executorProblem = { reason: executor.reason, fix: typeof executor.fix === 'string' ? executor.fix : undefined }
      return { summary: `gateway and memory ready; the scheduler answers but cannot run scripts here (${executor.reason})` }
    }
    expectStatus(scheduler, [200], 'the scheduler is not ready')
    return { summary: `gateway ${ctx.urls.gateway}, scheduler ${ctx.urls.scheduler} and memory ${ctx.urls.memory} are ready` }
  },
}

export const fundedWallet: Step = {
  title: 'a funded throwaway wallet',
  async run(ctx) {
    const reply = await send('POST', `${ctx.urls.gateway}/dev/faucet`, { body: { address: ctx.account.address, amountMicros: FAUCET_MICROS.toString() } })
    if (reply.status === 404) {
      throw new StepFailure('this server has no /dev/faucet: it settles on a real chain (CHAIN_RPC_URL), and the demo needs the embedded dev chain', {
        asked: reply.asked,
        got: describeReply(reply),
        hint: 'run the demo against a server started without CHAIN_RPC_URL (plain `npm start`), whose dev chain mints test USDC',
      })
    }
    expectStatus(reply, [200], 'the faucet did not fund the wallet')
    ctx.fundedMicros = BigInt(typeof reply.body.balanceMicros === 'string' ? reply.body.balanceMicros : FAUCET_MICROS.toString())
    return { summary: `throwaway wallet ${ctx.account.address} funded with ${usdc(ctx.fundedMicros)} test USDC by /dev/faucet` }
  },
}

/** What the demo asks the advisor, and the operations each answer must recommend. */
const GOALS: Array<{ goal: string; want: string[] }> = [
  { goal: 'buy a plan and have a human review my web page', want: ['purchasePlan', 'createReviewSession'] },
  { goal: 'run a python script now in a sandbox and read its logs', want: ['createTask', 'runTaskNow'] },
  { goal: 'delete a task, refund its escrow and read the ledger', want: ['deleteTask', 'getTaskLedger'] },
  { goal: 'generate a short song', want: ['generateSongs'] },
  { goal: 'remember a fact and recall it later', want: ['rememberMemory', 'recallMemories'] },
]

interface Recommendation {
  operationId: string
  method: string
  url: string
  access: string
  price: { amountUsd: string; per: string } | null
}

function priceOf(recommendation: Recommendation): string {
  if (recommendation.price === null) return 'priced by its 402'
  if (recommendation.price.amountUsd === '0.000000') return 'free'
  const rail = recommendation.access === 'plan' ? 'plan credit' : 'x402'
  return `${recommendation.price.amountUsd} USD/${recommendation.price.per}, ${rail}`
}

export const discovery: Step = {
  title: 'discovery',
  async run(ctx) {
    const details: string[] = []
    const origins = new Map<string, string>()
    let found = 0
    for (const { goal, want } of GOALS) {
      const reply = expectStatus(await send('GET', `${ctx.urls.gateway}/advisor/agent/guide?goal=${encodeURIComponent(goal)}`), [200], 'the advisor did not answer')
      const recommendations = (Array.isArray(reply.body.recommendations) ? reply.body.recommendations : []) as Recommendation[]
      const picked = want.map((operationId) => recommendations.find((recommendation) => recommendation.operationId === operationId))
      const missing = want.filter((_, i) => picked[i] === undefined)
      if (missing.length > 0) {
        throw new StepFailure(`the advisor does not recommend ${missing.join(', ')} for "${goal}"`, { asked: reply.asked, got: describeReply(reply) })
      }
      found += picked.length
      const list = picked.map((recommendation) => {
        const operation = recommendation as Recommendation
        origins.set(operation.operationId, new URL(operation.url).origin)
        return `${operation.operationId} (${operation.method} ${new URL(operation.url).pathname.replaceAll('%7B', '{').replaceAll('%7D', '}')}, ${priceOf(operation)})`
      })
      details.push(`"${goal}" → ${list.join('; ')}`)
    }
    // The demo calls the URLs it was given; say so if the server advertises others.
    for (const [operationId, base] of [
      ['createTask', ctx.urls.scheduler],
      ['rememberMemory', ctx.urls.memory],
      ['createReviewSession', ctx.urls.gateway],
    ] as const) {
      const advertised = origins.get(operationId)
      if (advertised !== undefined && advertised !== new URL(base).origin) details.push(`note: the server advertises ${operationId} at ${advertised}; the demo calls ${base}`)
    }
    return { summary: `the advisor (GET /advisor/agent/guide) found the ${found} operations the demo calls`, details }
  },
}

export const registerAgent: Step = {
  title: 'register an agent',
  async run(ctx) {
    const reply = expectStatus(await send('POST', `${ctx.urls.gateway}/auth/register`), [200, 201], 'registration failed')
    ctx.accessToken = field(reply, 'accessToken')
    return { summary: `registered agent ${field(reply, 'agentId')} (POST /auth/register, bearer token ${ctx.accessToken.slice(0, 8)}…)` }
  },
}
