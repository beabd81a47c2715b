#!/usr/bin/env node
// Launcher: the project runs on Node 24 (installed from npm as a devDependency). When started
// by an older system node, re-exec with the project's own Node so `agent-gateway` just works.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

// V8 flags the service always runs with. --no-memory-reducer: once a process has idled for ~8 s,
// V8's memory reducer shrinks its heap, young generation included, and under load the young
// generation stays small: every request then pays for many more scavenges, each scanning a large
// old generation (PGlite, payments, catalog), and allocation sites get pretenured. Measured on the
// gateway role: a hello-world route in the same process went from 10 to 15 µs of CPU per request
// (docs/architecture.md; docs/BENCHMARKS.md, discovery surface). A server keeps its heap between
// bursts instead.
const V8_FLAGS = ['--no-memory-reducer']

const major = Number(process.versions.node.split('.')[0])
if (major < 24) {
  const projectNode = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(projectNode)) {
    console.error(`agent-gateway needs Node >= 24 (this is ${process.version}); run \`npm install\` to fetch it.`)
    process.exit(1)
  }
  const result = spawnSync(projectNode, [...V8_FLAGS, fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' })
  process.exit(result.status ?? 1)
}
// Started without the flags (`node bin/agent-gateway.js`, the npm bin link, a container command):
// replace this process with one that has them. Same pid, so signals and exit codes are untouched.
const missingFlags = V8_FLAGS.filter((flag) => !process.execArgv.includes(flag))
if (missingFlags.length > 0 && typeof process.execve === 'function') {
  try {
    process.execve(process.execPath, [process.execPath, ...missingFlags, ...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], process.env)
  } catch (error) {
    // Not available here (Windows, a worker): run as started, only slower under load after idling.
    console.error(`agent-gateway: running without ${V8_FLAGS.join(' ')} (${error.message})`)
  }
}

const { main } = await import('../src/cli.ts')
process.exitCode = await main(process.argv.slice(2))
// Anything still holding the event loop after a clean stop (a stuck socket, a library timer)
// must not keep a stopped service alive.
setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref()
