// Missing system prerequisites, said at start: one line on stderr each, with what it stops and the
// command that fixes it (the rest of the product runs). Chromium (review snapshots of live pages,
// the scheduler's screenshot helper), the local executor's sandbox tools, the media tools.
import type { PrerequisiteReport } from '../../controllers/local/prerequisites.ts'
import type { Logger } from '../platform/logger.ts'
import type { Prerequisite } from './context.ts'

function sayMissing(line: string): void {
  process.stderr.write(`agent-gateway: ${line}\n`)
}

/** Chromium for review snapshots (gateway) and the screenshot helper (scheduler-api): one line when it is not there. */
export const chromium: Prerequisite = {
  name: 'chromium',
  async check(config, logger) {
    const { chromiumAvailable, DEFAULT_CHROMIUM_PATH } = await import('../platform/page-shots.ts')
    const chromiumPath = config.chromiumPath
    if (await chromiumAvailable(chromiumPath)) return
    logger.debug({ chromiumPath }, 'chromium: not found')
    const fix = chromiumPath === DEFAULT_CHROMIUM_PATH ? 'apt-get install -y chromium' : `point CHROMIUM_PATH at a Chromium binary, or unset it and apt-get install -y chromium`
    sayMissing(
      `chromium is not installed (${chromiumPath} is not an executable): review snapshots of live pages and the screenshot helper fail until then (the rest runs); fix: ${fix}`,
    )
  },
}

/**
 * The local executor's verdict at start and whenever it changes. At start a missing prerequisite is
 * one line on stderr with its fix; what is not a problem (libraries of the SPEC a local run lacks,
 * an older python) is one short line, its details at debug (docs/sandbox.md).
 */
export function reportExecutor(logger: Logger, report: PrerequisiteReport, previous: PrerequisiteReport | undefined): void {
  if (!previous && report.notes.length > 0) {
    const python = report.missingLibraries.python?.length ?? 0
    const node = report.missingLibraries.node?.length ?? 0
    logger.debug({ missingLibraries: report.missingLibraries, notes: report.notes }, 'local executor: notes')
    const missing =
      python + node > 0
        ? `${[python > 0 ? `${python} python` : '', node > 0 ? `${node} node` : ''].filter(Boolean).join(' and ')} libraries the SPEC preinstalls are missing for local runs`
        : ''
    const others = report.notes.filter((note) => !/libraries the SPEC preinstalls/.test(note))
    logger.warn(
      { missingLibraries: report.missingLibraries },
      `local executor: ${[...others, missing].filter(Boolean).join('; ')} (tasks that import them fail; LOG_LEVEL=debug lists them, docs/sandbox.md#preinstalled-libraries says how to install them)`,
    )
  }
  if (report.ok) {
    logger.info(
      { tools: report.tools, runtimes: report.runtimes },
      previous ? 'local executor: prerequisites now satisfied; the scheduler takes tasks again' : 'local executor: prerequisites satisfied',
    )
    return
  }
  const problems = report.problems.map((problem) => `${problem.reason} (fix: ${problem.fix})`).join('; ')
  if (previous) {
    logger.error({ problems: report.problems }, `local executor cannot run task scripts: ${problems}`)
    return
  }
  logger.debug({ problems: report.problems }, `local executor cannot run task scripts: ${problems}`)
  for (const problem of report.problems) {
    sayMissing(
      `the local sandbox executor (SCHEDULER_EXECUTOR=local) cannot run task scripts: ${problem.reason}; the scheduler refuses new tasks until then (the rest runs); fix: ${problem.fix}`,
    )
  }
}

/** Missing media tools at start: one line per package to install (ffmpeg and ffprobe are one). */
export function reportMediaTools(logger: Logger, missing: Record<string, unknown> | undefined): void {
  const problems = (missing?.problems ?? []) as { tool: string; reason: string; fix: string }[]
  if (problems.length === 0) return
  logger.debug({ problems }, 'media: tools missing')
  const byFix = new Map<string, string[]>()
  for (const problem of problems) byFix.set(problem.fix, [...(byFix.get(problem.fix) ?? []), problem.reason])
  for (const [fix, reasons] of byFix) sayMissing(`media: ${reasons.join('; ')}; songs and speech answer 503 until then (the rest runs); fix: ${fix}`)
}
