#!/usr/bin/env node
// Launcher: the project runs on Node 24 (installed from npm as a devDependency). When started
// by an older system node, re-exec with the project's own Node so `agent-gateway` just works; where
// that node cannot replace itself (before 22.15), it runs the service as a child and stands in for
// it (signals passed on, the child's exit status returned; see runAsChild).
import { spawn } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { constants } from 'node:os'
import { fileURLToPath } from 'node:url'

// V8 flags the service always runs with. --no-memory-reducer: once a process has idled for ~8 s,
// V8's memory reducer shrinks its heap, young generation included, and under load the young
// generation stays small: every request then pays for many more scavenges, each scanning a large
// old generation (PGlite, payments, catalog), and allocation sites get pretenured. Measured on the
// gateway role: a hello-world route in the same process went from 10 to 15 µs of CPU per request
// (docs/architecture.md; docs/BENCHMARKS.md, discovery surface). A server keeps its heap between
// bursts instead.
//
// --max-semi-space-size=16: the young generation's two halves, 16 MB each at most. Without it they
// grow to 64 MB each during start-up (module loading and PGlite's start keep much of what they
// allocate, which is what grows them) and, the memory reducer being off, stay that size: about
// 100 MB of idle memory. 16 MB still holds the short-lived objects of thousands of requests
// between scavenges (docs/BENCHMARKS.md, "Startup and idle memory").
const V8_FLAGS = ['--no-memory-reducer', '--max-semi-space-size=16']

// Environment the service always runs with (unless set otherwise). MALLOC_TRIM_THRESHOLD_: glibc's
// malloc keeps freed memory and, after a large block is freed, raises its mmap threshold so that
// later large blocks stay in its arenas too. Start-up frees a lot (PGlite's WebAssembly compiled by
// V8's background threads, the role modules' sources): with a fixed threshold of 128 KiB it goes back
// to the kernel, about 60 MB of idle resident memory (docs/BENCHMARKS.md, "Startup and idle memory").
// Ignored where the C library is not glibc.
const SERVICE_ENV = { MALLOC_TRIM_THRESHOLD_: '131072' }

// Set by a launcher that runs the service as its child (below) to its own pid.
const LAUNCHER_ENV = 'AGENT_GATEWAY_LAUNCHER_PID'
const FORWARDED_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP']

const argv = process.argv.slice(2)
// Commands that print and exit serve nothing: no V8 flags, no environment, no re-exec on Node 24.
const printsOnly = argv.some((arg) => arg === '--help' || arg === '-h' || arg === '--version' || arg === '-v') || argv[0] === 'config'

if (argv.length === 1 && (argv[0] === '--version' || argv[0] === '-v')) {
  // Answered here, on whatever Node started the launcher: the service is not loaded for it.
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
  process.stdout.write(`${pkg.version}\n`)
} else {
  await launch()
}

async function launch() {
  const serviceEnv = { ...process.env }
  for (const [name, value] of Object.entries(SERVICE_ENV)) serviceEnv[name] ??= value
  const major = Number(process.versions.node.split('.')[0])
  if (major < 24) {
    const projectNode = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
    if (!existsSync(projectNode)) {
      console.error(`agent-gateway needs Node >= 24 (this is ${process.version}); run \`npm install\` to fetch it.`)
      process.exit(1)
    }
    const args = [...(printsOnly ? [] : V8_FLAGS), fileURLToPath(import.meta.url), ...argv]
    const env = printsOnly ? process.env : serviceEnv
    // Node 22.15+ / 23.11+: become the project's Node in place (same pid, signals and exit codes).
    if (typeof process.execve === 'function') {
      try {
        process.execve(projectNode, [projectNode, ...args], env)
      } catch {
        // Refused here: run it as a child instead.
      }
    }
    await runAsChild(projectNode, args, env)
  }
  // Started without the flags or the environment (`node bin/agent-gateway.js`, the npm bin link, a
  // container command): replace this process with one that has them. Same pid, so signals and exit
  // codes are untouched.
  // A flag counts as given when its name is (an operator's own `--max-semi-space-size=32` stays).
  const given = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)].map((arg) => arg.split('=')[0])
  const missingFlags = V8_FLAGS.filter((flag) => !given.includes(flag.split('=')[0]))
  const missingEnv = Object.keys(SERVICE_ENV).filter((name) => process.env[name] === undefined)
  if (!printsOnly && (missingFlags.length > 0 || missingEnv.length > 0) && typeof process.execve === 'function') {
    try {
      process.execve(process.execPath, [process.execPath, ...missingFlags, ...process.execArgv, fileURLToPath(import.meta.url), ...argv], serviceEnv)
    } catch (error) {
      // Not available here (Windows, a worker): run as started, only slower under load after idling.
      console.error(`agent-gateway: running without ${V8_FLAGS.join(' ')} (${error.message})`)
    }
  }

  if (process.env[LAUNCHER_ENV] !== undefined) watchLauncher()

  // Node's compile cache (os.tmpdir()/node-compile-cache, or NODE_COMPILE_CACHE): the TypeScript
  // sources stripped of their types and V8's code for every module, reused by the next start
  // instead of stripped and compiled again. Keyed by each file's contents and the Node version.
  const { enableCompileCache } = await import('node:module')
  enableCompileCache?.()

  const { main } = await import('../src/cli.ts')
  process.exitCode = await main(argv)
  // Anything still holding the event loop after a clean stop (a stuck socket, a library timer)
  // must not keep a stopped service alive.
  setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref()
}
/**
 * The service as a child of this launcher, where the launcher cannot replace itself (Node < 22.15).
 * The launcher stands in for it: SIGTERM, SIGINT and SIGHUP are passed on (a second one, a user
 * insisting, kills it as it would kill a service started directly), and the launcher ends as the
 * child did, with its exit code or by its signal. The child watches the launcher through an IPC
 * channel (watchLauncher): a launcher gone (SIGKILL) makes it shut down as on SIGTERM.
 */
function runAsChild(node, args, env) {
  const child = spawn(node, args, { stdio: ['inherit', 'inherit', 'inherit', 'ipc'], env: { ...env, [LAUNCHER_ENV]: String(process.pid) } })
  let received = 0
  const forward = (signal) => {
    received += 1
    if (child.exitCode === null && child.signalCode === null) child.kill(received === 1 ? signal : 'SIGKILL')
  }
  for (const signal of FORWARDED_SIGNALS) process.on(signal, forward)
  return new Promise(() => {
    child.once('error', (error) => {
      console.error(`agent-gateway: cannot run ${node}: ${error.message}`)
      process.exit(1)
    })
    child.once('exit', (code, signal) => {
      for (const name of FORWARDED_SIGNALS) process.off(name, forward)
      if (signal !== null) {
        process.kill(process.pid, signal)
        process.exit(128 + (constants.signals[signal] ?? 0)) // a signal this process survives by default
      }
      process.exit(code ?? 1)
    })
  })
}

/**
 * In the child of runAsChild. Signals may come twice (a terminal's Ctrl-C reaches the launcher's
 * whole process group, and the launcher passes it on): once the service is stopping (src/cli.ts
 * handles the first SIGTERM/SIGINT) a repeat is ignored; before it serves, a signal does what it
 * would do to any process. When the launcher is gone, the service stops as on SIGTERM.
 */
function watchLauncher() {
  const launcher = process.env[LAUNCHER_ENV]
  delete process.env[LAUNCHER_ENV] // not for the processes this one starts (sandboxes, the dev chain)
  let stopping = false
  const once = (signal) => {
    if (stopping) return
    if (process.listenerCount(signal) > 1) {
      stopping = true // the service's own handler, called next, stops it
      return
    }
    process.off(signal, once)
    process.kill(process.pid, signal)
  }
  process.on('SIGTERM', once)
  process.on('SIGINT', once)
  if (process.channel) {
    process.channel.unref() // the channel alone never keeps the service alive
    process.once('disconnect', () => {
      console.error(`agent-gateway: the launcher (pid ${launcher}) is gone; shutting down`)
      process.kill(process.pid, 'SIGTERM')
    })
  }
}
