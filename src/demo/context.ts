// What the demo's steps share: the three services' URLs, the throwaway wallet, what earlier steps
// learned (the access token, the open task), and what the summary prints at the end.
import type { PrivateKeyAccount } from 'viem/accounts'

export interface DemoUrls {
  gateway: string
  scheduler: string
  memory: string
}

/** A step's outcome: done (a one-line summary, indented details), or skipped with the reason. */
export type StepResult = { summary: string; details?: string[] } | { skip: string }

export interface Step {
  title: string
  run(ctx: DemoContext): Promise<StepResult>
}

export interface DemoContext {
  urls: DemoUrls
  account: PrivateKeyAccount
  fundedMicros: bigint
  /** The agent's access token (POST /auth/register). */
  accessToken: string | undefined
  /** Why the scheduler cannot run scripts, from its /readyz (reason and the fix the server names). */
  executorProblem: { reason: string; fix: string | undefined } | undefined
  /** The paid task while it exists: deleted by its step, or on the way out after a failure. */
  task: { id: string; url: string } | undefined
  /** Set when the task's run could not happen, so the summary says why. */
  runSkipped: string | undefined
  links: Array<[label: string, url: string]>
  refundTx: string | undefined
  /** Why there is no refund, when there is none. */
  refundNote: string
}

export function newContext(urls: DemoUrls, account: PrivateKeyAccount): DemoContext {
  return {
    urls,
    account,
    fundedMicros: 0n,
    accessToken: undefined,
    executorProblem: undefined,
    task: undefined,
    runSkipped: undefined,
    links: [],
    refundTx: undefined,
    refundNote: 'no task was paid for',
  }
}
