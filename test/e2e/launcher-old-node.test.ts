// bin/agent-gateway.js started by a system Node older than 24 that cannot replace itself
// (process.execve arrived in 22.15): it runs the project's Node 24 as a child and stands in for it.
// SIGTERM to the launcher stops the service gracefully (port freed, data-dir lock released, both
// processes gone, exit 0); a launcher killed outright (SIGKILL) does not leave its child serving.
import t from 'tap'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { freePort, repoRoot } from '../helpers/cli.ts'

/** The first `node` on PATH older than 22.15 (no process.execve), e.g. the machine's /usr/bin/node. */
function oldNode(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/local/bin'])) {
    const candidate = path.join(dir, 'node')
    if (!existsSync(candidate)) continue
    const probe = spawnSync(candidate, ['-p', 'typeof process.execve'], { encoding: 'utf8' })
    if (probe.status === 0 && probe.stdout.trim() === 'undefined') return candidate
  }
  return undefined
}

const node = oldNode()
const projectNode = path.join(repoRoot, 'node_modules/node/bin/node')
const GRACE_MS = 10_000

/** The process is gone (or a zombie no one reaps yet: it has exited all the same). */
function exited(pid: number): boolean {
  try {
    return /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'))
  } catch {
    return true
  }
}

async function until(what: string, probe: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number> {
  const started = Date.now()
  while (!(await probe())) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return Date.now() - started
}

async function portFree(port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const server = net.createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

interface Launched {
  launcher: ChildProcess
  child: number
  port: number
  dataDir: string
  output(): string
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

async function launch(): Promise<Launched> {
  const port = await freePort()
  const reviewsPort = await freePort()
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-launcher-'))
  const launcher = spawn(node as string, [path.join(repoRoot, 'bin/agent-gateway.js'), 'gateway'], {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/tmp',
      GATEWAY_PORT: String(port),
      REVIEWS_PORT: String(reviewsPort),
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  launcher.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  launcher.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => launcher.once('exit', (code, signal) => resolve({ code, signal })))
  await until('agent-gateway ready', () => output.includes('agent-gateway ready') || launcher.exitCode !== null, 90_000)
  if (!output.includes('agent-gateway ready')) throw new Error(`the launcher exited before ready:\n${output}`)
  const children = readFileSync(`/proc/${launcher.pid}/task/${launcher.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
  if (children.length !== 1) throw new Error(`expected one child of the launcher, found ${children.join(', ') || 'none'}`)
  return { launcher, child: children[0] as number, port, dataDir, output: () => output, exit }
}

t.test(
  'started by an old Node: SIGTERM to the launcher stops the service and frees its port',
  { skip: node === undefined ? 'no node older than 22.15 on this machine' : !existsSync(projectNode) ? 'node_modules/node (Node 24) is not installed' : false },
  async (t) => {
    const run = await launch()
    t.teardown(() => {
      for (const pid of [run.child, run.launcher.pid as number]) if (!exited(pid)) process.kill(pid, 'SIGKILL')
    })
    const argv = readFileSync(`/proc/${run.child}/cmdline`, 'utf8').split('\0')
    t.equal(argv[0], projectNode, "the service runs on the project's Node 24")
    t.ok(argv.includes('--no-memory-reducer'), 'with its V8 flags')
    t.equal(readFileSync(path.join(run.dataDir, 'agent-gateway.lock'), 'utf8').trim(), String(run.child), 'the child holds the data-dir lock')
    t.equal((await fetch(`http://127.0.0.1:${run.port}/readyz`)).status, 200)

    run.launcher.kill('SIGTERM')
    const result = await Promise.race([run.exit, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), GRACE_MS + 5_000))])
    t.same(result, { code: 0, signal: null }, 'the launcher exits 0, with its child, within the grace period')
    await until('the child to exit', () => exited(run.child), 2_000)
    t.pass('the child has exited')
    t.ok(await portFree(run.port), 'the port is free')
    t.notOk(existsSync(path.join(run.dataDir, 'agent-gateway.lock')), 'the data-dir lock is released')
    t.match(run.output(), /agent-gateway ready/)
    t.notMatch(run.output(), /grace period elapsed/, 'a clean stop, not the forced one')
  },
)

t.test(
  'started by an old Node: a launcher killed outright does not leave the service running',
  { skip: node === undefined ? 'no node older than 22.15 on this machine' : !existsSync(projectNode) ? 'node_modules/node (Node 24) is not installed' : false },
  async (t) => {
    const run = await launch()
    t.teardown(() => {
      for (const pid of [run.child, run.launcher.pid as number]) if (!exited(pid)) process.kill(pid, 'SIGKILL')
    })
    run.launcher.kill('SIGKILL')
    await run.exit
    const ms = await until('the orphaned child to stop', () => exited(run.child), GRACE_MS + 5_000)
    t.pass(`the child stopped by itself ${ms} ms after its launcher died`)
    t.ok(await portFree(run.port), 'the port is free')
    t.notOk(existsSync(path.join(run.dataDir, 'agent-gateway.lock')), 'the data-dir lock is released (a graceful stop)')
    t.match(run.output(), /the launcher \(pid \d+\) is gone; shutting down/)
  },
)
