// What a sandbox run is given: the run input, its limits and their defaults, the executor's
// options, and the validation that rejects unsafe input before anything touches the host.

import type { EgressLogEntry } from '../../src/platform/egress-proxy.ts'

export interface SandboxLimits {
  /** RLIMIT_DATA per process (heap + private writable mappings); RLIMIT_AS is this + 1 GiB (python) / 4 GiB (node). Default 512 MiB. */
  memoryBytes?: number
  /** RLIMIT_NPROC for the run's uid (processes + threads). Default 128. */
  pids?: number
  /** RLIMIT_CPU per process, seconds. Default maxRuntimeSec (+ install budget when installing) + 5. */
  cpuSeconds?: number
  /** RLIMIT_FSIZE: largest file a process may write. Default 64 MiB. */
  fileBytes?: number
  /** Captured stdout; the run is stopped ('output_limit') once a stream passes it. Default 1 MiB. */
  stdoutBytes?: number
  /** Same for stderr. Default: stdoutBytes. */
  stderrBytes?: number
  /** Size of the /tmp tmpfs (HOME, installed dependencies). Default 256 MiB; /dev/shm gets 64 MiB. */
  tmpBytes?: number
  /** RLIMIT_NOFILE. Default 1024. */
  openFiles?: number
}

export interface SandboxRunInput {
  runId: string
  runtime: 'python' | 'node'
  /** Script text (≤ 256 KiB). */
  source: string
  /** File name the source is written to, e.g. main.py / index.js (no slashes, no '..'). */
  entrypoint: string
  /** Task env only (already decrypted); nothing else from the host reaches the sandbox. */
  env: Record<string, string>
  /** Packages installed per run (npm names for node, pip requirement specs for python). */
  dependencies: string[]
  /** Wall-clock cap of the program phase (dependency install has its own budget). */
  maxRuntimeSec: number
  limits?: SandboxLimits
  /** Package index for pip (PEP 503 simple); reached through the egress proxy. */
  pipIndexUrl?: string
  /** npm registry; reached through the egress proxy. */
  npmRegistry?: string
  /** Per-run helper endpoint of the service (generate_text, call, …) and the run's bearer token. */
  helper?: { url: string; token: string }
  /** Cancel (Run deleted mid-flight). */
  signal?: AbortSignal
}

export interface SandboxOptions {
  /** Where per-run work dirs are created; every dir on the way must be o+x (checked). Default os.tmpdir(). */
  workRoot?: string
  clock?: () => number
  /** Interpreter overrides (else AGW_SANDBOX_PYTHON / AGW_SANDBOX_NODE, else discovery). */
  pythonPath?: string
  nodePath?: string
  /**
   * node: a node_modules dir of preinstalled libraries (the SPEC's axios, node-fetch, cheerio,
   * date-fns, yaml, sharp), bound read-only at /node_modules, where `import` and `require` from
   * /work/script find them after the task's own dependencies. Else AGW_SANDBOX_NODE_LIBS; unset =
   * none (docs/sandbox.md, "Preinstalled libraries").
   */
  nodeLibsDir?: string
  /** Budget for the dependency install phase. Default 300 s. */
  installTimeoutSec?: number
  /** First host uid of the per-run uid pool when the service runs as root. Default 1_600_000. */
  uidBase?: number
  /** Every egress decision of the run's proxy (allowed, refused, helper). */
  onEgress?: (entry: EgressLogEntry) => void
}

const KiB = 1024
const MiB = 1024 * KiB
export const MAX_SOURCE_BYTES = 256 * KiB
const MAX_DEPENDENCIES = 50

/** The limits a run gets: the input's, else the defaults documented on SandboxLimits. */
export function resolveLimits(input: SandboxRunInput, installTimeoutSec: number): Required<SandboxLimits> {
  const lim = input.limits ?? {}
  const installing = (input.dependencies ?? []).length > 0
  const stdoutBytes = lim.stdoutBytes ?? MiB
  return {
    memoryBytes: lim.memoryBytes ?? 512 * MiB,
    pids: lim.pids ?? 128,
    cpuSeconds: lim.cpuSeconds ?? Math.ceil(input.maxRuntimeSec) + (installing ? installTimeoutSec : 0) + 5,
    fileBytes: lim.fileBytes ?? 64 * MiB,
    tmpBytes: lim.tmpBytes ?? 256 * MiB,
    openFiles: lim.openFiles ?? 1024,
    stdoutBytes,
    stderrBytes: lim.stderrBytes ?? stdoutBytes,
  }
}

export class SandboxInputError extends Error {
  readonly code: 'VALIDATION_ERROR' | 'UNSUPPORTED_DEPENDENCY' | 'UNSUPPORTED_RUNTIME'
  constructor(code: SandboxInputError['code'], message: string) {
    super(message)
    this.name = 'SandboxInputError'
    this.code = code
  }
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/
/** Names the executor sets itself; task env cannot override them. */
const RESERVED_ENV = new Set([
  'PATH',
  'HOME',
  'TMPDIR',
  'LANG',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'http_proxy',
  'https_proxy',
  'NO_PROXY',
  'no_proxy',
  'ALL_PROXY',
  'all_proxy',
  'NODE_USE_ENV_PROXY',
])
const PIP_REQUIREMENT =
  /^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?(\s*(===|==|!=|~=|>=|<=|>|<)\s*[A-Za-z0-9.*+!_-]+)?(\s*,\s*(===|==|!=|~=|>=|<=|>|<)\s*[A-Za-z0-9.*+!_-]+)*$/
const NPM_SPEC = /^(@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*(@[A-Za-z0-9.^~<>=*|+ _-]+)?$/

/** Throws SandboxInputError for input a run must not be started with. */
export function validateRunInput(input: SandboxRunInput): void {
  const bad = (message: string) => new SandboxInputError('VALIDATION_ERROR', message)
  if (typeof input.runId !== 'string' || !/^[A-Za-z0-9._-]{1,128}$/.test(input.runId)) throw bad('runId must be 1-128 characters [A-Za-z0-9._-]')
  if (input.runtime !== 'python' && input.runtime !== 'node') {
    throw new SandboxInputError('UNSUPPORTED_RUNTIME', `runtime must be python or node, got ${String(input.runtime)}`)
  }
  if (typeof input.source !== 'string') throw bad('source must be a string')
  if (Buffer.byteLength(input.source) > MAX_SOURCE_BYTES) throw bad(`source is larger than ${MAX_SOURCE_BYTES} bytes`)
  const ep = input.entrypoint
  if (typeof ep !== 'string' || !/^[A-Za-z0-9._-]{1,128}$/.test(ep) || ep.includes('..') || ep.startsWith('.')) {
    throw bad('entrypoint must be a plain file name (no slashes, no "..", not hidden)')
  }
  if (input.runtime === 'node' && !/\.(js|mjs|cjs)$/.test(ep)) throw bad('node entrypoint must end in .js, .mjs or .cjs')
  if (!Number.isFinite(input.maxRuntimeSec) || input.maxRuntimeSec <= 0 || input.maxRuntimeSec > 86_400) {
    throw bad('maxRuntimeSec must be in (0, 86400]')
  }
  let envBytes = 0
  for (const [k, v] of Object.entries(input.env ?? {})) {
    if (!ENV_NAME.test(k)) throw bad(`env name ${JSON.stringify(k)} is not a valid variable name`)
    if (RESERVED_ENV.has(k) || k.startsWith('AGW_')) throw bad(`env name ${k} is reserved by the sandbox`)
    if (typeof v !== 'string' || v.includes('\0')) throw bad(`env ${k} must be a string without NUL`)
    envBytes += k.length + Buffer.byteLength(v)
  }
  if (envBytes > 128 * KiB) throw bad('env is larger than 128 KiB')
  const deps = input.dependencies ?? []
  if (!Array.isArray(deps) || deps.length > MAX_DEPENDENCIES) throw bad(`at most ${MAX_DEPENDENCIES} dependencies`)
  const pattern = input.runtime === 'python' ? PIP_REQUIREMENT : NPM_SPEC
  for (const d of deps) {
    if (typeof d !== 'string' || d.length > 214 || !pattern.test(d)) {
      throw new SandboxInputError(
        'UNSUPPORTED_DEPENDENCY',
        `dependency ${JSON.stringify(d)} is not a plain ${input.runtime === 'python' ? 'pip requirement' : 'npm package spec'} (URLs, paths, git and options are not allowed)`,
      )
    }
  }
  for (const u of [input.pipIndexUrl, input.npmRegistry, input.helper?.url]) {
    if (u !== undefined && !/^https?:\/\//.test(u)) throw bad(`${u} is not an http(s) URL`)
  }
}
