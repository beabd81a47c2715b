// Local sandbox executor: one run of a task script in a fresh bubblewrap sandbox.
//
//   prlimit (rlimits) → bwrap (namespaces, mounts, uid 65534, no caps, no network)
//     → python3 -I /agw/bootstrap.py | node /agw/bootstrap.mjs   (runner-image/bootstrap/)
//       → install dependencies → sentinel line → user entrypoint
//
// The sandbox's only way out is the per-run egress proxy (egress-proxy.ts) on a unix socket
// bind-mounted at /agw/proxy.sock; the bootstrap forwards 127.0.0.1:3128 inside the sandbox to
// it, and HTTP(S)_PROXY point there. See docs/sandbox.md for the threat model and what is not
// isolated.

import { execFile, spawn } from 'node:child_process'
import { constants as fsConstants } from 'node:fs'
import { access, chown, copyFile, mkdir, mkdtemp, readdir, realpath, rm, stat, writeFile, lstat, readlink } from 'node:fs/promises'
import { writeOwnerMarker } from './workdirs.ts'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createEgressProxy } from './egress-proxy.ts'
import type { EgressLogEntry } from './egress-proxy.ts'

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

export type SandboxOutcome = 'succeeded' | 'failed' | 'timed_out' | 'cancelled' | 'killed_oom' | 'output_limit'

export interface SandboxRunResult {
  exitCode: number | null
  signal: string | null
  outcome: SandboxOutcome
  /** Truncated to limits.stdoutBytes, with a marker line when truncated. */
  stdout: string
  stderr: string
  /** Full byte counts received. */
  stdoutBytes: number
  stderrBytes: number
  startedAt: Date
  finishedAt: Date
  durationMs: number
  /** Dependency install time (billed by the scheduler); 0 without dependencies. */
  installDurationMs: number
  /** The real interpreter that ran, e.g. "python 3.11.2", "node 20.20.2". */
  runtimeVersion: string
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

export const SENTINEL = '=== agent-gateway: program output follows ==='
/** Uid/gid the script sees inside the sandbox. */
export const SANDBOX_UID = 65534
/** In-sandbox TCP port of the bootstrap's forwarder to the egress proxy. */
export const PROXY_PORT = 3128

const KiB = 1024
const MiB = 1024 * KiB
const GiB = 1024 * MiB
export const MAX_SOURCE_BYTES = 256 * KiB
const MAX_DEPENDENCIES = 50
const DEFAULT_UID_BASE = 1_600_000

export class SandboxInputError extends Error {
  readonly code: 'VALIDATION_ERROR' | 'UNSUPPORTED_DEPENDENCY' | 'UNSUPPORTED_RUNTIME'
  constructor(code: SandboxInputError['code'], message: string) {
    super(message)
    this.name = 'SandboxInputError'
    this.code = code
  }
}

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError'
}

// ---------------------------------------------------------------------------------------------
// Validation

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

function validate(input: SandboxRunInput): void {
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

// ---------------------------------------------------------------------------------------------
// Host tools and interpreters

const exists = (p: string) =>
  access(p, fsConstants.X_OK).then(
    () => true,
    () => false,
  )

/** Where host tools are looked for when the service has no PATH at all (env -i, a bare unit). */
export const FALLBACK_TOOL_DIRS = ['/usr/bin', '/bin', '/usr/local/bin', '/usr/sbin', '/sbin']

/**
 * A host tool (bwrap, prlimit) on `searchPath` (default: the service's PATH), in PATH order. Only
 * when PATH is unset or empty are the standard system dirs searched instead, so an operator who
 * leaves a tool off PATH is believed.
 */
export async function findTool(name: string, searchPath: string | undefined = process.env.PATH): Promise<string | null> {
  const dirs = (searchPath ?? '').split(':').filter((dir) => dir.startsWith('/'))
  for (const dir of dirs.length > 0 ? dirs : FALLBACK_TOOL_DIRS) {
    if (await exists(path.join(dir, name))) return path.join(dir, name)
  }
  return null
}

async function which(name: string): Promise<string | null> {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && (await exists(path.join(dir, name)))) return path.join(dir, name)
  }
  return null
}

/** bwrap and prlimit (looked up on `searchPath`, default PATH), or the reason the sandbox cannot run here. */
export async function sandboxTools(searchPath?: string): Promise<{ bwrap: string; prlimit: string } | { missing: string }> {
  const bwrap = await findTool('bwrap', searchPath ?? process.env.PATH)
  if (!bwrap) return { missing: 'bwrap (bubblewrap) is not installed (not on PATH): apt-get install bubblewrap' }
  const prlimit = await findTool('prlimit', searchPath ?? process.env.PATH)
  if (!prlimit) return { missing: 'prlimit (util-linux) is not installed (not on PATH): apt-get install util-linux' }
  return { bwrap, prlimit }
}

interface Interpreter {
  runtime: 'python' | 'node'
  /** Real executable path (the same path inside the sandbox). */
  bin: string
  version: string
  /** Host dirs bound read-only at the same path (interpreters outside /usr). */
  mounts: string[]
  /** Extra PATH entry inside the sandbox. */
  binDir: string
  /** node: npm's CLI script, when present. */
  npmCli?: string
  /**
   * node, passed via NODE_OPTIONS so child node processes (npm) get them too:
   * - --disable-wasm-trap-handler: V8 reserves ~10 GiB of address space per wasm memory
   *   (guard regions), which RLIMIT_AS refuses; Node >= 20.15/22.2 can use bounds checks
   *   instead. Without it RLIMIT_AS is left off and only RLIMIT_DATA bounds memory.
   * - --use-openssl-ca: the system trust store (SSL_CERT_FILE), loaded on first use;
   *   NODE_EXTRA_CA_CERTS would parse the whole bundle at every start (~35 ms).
   */
  nodeOptions?: string
  /** node: --disable-wasm-trap-handler is among nodeOptions. */
  wasmBoundsChecks?: boolean
}

const SYSTEM_PREFIX = /^\/usr\//

function probe(bin: string, args: string[]): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(bin, args, { env: { PATH: '/usr/bin:/bin' }, timeout: 15_000 }, (err, stdout) => resolve(err ? null : stdout.trim()))
  })
}

async function probePython(candidate: string): Promise<Interpreter | null> {
  const out = await probe(candidate, ['-I', '-c', 'import sys, platform, json; print(json.dumps([platform.python_version(), sys.executable, sys.base_prefix]))'])
  if (!out) return null
  const [version, executable, prefix] = JSON.parse(out) as [string, string, string]
  const bin = await realpath(executable)
  const outside = !SYSTEM_PREFIX.test(bin)
  return { runtime: 'python', bin, version, mounts: outside ? [await realpath(prefix)] : [], binDir: path.dirname(bin) }
}

async function probeNode(candidate: string): Promise<Interpreter | null> {
  const out = await probe(candidate, ['-p', 'JSON.stringify([process.versions.node, process.execPath])'])
  if (!out) return null
  const [version, executable] = JSON.parse(out) as [string, string]
  const bin = await realpath(executable)
  const prefix = path.dirname(path.dirname(bin))
  const npmCli = path.join(prefix, 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js')
  const hasNpm = await access(npmCli).then(
    () => true,
    () => false,
  )
  const outside = !SYSTEM_PREFIX.test(bin)
  const flags: string[] = []
  for (const flag of ['--disable-wasm-trap-handler', '--use-openssl-ca']) {
    if ((await probe(bin, [flag, '-e', '0'])) !== null) flags.push(flag)
  }
  return {
    runtime: 'node',
    bin,
    version,
    mounts: outside ? [prefix] : [],
    binDir: path.dirname(bin),
    ...(hasNpm ? { npmCli } : {}),
    ...(flags.length ? { nodeOptions: flags.join(' ') } : {}),
    wasmBoundsChecks: flags.includes('--disable-wasm-trap-handler'),
  }
}

const interpreterCache = new Map<string, Promise<Interpreter>>()

/**
 * The interpreter a run uses: an explicit override, else the first candidate of the SPEC's
 * version (python 3.12 / node 22), else the machine's: Debian's /usr/bin/python3 before
 * whatever `python3` is on PATH (pyenv builds are bound read-only at their prefix), and
 * /usr/bin/node.
 */
export function resolveInterpreter(runtime: 'python' | 'node', options: SandboxOptions = {}): Promise<Interpreter> {
  const override = runtime === 'python' ? (options.pythonPath ?? process.env.AGW_SANDBOX_PYTHON) : (options.nodePath ?? process.env.AGW_SANDBOX_NODE)
  const key = `${runtime}:${override ?? ''}`
  let cached = interpreterCache.get(key)
  if (!cached) {
    cached = (async () => {
      const want = runtime === 'python' ? /^3\.12\./ : /^22\./
      const candidates = override
        ? [override]
        : runtime === 'python'
          ? ['/usr/bin/python3.12', '/usr/local/bin/python3.12', await which('python3.12'), '/usr/bin/python3', '/usr/local/bin/python3', await which('python3')]
          : ['/usr/local/bin/node', '/usr/bin/node', await which('node')]
      const found: Interpreter[] = []
      const skipped: string[] = []
      for (const c of new Set(candidates)) {
        if (!c || !(await exists(c))) continue
        const it = runtime === 'python' ? await probePython(c) : await probeNode(c)
        if (!it) continue
        const blocked = await notSearchable(it.mounts[0] ?? it.bin)
        if (blocked) {
          // e.g. a pyenv build under /root (0700)
          skipped.push(`${it.bin} (${blocked} is not searchable by the sandbox uids)`)
          continue
        }
        if (want.test(it.version)) return it
        found.push(it)
      }
      if (!found[0]) {
        throw new SandboxUnavailableError(`no usable ${runtime} interpreter found${override ? ` at ${override}` : ''}${skipped.length ? `; skipped ${skipped.join(', ')}` : ''}`)
      }
      return found[0]
    })()
    cached.catch(() => interpreterCache.delete(key))
    interpreterCache.set(key, cached)
  }
  return cached
}

/**
 * The preinstalled node libraries dir (options.nodeLibsDir, else AGW_SANDBOX_NODE_LIBS), or null
 * when none is configured. A configured dir that is missing or unreachable by the sandbox uids is
 * an error, not silently skipped: tasks would fail on their first import.
 */
export async function preinstalledNodeLibs(options: SandboxOptions = {}): Promise<string | null> {
  const configured = options.nodeLibsDir ?? process.env.AGW_SANDBOX_NODE_LIBS
  if (!configured) return null
  const dir = await realpath(configured).catch(() => null)
  if (
    !dir ||
    !(await stat(dir).then(
      (st) => st.isDirectory(),
      () => false,
    ))
  ) {
    throw new SandboxUnavailableError(`preinstalled node libraries: ${configured} is not a directory (AGW_SANDBOX_NODE_LIBS)`)
  }
  const blocked = await notSearchable(dir)
  if (blocked) throw new SandboxUnavailableError(`preinstalled node libraries: ${blocked} is not searchable by the sandbox uids (chmod o+x ${blocked})`)
  return dir
}

// ---------------------------------------------------------------------------------------------
// Run identity: one host uid per concurrent run, so RLIMIT_NPROC counts this run only.

const usedSlots = new Set<number>()

/**
 * bwrap runs as the run's uid and resolves its bind sources by path, so every directory from /
 * down to a bound path must be searchable by others (o+x): /tmp and /usr are, /root is not.
 * Returns the first directory that is not, or null.
 */
async function notSearchable(target: string): Promise<string | null> {
  if ((process.getuid?.() ?? 0) !== 0) return null // bwrap runs as the service's own uid
  for (let dir = path.resolve(target); ; dir = path.dirname(dir)) {
    const st = await stat(dir)
    if (st.isDirectory() && (st.mode & 0o001) === 0) return dir
    if (dir === path.dirname(dir)) return null
  }
}

/** Rejects with SandboxUnavailableError when the sandbox uids cannot reach `workRoot`. */
export async function checkWorkRoot(workRoot: string): Promise<void> {
  const blocked = await notSearchable(workRoot)
  if (blocked) {
    throw new SandboxUnavailableError(`sandbox workRoot ${workRoot}: ${blocked} is not searchable by the sandbox uids (chmod o+x ${blocked}, or use a workRoot under /tmp)`)
  }
}

function acquireIdentity(base: number): { uid: number; gid: number; setuid: boolean; release(): void } {
  const uid = process.getuid?.() ?? 0
  if (uid !== 0) return { uid, gid: process.getgid?.() ?? uid, setuid: false, release() {} }
  let slot = 0
  while (usedSlots.has(slot)) slot++
  usedSlots.add(slot)
  return { uid: base + slot, gid: base + slot, setuid: true, release: () => usedSlots.delete(slot) }
}

// ---------------------------------------------------------------------------------------------
// bwrap arguments

const BOOTSTRAP_DIR = fileURLToPath(new URL('../../runner-image/bootstrap/', import.meta.url))

/** System dirs: merged-/usr symlinks are recreated as symlinks, real dirs are bound read-only. */
async function systemMounts(): Promise<string[]> {
  const args = ['--ro-bind', '/usr', '/usr']
  for (const p of ['/bin', '/sbin', '/lib', '/lib64', '/lib32', '/libx32']) {
    const st = await lstat(p).catch(() => null)
    if (!st) continue
    if (st.isSymbolicLink()) args.push('--symlink', await readlink(p), p)
    else if (st.isDirectory()) args.push('--ro-bind', p, p)
  }
  const etc = ['/etc/ssl', '/etc/alternatives', '/etc/resolv.conf', '/etc/ld.so.cache', '/etc/localtime']
  for (const e of await readdir('/etc').catch(() => [] as string[])) if (/^python3(\.\d+)?$/.test(e)) etc.push(`/etc/${e}`)
  for (const p of etc) {
    const real = await realpath(p).catch(() => null)
    if (real) args.push('--ro-bind', real, p)
  }
  return args
}

let systemMountsCache: Promise<string[]> | undefined

/** The namespaces, privileges and identity of every sandbox: a run's and the start-up probe's alike. */
const SANDBOX_IDENTITY_ARGS: readonly string[] = [
  '--unshare-all',
  '--unshare-user',
  '--disable-userns',
  '--die-with-parent',
  '--new-session',
  '--cap-drop',
  'ALL',
  '--uid',
  String(SANDBOX_UID),
  '--gid',
  String(SANDBOX_UID),
  '--hostname',
  'agw-sandbox',
]

/**
 * prlimit flags. Memory is bounded by RLIMIT_DATA (heap + private writable mappings: what a
 * script actually fills); RLIMIT_AS adds a looser backstop against shared anonymous mappings,
 * with headroom for reservations that never hold data (a bare node 20 maps ~1.6 GB of address
 * space: V8 cages + a malloc arena per thread; python ~100 MB).
 */
function rlimitArgs(l: Required<Omit<SandboxLimits, 'stderrBytes' | 'stdoutBytes'>>, addressSpaceHeadroom: number | null): string[] {
  return [
    `--data=${l.memoryBytes}`,
    ...(addressSpaceHeadroom !== null ? [`--as=${l.memoryBytes + addressSpaceHeadroom}`] : []),
    `--nproc=${l.pids}`,
    `--nofile=${l.openFiles}`,
    `--fsize=${l.fileBytes}`,
    `--cpu=${l.cpuSeconds}:${l.cpuSeconds + 2}`,
    '--core=0',
  ]
}

// ---------------------------------------------------------------------------------------------
// Output capture

class Capture {
  private readonly chunks: Buffer[] = []
  private readonly cap: number
  private kept = 0
  total = 0
  constructor(cap: number) {
    this.cap = cap
  }
  /** Adds a chunk; true once the stream has gone past its cap. */
  push(chunk: Buffer): boolean {
    this.total += chunk.length
    if (this.kept < this.cap) {
      const part = chunk.length <= this.cap - this.kept ? chunk : chunk.subarray(0, this.cap - this.kept)
      this.chunks.push(part)
      this.kept += part.length
    }
    return this.total > this.cap
  }
  text(name: string): string {
    const s = Buffer.concat(this.chunks).toString('utf8')
    return this.total > this.cap ? `${s}\n[agent-gateway: ${name} truncated at ${this.cap} of ${this.total} bytes]\n` : s
  }
  tail(n: number): string {
    return Buffer.concat(this.chunks).subarray(-n).toString('utf8')
  }
}

const OOM_SIGNS = /MemoryError|JavaScript heap out of memory|Array buffer allocation failed|Cannot allocate memory|std::bad_alloc|out of memory/i

function signalName(n: number): string | null {
  for (const [name, num] of Object.entries(os.constants.signals)) if (num === n) return name
  return null
}

// ---------------------------------------------------------------------------------------------
// The run

export async function runInSandbox(input: SandboxRunInput, options: SandboxOptions = {}): Promise<SandboxRunResult> {
  validate(input)
  const clock = options.clock ?? Date.now
  const tools = await sandboxTools()
  if ('missing' in tools) throw new SandboxUnavailableError(tools.missing)
  const interp = await resolveInterpreter(input.runtime, options)
  const nodeLibs = input.runtime === 'node' ? await preinstalledNodeLibs(options) : null
  const runtimeVersion = `${input.runtime} ${interp.version}`
  const deps = input.dependencies ?? []
  const installTimeoutSec = options.installTimeoutSec ?? 300
  const maxRuntimeMs = Math.round(input.maxRuntimeSec * 1000)
  const lim = input.limits ?? {}
  const limits = {
    memoryBytes: lim.memoryBytes ?? 512 * MiB,
    pids: lim.pids ?? 128,
    cpuSeconds: lim.cpuSeconds ?? Math.ceil(input.maxRuntimeSec) + (deps.length ? installTimeoutSec : 0) + 5,
    fileBytes: lim.fileBytes ?? 64 * MiB,
    tmpBytes: lim.tmpBytes ?? 256 * MiB,
    openFiles: lim.openFiles ?? 1024,
  }
  const stdoutCap = lim.stdoutBytes ?? MiB
  const stderrCap = lim.stderrBytes ?? stdoutCap

  const startedAtMs = clock()
  if (input.signal?.aborted) {
    return {
      exitCode: null,
      signal: null,
      outcome: 'cancelled',
      stdout: '',
      stderr: '',
      stdoutBytes: 0,
      stderrBytes: 0,
      startedAt: new Date(startedAtMs),
      finishedAt: new Date(startedAtMs),
      durationMs: 0,
      installDurationMs: 0,
      runtimeVersion,
    }
  }

  const workRoot = options.workRoot ?? os.tmpdir()
  await checkWorkRoot(workRoot)
  const id = acquireIdentity(options.uidBase ?? DEFAULT_UID_BASE)
  const owner = { uid: id.uid, gid: id.gid }
  const workDir = await mkdtemp(path.join(workRoot, `agw-run-${input.runId.slice(0, 40)}-`))
  const proxy = createEgressProxy({
    allow: deps.length
      ? [input.pipIndexUrl, input.npmRegistry]
          .filter((u): u is string => !!u)
          .map((u) => {
            const url = new URL(u)
            return `${url.hostname.replace(/^\[|\]$/g, '')}:${url.port || (url.protocol === 'https:' ? 443 : 80)}`
          })
      : [],
    ...(input.helper ? { helper: { target: input.helper.url } } : {}),
    ...(options.onEgress ? { onLog: options.onEgress } : {}),
    clock,
  })
  try {
    // --- who owns this dir, for removeStaleWorkDirs of a later process (never bound in the sandbox)
    await writeOwnerMarker(workDir)
    // --- work dir: script (ro), bootstrap + config + proxy socket (ro), generated /etc files
    const bootstrapName = input.runtime === 'python' ? 'bootstrap.py' : 'bootstrap.mjs'
    const dirs = ['script', 'agw', 'etc'].map((d) => path.join(workDir, d))
    for (const d of dirs) await mkdir(d, { mode: 0o755 })
    await writeFile(path.join(workDir, 'script', input.entrypoint), input.source, { mode: 0o644 })
    await copyFile(path.join(BOOTSTRAP_DIR, bootstrapName), path.join(workDir, 'agw', bootstrapName))
    const config = {
      runtime: input.runtime,
      entrypoint: `/work/script/${input.entrypoint}`,
      dependencies: deps,
      installDir: '/tmp/.agw',
      pipIndexUrl: input.pipIndexUrl ?? null,
      npmRegistry: input.npmRegistry ?? null,
      npmCli: interp.npmCli ?? null,
      proxySocket: '/agw/proxy.sock',
      proxyPort: PROXY_PORT,
      statusFd: 3,
    }
    await writeFile(path.join(workDir, 'agw', 'run.json'), `${JSON.stringify(config, null, 2)}\n`, { mode: 0o644 })
    await writeFile(path.join(workDir, 'etc', 'passwd'), `nobody:x:${SANDBOX_UID}:${SANDBOX_UID}:sandbox:/tmp:/usr/sbin/nologin\n`)
    await writeFile(path.join(workDir, 'etc', 'group'), `nogroup:x:${SANDBOX_UID}:\n`)
    await writeFile(path.join(workDir, 'etc', 'hosts'), '127.0.0.1\tlocalhost agw-sandbox\n::1\tlocalhost\n')
    for (const p of [workDir, ...dirs]) await chown(p, owner.uid, owner.gid)
    for (const d of dirs) for (const f of await readdir(d)) await chown(path.join(d, f), owner.uid, owner.gid)
    await proxy.listen(path.join(workDir, 'agw', 'proxy.sock'), owner)

    // --- bwrap options (passed on an fd so env values never show in the host's process list)
    const caBundle = '/etc/ssl/certs/ca-certificates.crt'
    const hasCaBundle = await access(caBundle).then(
      () => true,
      () => false,
    )
    const env: Record<string, string> = {
      // The system trust store (bound read-only from the host) for every TLS client; overridable.
      ...(hasCaBundle ? { SSL_CERT_FILE: caBundle, REQUESTS_CA_BUNDLE: caBundle, PIP_CERT: caBundle } : {}),
      ...input.env,
      PATH: [...new Set([interp.binDir, '/usr/local/bin', '/usr/bin', '/bin'])].join(':'),
      HOME: '/tmp',
      TMPDIR: '/tmp',
      LANG: 'C.UTF-8',
      HTTP_PROXY: `http://127.0.0.1:${PROXY_PORT}`,
      HTTPS_PROXY: `http://127.0.0.1:${PROXY_PORT}`,
      http_proxy: `http://127.0.0.1:${PROXY_PORT}`,
      https_proxy: `http://127.0.0.1:${PROXY_PORT}`,
      NODE_USE_ENV_PROXY: '1',
      ...(interp.nodeOptions ? { NODE_OPTIONS: [interp.nodeOptions, input.env.NODE_OPTIONS].filter(Boolean).join(' ') } : {}),
      AGW_RUN_ID: input.runId,
      ...(input.helper ? { AGW_HELPER_URL: 'http://agw-helper.internal', AGW_RUN_TOKEN: input.helper.token } : {}),
    }
    systemMountsCache ??= systemMounts()
    const opts = [
      ...SANDBOX_IDENTITY_ARGS,
      '--info-fd',
      '5',
      ...(await systemMountsCache),
      ...interp.mounts.flatMap((m) => ['--ro-bind', m, m]),
      '--ro-bind',
      path.join(workDir, 'etc', 'passwd'),
      '/etc/passwd',
      '--ro-bind',
      path.join(workDir, 'etc', 'group'),
      '/etc/group',
      '--ro-bind',
      path.join(workDir, 'etc', 'hosts'),
      '/etc/hosts',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--size',
      String(64 * MiB),
      '--tmpfs',
      '/dev/shm',
      '--remount-ro',
      '/dev', // bwrap's /dev is an unsized tmpfs; device nodes and /dev/shm stay usable
      '--size',
      String(limits.tmpBytes),
      '--tmpfs',
      '/tmp',
      '--ro-bind',
      path.join(workDir, 'script'),
      '/work/script',
      '--ro-bind',
      path.join(workDir, 'agw'),
      '/agw',
      ...(input.runtime === 'node' ? ['--symlink', '/tmp/.agw/node/node_modules', '/work/node_modules'] : []),
      ...(nodeLibs ? ['--ro-bind', nodeLibs, '/node_modules'] : []),
      '--remount-ro',
      '/',
      '--chdir',
      '/tmp',
      '--clearenv',
      ...Object.entries(env).flatMap(([k, v]) => ['--setenv', k, v]),
    ]
    const command = input.runtime === 'python' ? [interp.bin, '-I', `/agw/${bootstrapName}`, '/agw/run.json'] : [interp.bin, `/agw/${bootstrapName}`, '/agw/run.json']

    // --- spawn: prlimit sets the rlimits and execs bwrap as the run's uid, in its own group
    const child = spawn(
      tools.prlimit,
      [...rlimitArgs(limits, input.runtime === 'python' ? GiB : interp.wasmBoundsChecks ? 4 * GiB : null), '--', tools.bwrap, '--args', '4', '--', ...command],
      {
        cwd: workDir,
        env: { PATH: '/usr/bin:/bin' },
        detached: true,
        // 0 none, 1/2 output, 3 bootstrap status events, 4 bwrap options, 5 bwrap info (sandbox pid)
        stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe', 'pipe'],
        ...(id.setuid ? { uid: owner.uid, gid: owner.gid } : {}),
      },
    )
    const argsPipe = child.stdio[4] as NodeJS.WritableStream | null
    argsPipe?.on('error', () => {})
    argsPipe?.end(`${opts.join('\0')}\0`)

    const out = new Capture(stdoutCap)
    const err = new Capture(stderrCap)
    let stop: 'cancelled' | 'timed_out' | 'output_limit' | null = null
    let timer: NodeJS.Timeout | undefined
    let exited = false
    // The host pid of the sandbox's pid 1 (bwrap --info-fd). Killing it kills the whole pid
    // namespace and lets bwrap reap it and exit; killing bwrap itself would leave that init as
    // a zombie for the host's pid 1 to reap (and count against the uid's RLIMIT_NPROC).
    let sandboxPid: number | null = null
    let info = ''
    const infoPipe = (child.stdio as unknown as Array<NodeJS.ReadableStream | null>)[5] ?? null
    infoPipe?.on('error', () => {})
    infoPipe?.on('data', (b: Buffer) => {
      if (info.length < 4096) info += b.toString('utf8')
      const m = /"child-pid"\s*:\s*(\d+)/.exec(info)
      if (m && sandboxPid === null) {
        sandboxPid = Number(m[1])
        if (stop) kill(stop, true)
      }
    })
    const killGroup = () => {
      try {
        if (child.pid && !exited) process.kill(-child.pid, 'SIGKILL') // --die-with-parent takes the rest
      } catch {
        /* already gone */
      }
    }
    const kill = (why: NonNullable<typeof stop>, again = false) => {
      if (stop && !again) return
      stop = why
      if (sandboxPid !== null) {
        try {
          process.kill(sandboxPid, 'SIGKILL')
        } catch {
          /* already gone */
        }
        setTimeout(killGroup, 1000).unref() // backstop
      } else if (!again) {
        setTimeout(killGroup, 200).unref() // not set up yet: give bwrap a moment to report its pid
      }
    }
    const arm = (ms: number) => {
      clearTimeout(timer)
      timer = setTimeout(() => kill('timed_out'), ms)
    }
    arm((deps.length ? installTimeoutSec * 1000 : 10_000) + maxRuntimeMs)
    const onAbort = () => kill('cancelled')
    input.signal?.addEventListener('abort', onAbort, { once: true })

    child.stdout?.on('data', (b: Buffer) => {
      if (out.push(b)) kill('output_limit')
    })
    child.stderr?.on('data', (b: Buffer) => {
      if (err.push(b)) kill('output_limit')
    })

    // --- status events from the bootstrap (fd 3), timed with our own clock
    let installStart: number | null = null
    let installEnd: number | null = null
    let reportedVersion: string | null = null
    let programStarted = false
    let statusBuf = ''
    const status = child.stdio[3] as NodeJS.ReadableStream | null
    status?.on('error', () => {})
    status?.on('data', (chunk: Buffer) => {
      if (programStarted || statusBuf.length > 64 * KiB) return
      statusBuf += chunk.toString('utf8')
      let nl: number
      while (!programStarted && (nl = statusBuf.indexOf('\n')) >= 0) {
        const line = statusBuf.slice(0, nl)
        statusBuf = statusBuf.slice(nl + 1)
        let ev: { event?: string; version?: string }
        try {
          ev = JSON.parse(line)
        } catch {
          continue
        }
        const now = clock()
        if (ev.event === 'hello' && typeof ev.version === 'string' && reportedVersion === null) reportedVersion = ev.version.slice(0, 40)
        else if (ev.event === 'install_start' && installStart === null) installStart = now
        else if (ev.event === 'install_done' && installStart !== null && installEnd === null) {
          installEnd = now
          proxy.revokeAllow()
        } else if (ev.event === 'program_start') {
          programStarted = true
          proxy.revokeAllow()
          if (installStart !== null && installEnd === null) installEnd = now
          if (!stop) arm(maxRuntimeMs)
        }
      }
    })

    const [code, sig] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
      let exit: [number | null, NodeJS.Signals | null] = [null, null]
      let settled = false
      const settle = () => {
        if (!settled) {
          settled = true
          resolve(exit)
        }
      }
      child.once('error', (e) => {
        err.push(Buffer.from(`agent-gateway: cannot start sandbox: ${e.message}\n`))
        exit = [null, null]
        settle()
      })
      child.once('exit', (c, s) => {
        exited = true
        exit = [c, s]
        // Everything in the sandbox died with bwrap; give the pipes a moment to drain.
        setTimeout(() => {
          child.stdout?.destroy()
          child.stderr?.destroy()
          settle()
        }, 2000).unref()
      })
      child.once('close', (c, s) => {
        exit = [c, s]
        settle()
      })
    })
    clearTimeout(timer)
    input.signal?.removeEventListener('abort', onAbort)
    const finishedAtMs = clock()

    let exitCode = code
    let signal: string | null = sig
    if (exitCode !== null && exitCode > 128 && exitCode <= 128 + 64) {
      signal = signalName(exitCode - 128) // bwrap reports death by signal N as exit 128+N
      if (signal) exitCode = null
      else signal = null
    }
    let outcome: SandboxOutcome
    if (stop) outcome = stop
    else if (exitCode === 0) outcome = 'succeeded'
    else if (signal === 'SIGXCPU') outcome = 'timed_out'
    else if (signal === 'SIGKILL' || OOM_SIGNS.test(err.tail(4096))) outcome = 'killed_oom'
    else outcome = 'failed'

    return {
      exitCode,
      signal,
      outcome,
      stdout: out.text('stdout'),
      stderr: err.text('stderr'),
      stdoutBytes: out.total,
      stderrBytes: err.total,
      startedAt: new Date(startedAtMs),
      finishedAt: new Date(finishedAtMs),
      durationMs: finishedAtMs - startedAtMs,
      installDurationMs: installStart === null ? 0 : (installEnd ?? finishedAtMs) - installStart,
      runtimeVersion: reportedVersion ? `${input.runtime} ${reportedVersion}` : runtimeVersion,
    }
  } finally {
    await proxy.close().catch(() => {})
    await rm(workDir, { recursive: true, force: true }).catch(() => {})
    id.release()
  }
}

export type SandboxProbeResult = { ok: true } | { ok: false; reason: string; output: string; timedOut: boolean }

/**
 * Starts one trivial sandbox (`prlimit --core=0 -- bwrap <the run's namespace and mount flags> --
 * true`) as a run would: as a per-run uid when the service is root, since a root-owned bwrap may
 * create user namespaces where the unprivileged run uids may not. Catches what the tools' presence
 * does not: user namespaces disabled by sysctl, AppArmor or a container's seccomp profile, and a
 * bwrap too old for the run's flags. About 5 ms.
 */
export async function probeSandbox(tools: { bwrap: string; prlimit: string }, options: { uidBase?: number; timeoutMs?: number } = {}): Promise<SandboxProbeResult> {
  systemMountsCache ??= systemMounts()
  const mounts = await systemMountsCache
  const id = acquireIdentity(options.uidBase ?? DEFAULT_UID_BASE)
  const timeoutMs = options.timeoutMs ?? 5000
  try {
    const args = [
      '--core=0',
      '--',
      tools.bwrap,
      ...SANDBOX_IDENTITY_ARGS,
      ...mounts,
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      '--remount-ro',
      '/',
      '--chdir',
      '/tmp',
      '--clearenv',
      '--setenv',
      'PATH',
      '/usr/bin:/bin',
      '--',
      'true',
    ]
    return await new Promise<SandboxProbeResult>((resolve) => {
      execFile(
        tools.prlimit,
        args,
        {
          cwd: '/',
          env: { PATH: '/usr/bin:/bin' },
          timeout: timeoutMs,
          killSignal: 'SIGKILL',
          maxBuffer: 64 * KiB,
          ...(id.setuid ? { uid: id.uid, gid: id.gid } : {}),
        },
        (error, stdout, stderr) => {
          if (!error) return resolve({ ok: true })
          const output = `${stderr}${stdout}`.trim().slice(0, 2000)
          const timedOut = (error as { killed?: boolean }).killed === true
          const firstLine = output.split('\n').find((line) => line.trim()) ?? ''
          const reason = timedOut ? `a trivial bwrap sandbox did not finish within ${timeoutMs} ms` : `bwrap cannot create a sandbox here: ${firstLine || error.message}`
          resolve({ ok: false, reason, output, timedOut })
        },
      )
    })
  } finally {
    id.release()
  }
}

/** True when a sandbox can start here (tools on PATH, and one trivial sandbox starts). */
export async function sandboxAvailable(): Promise<{ ok: true } | { ok: false; reason: string }> {
  const tools = await sandboxTools()
  if ('missing' in tools) return { ok: false, reason: tools.missing }
  const probe = await probeSandbox(tools)
  return probe.ok ? { ok: true } : { ok: false, reason: probe.reason }
}
