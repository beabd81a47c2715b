// Preinstalled node libraries in the local sandbox (SandboxOptions.nodeLibsDir /
// AGW_SANDBOX_NODE_LIBS): the dir is bound read-only at /node_modules, where both `import` and
// `require` from /work/script find it, after the task's own dependencies. A stand-in library is
// used here (the real set comes from runner-image/node/package.json, see docs/sandbox.md).
import t from 'tap'
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { runInSandbox, sandboxAvailable, SENTINEL } from '../../controllers/local/sandbox.ts'

const available = await sandboxAvailable()

t.test('a library in nodeLibsDir is importable and requirable, read-only', { skip: available.ok ? false : available.reason }, async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), 'agw-node-libs-test-'))
  await chmod(root, 0o755)
  t.teardown(() => rm(root, { recursive: true, force: true }))
  const libs = path.join(root, 'node_modules')
  await mkdir(path.join(libs, 'axios'), { recursive: true })
  await writeFile(path.join(libs, 'axios', 'package.json'), JSON.stringify({ name: 'axios', version: '0.0.0-stand-in', main: 'index.js' }))
  await writeFile(path.join(libs, 'axios', 'index.js'), "module.exports = { standIn: 'preinstalled axios' }\n")
  await chmod(path.join(libs), 0o755)
  await chmod(path.join(libs, 'axios'), 0o755)
  const workRoot = path.join(root, 'work')
  await mkdir(workRoot, { mode: 0o711 })
  await chmod(workRoot, 0o711)

  const source = [
    "import axios from 'axios'",
    "import { createRequire } from 'node:module'",
    "import { writeFileSync } from 'node:fs'",
    'const require = createRequire(import.meta.url)',
    "let writable = true; try { writeFileSync('/node_modules/x', '') } catch { writable = false }",
    "console.log(JSON.stringify({ imported: axios.standIn, required: require('axios').standIn, writable }))",
  ].join('\n')
  const input = { runId: 'node-libs', runtime: 'node' as const, entrypoint: 'main.mjs', source, env: {}, dependencies: [], maxRuntimeSec: 20 }
  const result = await runInSandbox(input, { workRoot, nodeLibsDir: libs })
  t.equal(result.outcome, 'succeeded', result.stderr.slice(-800))
  const program = result.stdout.slice(result.stdout.indexOf(SENTINEL) + SENTINEL.length).trim()
  t.same(JSON.parse(program), { imported: 'preinstalled axios', required: 'preinstalled axios', writable: false })

  const without = await runInSandbox({ ...input, runId: 'no-node-libs' }, { workRoot })
  t.equal(without.outcome, 'failed', 'without the dir the import fails, as before')
  t.match(without.stderr, /Cannot find package 'axios'|ERR_MODULE_NOT_FOUND/)

  await t.rejects(
    runInSandbox({ ...input, runId: 'bad-node-libs' }, { workRoot, nodeLibsDir: path.join(root, 'missing') }),
    /preinstalled node libraries: .* is not a directory/,
    'a configured dir that is missing is an error, not silently ignored',
  )
})
