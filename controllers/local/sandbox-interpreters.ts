// The interpreters runs use (python, node), found and probed once per process, and the optional
// dir of preinstalled node libraries.

import { execFile } from 'node:child_process'
import { access, realpath, stat } from 'node:fs/promises'
import path from 'node:path'
import { notSearchable } from './sandbox-identity.ts'
import type { SandboxOptions } from './sandbox-input.ts'
import { isExecutable, SandboxUnavailableError, which } from './sandbox-tools.ts'

export interface Interpreter {
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

/**
 * One child per candidate: its version, real path and which of the flags it accepts in
 * NODE_OPTIONS (where runs get them), read from process.allowedNodeEnvironmentFlags.
 */
const NODE_FLAGS = ['--disable-wasm-trap-handler', '--use-openssl-ca']

async function probeNode(candidate: string): Promise<Interpreter | null> {
  const out = await probe(candidate, [
    '-p',
    `JSON.stringify([process.versions.node, process.execPath, ${JSON.stringify(NODE_FLAGS)}.filter((flag) => process.allowedNodeEnvironmentFlags.has(flag))])`,
  ])
  if (!out) return null
  const [version, executable, flags] = JSON.parse(out) as [string, string, string[]]
  const bin = await realpath(executable)
  const prefix = path.dirname(path.dirname(bin))
  const npmCli = path.join(prefix, 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js')
  const hasNpm = await access(npmCli).then(
    () => true,
    () => false,
  )
  const outside = !SYSTEM_PREFIX.test(bin)
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

/** By runtime and override; a failed lookup is dropped so the next run looks again. */
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
      // Every candidate probed at once (a pyenv shim alone takes ~0.2 s to say it has no such
      // version), then taken in the order above.
      const unique = [...new Set(candidates)].filter((c): c is string => Boolean(c))
      const probed = await Promise.all(
        unique.map(async (c) => {
          if (!(await isExecutable(c))) return null
          const it = runtime === 'python' ? await probePython(c) : await probeNode(c)
          return it ? { it, blocked: await notSearchable(it.mounts[0] ?? it.bin) } : null
        }),
      )
      const found: Interpreter[] = []
      const skipped: string[] = []
      for (const candidate of probed) {
        if (!candidate) continue
        const { it, blocked } = candidate
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
