#!/usr/bin/env node
// Launcher: the project runs on Node 24 (installed from npm as a devDependency). When started
// by an older system node, re-exec with the project's own Node so `agent-gateway` just works.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const major = Number(process.versions.node.split('.')[0])
if (major < 24) {
  const projectNode = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(projectNode)) {
    console.error(`agent-gateway needs Node >= 24 (this is ${process.version}); run \`npm install\` to fetch it.`)
    process.exit(1)
  }
  const result = spawnSync(projectNode, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' })
  process.exit(result.status ?? 1)
}

const { main } = await import('../src/cli.ts')
process.exitCode = await main(process.argv.slice(2))
// Anything still holding the event loop after a clean stop (a stuck socket, a library timer)
// must not keep a stopped service alive.
setTimeout(() => process.exit(process.exitCode ?? 0), 2000).unref()
