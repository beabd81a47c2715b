// Local sandbox executor: one run of a task script in a fresh bubblewrap sandbox.
//
//   prlimit (rlimits) → bwrap (namespaces, mounts, uid 65534, no caps, no network)
//     → python3 -I /agw/bootstrap.py | node /agw/bootstrap.mjs   (runner-image/bootstrap/)
//       → install dependencies → sentinel line → user entrypoint
//
// The sandbox's only way out is the per-run egress proxy (src/platform/egress-proxy.ts) on a
// unix socket bind-mounted at /agw/proxy.sock; the bootstrap forwards 127.0.0.1:3128 inside the
// sandbox to it, and HTTP(S)_PROXY point there. See docs/sandbox.md for the threat model and
// what is not isolated.
//
// The executor's parts are sandbox-{input,tools,interpreters,identity,args,capture,probe}.ts
// beside this file (controllers/README.md); this module runs one sandbox and re-exports what
// callers outside controllers/local/ use.

import { spawn } from 'node:child_process'
import { chown, copyFile, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { createEgressProxy } from '../../src/platform/egress-proxy.ts'
import { PROXY_PORT, rlimitArgs, runBwrapArgs, SANDBOX_UID, sandboxEnv } from './sandbox-args.ts'
import { Capture, OOM_SIGNS, signalName } from './sandbox-capture.ts'
import { acquireIdentity, checkWorkRoot, DEFAULT_UID_BASE } from './sandbox-identity.ts'
import { resolveLimits, validateRunInput } from './sandbox-input.ts'
import type { SandboxOptions, SandboxRunInput } from './sandbox-input.ts'
import { preinstalledNodeLibs, resolveInterpreter } from './sandbox-interpreters.ts'
import { SandboxUnavailableError, sandboxTools } from './sandbox-tools.ts'
import { writeOwnerMarker } from './workdirs.ts'

export { PROXY_PORT, SANDBOX_UID } from './sandbox-args.ts'
export { checkWorkRoot } from './sandbox-identity.ts'
export { MAX_SOURCE_BYTES, SandboxInputError } from './sandbox-input.ts'
export type { SandboxLimits, SandboxOptions, SandboxRunInput } from './sandbox-input.ts'
export { preinstalledNodeLibs, resolveInterpreter } from './sandbox-interpreters.ts'
export { probeSandbox, sandboxAvailable } from './sandbox-probe.ts'
export type { SandboxProbeResult } from './sandbox-probe.ts'
export { FALLBACK_TOOL_DIRS, findTool, SandboxUnavailableError, sandboxTools } from './sandbox-tools.ts'

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

export const SENTINEL = '=== agent-gateway: program output follows ==='

const KiB = 1024
const GiB = 1024 * 1024 * KiB

const BOOTSTRAP_DIR = fileURLToPath(new URL('../../runner-image/bootstrap/', import.meta.url))

export async function runInSandbox(input: SandboxRunInput, options: SandboxOptions = {}): Promise<SandboxRunResult> {
  validateRunInput(input)
  const clock = options.clock ?? Date.now
  const tools = await sandboxTools()
  if ('missing' in tools) throw new SandboxUnavailableError(tools.missing)
  const interp = await resolveInterpreter(input.runtime, options)
  const nodeLibs = input.runtime === 'node' ? await preinstalledNodeLibs(options) : null
  const runtimeVersion = `${input.runtime} ${interp.version}`
  const deps = input.dependencies ?? []
  const installTimeoutSec = options.installTimeoutSec ?? 300
  const maxRuntimeMs = Math.round(input.maxRuntimeSec * 1000)
  const limits = resolveLimits(input, installTimeoutSec)

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
    const env = await sandboxEnv(input, interp)
    const opts = await runBwrapArgs({ runtime: input.runtime, workDir, interp, tmpBytes: limits.tmpBytes, nodeLibs, env })
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

    const out = new Capture(limits.stdoutBytes)
    const err = new Capture(limits.stderrBytes)
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
