// The RunExecutor port: runs ONE attempt of a Run to completion and reports what happened. The run
// controller (run-controller.ts) owns the money and the resources; an executor only executes.
// Two adapters implement it:
// - local/sandbox-executor.ts: a fresh bubblewrap sandbox on this machine (embedded default);
// - kubernetes/job-executor.ts: a sandboxed Job per attempt (ownerReferences Task → Run → Job).
// Both run the same bootstrap (runner-image/bootstrap), so task code behaves identically.

export type ExecutionOutcome = 'succeeded' | 'failed' | 'timed_out' | 'cancelled' | 'infra_error'

export interface ExecutionRequest {
  /** The Run resource's name (= the API's run id) and namespace. */
  runName: string
  namespace: string
  /** The owning Task resource (ownerReferences of a Job). */
  taskName: string
  taskUid?: string
  runUid?: string
  runtime: 'python' | 'node'
  source: string
  entrypoint: string
  /** Task env, decrypted. The Kubernetes adapter ignores it and mounts envSecretName instead. */
  env: Record<string, string>
  /** Name of the Secret (owned by the Task) holding env, on Kubernetes. */
  envSecretName?: string
  dependencies: string[]
  maxRuntimeSec: number
  /** Per-run helper endpoint and its bearer token (AGW_HELPER_URL / AGW_RUN_TOKEN). */
  helper?: { url: string; token: string }
  /** Aborted when the Run is deleted or cancelled mid-flight. */
  signal: AbortSignal
}

export interface ExecutionResult {
  outcome: ExecutionOutcome
  exitCode: number | null
  /** Truncated captured output (with a marker line when cut). */
  stdout: string
  stderr: string
  /** Full byte counts produced. */
  stdoutBytes: number
  stderrBytes: number
  startedAt: Date
  finishedAt: Date
  /** Program phase only (billed at the sandbox rate). */
  durationMs: number
  /** Dependency install phase (billed at the install rate). */
  installDurationMs: number
  /** The interpreter that really ran, e.g. "python 3.11.2". */
  runtimeVersion: string
  /** Why it failed, in words, when it did (image pull error, missing Secret, OOM, …). */
  error?: string
  /** Nothing ran: the run was released before it started (costs nothing). */
  notStarted?: boolean
}

export interface RunExecutor {
  readonly kind: 'local' | 'kubernetes'
  execute(request: ExecutionRequest): Promise<ExecutionResult>
}
