// The one way the media role runs its tools (ffmpeg, ffprobe, fluidsynth, espeak-ng): argument
// arrays and never a shell, bounded time and output, the stderr tail kept for the error, and a
// missing binary reported as GenerationError('unavailable') with the command that installs it.
import { spawn } from 'node:child_process'
import path from 'node:path'
import { GenerationError } from '../types.ts'

/** ffmpeg's own hygiene: never read the console, no banner, errors only. */
export const FFMPEG_QUIET = ['-nostdin', '-hide_banner', '-loglevel', 'error'] as const
/** ffprobe has no -nostdin (it never reads the console). */
export const FFPROBE_QUIET = ['-hide_banner', '-loglevel', 'error'] as const

/** Debian/Ubuntu packages of each tool (the `fix` of a missing one). */
export const TOOL_PACKAGES: Record<string, string> = {
  ffmpeg: 'ffmpeg',
  ffprobe: 'ffmpeg',
  fluidsynth: 'fluidsynth',
  'espeak-ng': 'espeak-ng',
}

export interface RunOptions {
  /** Bytes written to the child's stdin, then closed; without it stdin is /dev/null. */
  stdin?: Uint8Array
  /** Aborting kills the child and rejects with the signal's reason. */
  signal?: AbortSignal
  /** Wall-clock budget; past it the child is killed and GenerationError('timeout') thrown. Default 120 s. */
  timeoutMs?: number
  /** SIGTERM first, SIGKILL this long after. Default 2 s. */
  killGraceMs?: number
  /** More stdout than this kills the child (a runaway decode must not fill memory). Default 64 MiB. */
  maxStdoutBytes?: number
  /** How much of stderr to keep for the error message. Default 4 KiB. */
  stderrTailBytes?: number
  cwd?: string
  env?: NodeJS.ProcessEnv
}

export interface RunResult {
  stdout: Buffer
  /** The last stderrTailBytes of stderr (warnings of a successful run). */
  stderr: string
}

/** Installs-with hint for a binary given by name or path. */
export function installHint(binary: string): string {
  const name = path.basename(binary)
  const pkg = TOOL_PACKAGES[name]
  return pkg ? `apt-get install -y ${pkg}` : `install ${name} or configure its path`
}

/**
 * Runs `binary args…` and resolves with its stdout when it exits 0. Rejects with
 * GenerationError('unavailable') when the binary does not exist, GenerationError('timeout') past
 * timeoutMs, the signal's reason when aborted, and a plain Error carrying the stderr tail otherwise.
 */
export function runTool(binary: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const timeoutMs = options.timeoutMs ?? 120_000
  const killGraceMs = options.killGraceMs ?? 2000
  const maxStdout = options.maxStdoutBytes ?? 64 * 1024 * 1024
  const tailBytes = options.stderrTailBytes ?? 4096
  const name = path.basename(binary)
  const signal = options.signal

  return new Promise<RunResult>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason)
    const child = spawn(binary, [...args], {
      stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      shell: false,
      windowsHide: true,
      // Its own process group, so a kill reaches whatever it started too.
      detached: process.platform !== 'win32',
      ...(options.cwd ? { cwd: options.cwd } : {}),
      ...(options.env ? { env: options.env } : {}),
    })
    const chunks: Buffer[] = []
    let stdoutBytes = 0
    let stderrTail = Buffer.alloc(0)
    let failure: unknown
    let settled = false
    let killTimer: NodeJS.Timeout | undefined

    const signalGroup = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined && process.platform !== 'win32') process.kill(-child.pid, sig)
        else child.kill(sig)
      } catch {
        child.kill(sig) // the group is gone already
      }
    }
    const kill = (why: unknown) => {
      failure ??= why
      if (child.exitCode !== null || child.signalCode !== null) return
      signalGroup('SIGTERM')
      killTimer ??= setTimeout(() => signalGroup('SIGKILL'), killGraceMs)
      killTimer.unref()
    }
    const timer = setTimeout(() => kill(new GenerationError('timeout', `${name} did not finish within ${timeoutMs} ms`)), timeoutMs)
    timer.unref()
    const onAbort = () => kill(signal?.reason ?? new Error(`${name} aborted`))
    signal?.addEventListener('abort', onAbort, { once: true })

    const finish = (error: unknown, result?: RunResult) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (killTimer) clearTimeout(killTimer)
      signal?.removeEventListener('abort', onAbort)
      if (error !== undefined) reject(error)
      else resolve(result as RunResult)
    }
    const tail = () => stderrTail.toString('utf8').trim()

    child.stdout!.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length
      if (stdoutBytes > maxStdout) return kill(new Error(`${name} wrote more than ${maxStdout} bytes of output; stopped`))
      chunks.push(chunk)
    })
    child.stderr!.on('data', (chunk: Buffer) => {
      stderrTail = Buffer.concat([stderrTail, chunk])
      if (stderrTail.length > tailBytes) stderrTail = stderrTail.subarray(stderrTail.length - tailBytes)
    })
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'EACCES') {
        const what = error.code === 'ENOENT' ? 'is not installed' : 'is not executable'
        finish(new GenerationError('unavailable', `${name} ${what} (${binary}: ${error.code}); fix: ${installHint(binary)}`, { cause: error }))
      } else {
        finish(new Error(`${name} could not be started: ${error.message}`, { cause: error }))
      }
    })
    // Once we killed it, do not wait for its pipes: a stray grandchild may hold them open.
    child.on('exit', () => {
      if (failure === undefined) return
      child.stdout?.destroy()
      child.stderr?.destroy()
      finish(failure)
    })
    child.on('close', (code, killedBy) => {
      if (failure !== undefined) return finish(failure)
      if (code === 0) return finish(undefined, { stdout: Buffer.concat(chunks, Math.min(stdoutBytes, maxStdout)), stderr: tail() })
      const how = code === null ? `was killed by ${killedBy}` : `exited with code ${code}`
      finish(new Error(`${name} ${how}${tail() ? `: ${tail()}` : ''}`))
    })
    if (options.stdin && child.stdin) {
      // The child may exit before reading everything (a bad input); its close event says why.
      child.stdin.on('error', () => {})
      child.stdin.end(options.stdin)
    }
  })
}

/** runTool for ffmpeg with the quiet flags first. */
export function runFfmpeg(binary: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  return runTool(binary, [...FFMPEG_QUIET, ...args], options)
}

/** runTool for ffprobe with the quiet flags first. */
export function runFfprobe(binary: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  return runTool(binary, [...FFPROBE_QUIET, ...args], options)
}
