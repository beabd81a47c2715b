// Spawns the real CLI (bin/agent-gateway.js) on free ports and waits until it says it is ready.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url))

export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

export interface CliProcess {
  child: ChildProcess
  gateway: string
  scheduler: string
  memory: string
  /** The isolated origin of review sites (sites are at http://<label>.localhost:<port>). */
  reviews: string
  env: Record<string, string>
  output(): string
  /** Sends SIGTERM and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>
}

export interface StartCliOptions {
  args?: string[]
  env?: Record<string, string>
  dataDir?: string
  readyTimeoutMs?: number
  /** The child leads its own process group (pgid = its pid), so `process.kill(-pid)` reaches its anvil and watchdogs too. */
  detached?: boolean
}

export async function startCli(options: StartCliOptions = {}): Promise<CliProcess> {
  const [gatewayPort, schedulerPort, memoryPort, reviewsPort] = [await freePort(), await freePort(), await freePort(), await freePort()]
  const dataDir = options.dataDir ?? mkdtempSync(path.join(os.tmpdir(), 'agw-e2e-'))
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    GATEWAY_PORT: String(gatewayPort),
    SCHEDULER_PORT: String(schedulerPort),
    MEMORY_PORT: String(memoryPort),
    REVIEWS_PORT: String(reviewsPort),
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    ...options.env,
  }
  const child = spawn(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), ...(options.args ?? ['serve'])], {
    cwd: repoRoot,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached ?? false,
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`CLI not ready in time:\n${output}`)), options.readyTimeoutMs ?? 60_000)
    const check = () => {
      if (output.includes('agent-gateway ready')) {
        clearTimeout(timer)
        resolve()
      }
    }
    child.stdout?.on('data', check)
    void exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`CLI exited with ${code} before ready:\n${output}`))
    })
  })
  return {
    child,
    gateway: `http://127.0.0.1:${gatewayPort}`,
    scheduler: `http://127.0.0.1:${schedulerPort}`,
    memory: `http://127.0.0.1:${memoryPort}`,
    reviews: `http://127.0.0.1:${reviewsPort}`,
    env,
    output: () => output,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null) return child.exitCode
      child.kill(signal)
      return await exited
    },
  }
}
