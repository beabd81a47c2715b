// The local RunExecutor: each attempt in a fresh bubblewrap sandbox (sandbox.ts). Everything that
// happens inside the sandbox is a result; only a machine that cannot sandbox at all (no bwrap, no
// interpreter) or an input the sandbox refuses is reported as infra_error, which is not charged.
import type { ExecutionRequest, ExecutionResult, RunExecutor } from '../../src/scheduler/contract/index.ts'
import { runInSandbox, type SandboxOutcome } from './sandbox.ts'
import { SandboxInputError, type SandboxLimits, type SandboxOptions } from './sandbox-input.ts'
import { SandboxUnavailableError } from './sandbox-tools.ts'

export interface LocalExecutorOptions extends SandboxOptions {
  limits?: SandboxLimits
  /** Package index / registry for dependency installs (reached through the egress proxy). */
  pipIndexUrl?: string
  npmRegistry?: string
}

const OUTCOME: Record<SandboxOutcome, ExecutionResult['outcome']> = {
  succeeded: 'succeeded',
  failed: 'failed',
  timed_out: 'timed_out',
  cancelled: 'cancelled',
  killed_oom: 'failed',
  output_limit: 'failed',
}

const REASON: Partial<Record<SandboxOutcome, string>> = {
  killed_oom: 'the script exceeded its memory limit and was killed',
  output_limit: 'the script printed more than the output limit and was stopped',
  timed_out: 'the script ran past max_runtime_sec and was killed',
}

export function createLocalExecutor(options: LocalExecutorOptions = {}): RunExecutor {
  return {
    kind: 'local',
    async execute(request: ExecutionRequest): Promise<ExecutionResult> {
      const started = new Date()
      try {
        const result = await runInSandbox(
          {
            runId: request.runName,
            runtime: request.runtime,
            source: request.source,
            entrypoint: request.entrypoint,
            env: request.env,
            dependencies: request.dependencies,
            maxRuntimeSec: request.maxRuntimeSec,
            signal: request.signal,
            ...(request.helper ? { helper: request.helper } : {}),
            ...(options.limits ? { limits: options.limits } : {}),
            ...(options.pipIndexUrl ? { pipIndexUrl: options.pipIndexUrl } : {}),
            ...(options.npmRegistry ? { npmRegistry: options.npmRegistry } : {}),
          },
          options,
        )
        const out: ExecutionResult = {
          outcome: OUTCOME[result.outcome],
          exitCode: result.exitCode,
          stdout: result.stdout,
          stderr: result.stderr,
          stdoutBytes: result.stdoutBytes,
          stderrBytes: result.stderrBytes,
          startedAt: result.startedAt,
          finishedAt: result.finishedAt,
          durationMs: result.durationMs,
          installDurationMs: result.installDurationMs,
          runtimeVersion: result.runtimeVersion,
        }
        const reason = REASON[result.outcome] ?? (result.outcome === 'failed' ? `the script exited with ${result.exitCode ?? result.signal}` : undefined)
        if (reason !== undefined) out.error = reason
        return out
      } catch (error) {
        if (!(error instanceof SandboxUnavailableError) && !(error instanceof SandboxInputError)) throw error
        const now = new Date()
        return {
          outcome: error instanceof SandboxInputError ? 'failed' : 'infra_error',
          exitCode: null,
          stdout: '',
          stderr: '',
          stdoutBytes: 0,
          stderrBytes: 0,
          startedAt: started,
          finishedAt: now,
          durationMs: 0,
          installDurationMs: 0,
          runtimeVersion: request.runtime,
          error: error.message,
        }
      }
    },
  }
}
