// Waiting on asynchronous work in tests without fixed sleeps: poll a condition until it holds, and
// a job logger that keeps its lines for assertions.
import { setTimeout as sleep } from 'node:timers/promises'
import type { JobLogger } from '../../src/platform/jobs.ts'

/** Resolves once `check` holds, polling every `everyMs`; throws naming `what` after `timeoutMs`. */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000, everyMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(everyMs)
  }
}

export interface JobLogLine {
  level: string
  obj: Record<string, unknown>
  msg: string | undefined
}

/** A JobLogger that keeps every line it is given. */
export function testJobLogger(): JobLogger & { lines: JobLogLine[] } {
  const lines: JobLogLine[] = []
  const at = (level: string) => (obj: object, msg?: string) => void lines.push({ level, obj: obj as Record<string, unknown>, msg })
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}
