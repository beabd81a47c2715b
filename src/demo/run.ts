// The demo's run: a throwaway wallet, the steps in order (one progress line each), the summary.
// The first failing step ends the run with exit code 1 after saying what was asked and what came
// back; a task still holding escrow is deleted on the way out, so its money comes back.
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { send, StepFailure } from './clients.ts'
import { type DemoContext, type DemoUrls, newContext, type Step } from './context.ts'
import { type DemoIo, Printer, printSummary, usdc } from './output.ts'
import { discovery, fundedWallet, registerAgent, serverAnswers } from './steps-setup.ts'
import { buyPlan, reviewSession } from './steps-reviews.ts'
import { closeTask, createTask, deleteTask, runTask } from './steps-scheduler.ts'
import { recall, remember, song } from './steps-media.ts'

export const STEPS: readonly Step[] = [serverAnswers, fundedWallet, discovery, registerAgent, buyPlan, reviewSession, createTask, runTask, deleteTask, song, remember, recall]

async function cleanUp(ctx: DemoContext, printer: Printer): Promise<void> {
  const task = ctx.task
  if (!task) return
  try {
    const { refunded, tx } = await closeTask(ctx)
    printer.cleanup(`deleted task ${task.id}, ${usdc(refunded)} USDC of escrow refunded${tx ? ` (tx ${tx})` : ''}`)
  } catch (error) {
    printer.cleanup(`could not delete task ${task.id} (${(error as Error).message}); its escrow stays with the scheduler`)
  }
}

async function walletLines(ctx: DemoContext, startedAt: number): Promise<string[]> {
  const elapsed = `${((Date.now() - startedAt) / 1000).toFixed(1)} s`
  try {
    const reply = await send('GET', `${ctx.urls.gateway}/dev/balances/${ctx.account.address}`, { timeoutMs: 10_000 })
    if (reply.status !== 200 || typeof reply.body.balanceMicros !== 'string') return [`finished in ${elapsed}`]
    const balance = BigInt(reply.body.balanceMicros)
    return [
      `wallet ${ctx.account.address}: ${usdc(ctx.fundedMicros)} USDC from the faucet, ${usdc(balance)} left, ${usdc(ctx.fundedMicros - balance)} spent (refunds counted); finished in ${elapsed}`,
    ]
  } catch {
    return [`finished in ${elapsed}`]
  }
}

export async function runSteps(urls: DemoUrls, io: DemoIo): Promise<number> {
  const startedAt = Date.now()
  const ctx = newContext(urls, privateKeyToAccount(generatePrivateKey()))
  const printer = new Printer(io, STEPS.length)
  printer.line(`agent-gateway demo: an agent with a throwaway wallet uses ${urls.gateway} (scheduler ${urls.scheduler}, memory ${urls.memory})`)
  const skipped: Array<{ title: string; reason: string }> = []
  for (const [index, step] of STEPS.entries()) {
    try {
      const result = await step.run(ctx)
      if ('skip' in result) {
        printer.skipped(index + 1, step.title, result.skip)
        skipped.push({ title: step.title, reason: result.skip })
      } else {
        printer.passed(index + 1, result.summary, result.details)
      }
    } catch (error) {
      const failure = error instanceof StepFailure ? error : { message: `unexpected error: ${(error as Error).stack ?? String(error)}` }
      printer.failed(index + 1, step.title, failure)
      await cleanUp(ctx, printer)
      return 1
    }
  }
  printSummary(printer, { links: ctx.links, skipped, walletLines: await walletLines(ctx, startedAt), refundTx: ctx.refundTx, refundNote: ctx.refundNote })
  return 0
}
