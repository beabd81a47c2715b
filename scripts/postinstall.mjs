// The project's postinstall (npm runs it after `npm install` and `npm ci`): one line saying what the
// install fetched besides JavaScript (the project's Node 24, the local dev chain's anvil) and whether
// the optional local-model runtime is there; and, when npm itself ran on an older Node than some
// packages declare, one more line saying that their EBADENGINE warnings above need no action
// because those packages run on the Node 24 that was just installed (checked, not assumed).
//
// Plain JavaScript for any Node that runs npm (it runs on the project's Node when that was
// installed, on the system's otherwise). It reads a few files and asks npm's Node for its version:
// quick (~0.1 s), offline, and it never fails the install (any error ends it silently, status 0).
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync, realpathSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const MODULES = path.join(ROOT, 'node_modules')

function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'))
  } catch {
    return undefined
  }
}

function installedVersion(name) {
  return readJson(path.join(MODULES, name, 'package.json'))?.version
}

/** The project's Node (the `node` devDependency), when its binary is there. */
function projectNode() {
  const version = installedVersion('node')
  const binary = path.join(MODULES, 'node', 'bin', process.platform === 'win32' ? 'node.exe' : 'node')
  return version !== undefined && existsSync(binary) ? version : undefined
}

function anvil() {
  const version = installedVersion('@foundry-rs/anvil')
  if (version === undefined) return undefined
  const os = { linux: 'linux', darwin: 'darwin', win32: 'win32' }[process.platform]
  const cpu = { x64: 'amd64', arm64: 'arm64' }[process.arch]
  const exe = process.platform === 'win32' ? 'anvil.exe' : 'anvil'
  // The platform package, or the binary anvil's own postinstall downloads when that is missing.
  const found = (os && cpu && existsSync(path.join(MODULES, '@foundry-rs', `anvil-${os}-${cpu}`, 'bin', exe))) || existsSync(path.join(MODULES, '@foundry-rs', 'anvil', exe))
  return found ? `anvil ${version} (local dev chain)` : `anvil ${version} without a binary for ${process.platform}-${process.arch} (no local dev chain)`
}

function summary(node) {
  const fetched = []
  if (node !== undefined) fetched.push(`Node ${node} (node_modules/node; npm scripts and bin/agent-gateway.js run on it)`)
  const chain = anvil()
  if (chain !== undefined) fetched.push(chain)
  const transformers = installedVersion('@huggingface/transformers')
  const localModels =
    transformers === undefined
      ? 'Local ONNX embedding models: off (optional: `npm run install:local-models` adds them)'
      : `Local ONNX embedding models: on (@huggingface/transformers ${transformers})`
  const next = node !== undefined ? '. Next: `npm start`' : ''
  return `agent-gateway: fetched ${fetched.join(' and ') || 'no binaries'}. ${localModels}${next}`
}

/**
 * When npm ran on a Node older than some installed packages declare (it checks `engines` against
 * its own Node and warns EBADENGINE), and the project's Node satisfies every one of them: a line
 * saying so. Uses npm's own semver, found beside the running npm; nothing when anything is missing.
 */
function enginesNote(node) {
  const npmNode = npmNodeVersion()
  if (node === undefined || npmNode === undefined || npmNode === node || !process.env.npm_execpath) return undefined
  let semver
  try {
    semver = createRequire(process.env.npm_execpath)('semver')
  } catch {
    return undefined
  }
  const lock = readJson(path.join(ROOT, 'package-lock.json'))
  const warned = []
  for (const [location, entry] of Object.entries(lock?.packages ?? {})) {
    const range = entry?.engines?.node
    // npm skips the root (package.json has devEngines) and optional packages; a package that was
    // not installed (--omit=dev) was not checked either.
    if (location === '' || entry.optional || typeof range !== 'string' || !existsSync(path.join(ROOT, location))) continue
    if (semver.satisfies(npmNode, range, { includePrerelease: true })) continue
    if (!semver.satisfies(node, range, { includePrerelease: true })) return undefined // a real mismatch: npm's warning stands
    warned.push(location.slice(location.lastIndexOf('node_modules/') + 'node_modules/'.length))
  }
  if (warned.length === 0) return undefined
  const which = warned.length === 1 ? `1 package (${warned[0]}) that needs` : `${warned.length} packages that need`
  return `agent-gateway: npm itself ran on Node ${npmNode}, so it warned (EBADENGINE) about ${which} a newer one; they run on Node ${node} from node_modules/node, which satisfies them: nothing to do.`
}

/** The version of the Node that runs this npm (npm_node_execpath: the npm of an `npm run` script runs on the project's Node). */
function npmNodeVersion() {
  const execPath = process.env.npm_node_execpath
  if (!execPath) return undefined
  if (realpathSync(execPath) === realpathSync(process.execPath)) return process.versions.node
  return execFileSync(execPath, ['-p', 'process.versions.node'], { encoding: 'utf8', timeout: 5000 }).trim()
}

try {
  // `npm install --package-lock-only` and `--dry-run` run it too, having installed nothing.
  if (process.env.npm_config_package_lock_only === 'true' || process.env.npm_config_dry_run === 'true') process.exit(0)
  const node = projectNode()
  console.log(summary(node))
  const note = enginesNote(node)
  if (note !== undefined) console.log(note)
} catch {
  // A summary is not worth a failed install.
}
process.exitCode = 0
