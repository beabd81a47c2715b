// The sandbox as prlimit and bwrap are told to build it: rlimits, namespaces and identity, the
// mounts and the environment a script sees. Shared by a run and the start-up probe.

import { access, lstat, readdir, readlink, realpath } from 'node:fs/promises'
import path from 'node:path'
import type { SandboxLimits, SandboxRunInput } from './sandbox-input.ts'
import type { Interpreter } from './sandbox-interpreters.ts'

/** Uid/gid the script sees inside the sandbox. */
export const SANDBOX_UID = 65534
/** In-sandbox TCP port of the bootstrap's forwarder to the egress proxy. */
export const PROXY_PORT = 3128

const MiB = 1024 * 1024

/** The namespaces, privileges and identity of every sandbox: a run's and the start-up probe's alike. */
export const SANDBOX_IDENTITY_ARGS: readonly string[] = [
  '--unshare-all',
  '--unshare-user',
  '--disable-userns',
  '--die-with-parent',
  '--new-session',
  '--cap-drop',
  'ALL',
  '--uid',
  String(SANDBOX_UID),
  '--gid',
  String(SANDBOX_UID),
  '--hostname',
  'agw-sandbox',
]

/** System dirs: merged-/usr symlinks are recreated as symlinks, real dirs are bound read-only. */
async function systemMounts(): Promise<string[]> {
  const args = ['--ro-bind', '/usr', '/usr']
  for (const p of ['/bin', '/sbin', '/lib', '/lib64', '/lib32', '/libx32']) {
    const st = await lstat(p).catch(() => null)
    if (!st) continue
    if (st.isSymbolicLink()) args.push('--symlink', await readlink(p), p)
    else if (st.isDirectory()) args.push('--ro-bind', p, p)
  }
  const etc = ['/etc/ssl', '/etc/alternatives', '/etc/resolv.conf', '/etc/ld.so.cache', '/etc/localtime']
  for (const e of await readdir('/etc').catch(() => [] as string[])) if (/^python3(\.\d+)?$/.test(e)) etc.push(`/etc/${e}`)
  for (const p of etc) {
    const real = await realpath(p).catch(() => null)
    if (real) args.push('--ro-bind', real, p)
  }
  return args
}

let systemMountsCache: Promise<string[]> | undefined

/** The system mount flags, read from the host once per process. */
export function systemMountArgs(): Promise<string[]> {
  systemMountsCache ??= systemMounts()
  return systemMountsCache
}

/**
 * prlimit flags. Memory is bounded by RLIMIT_DATA (heap + private writable mappings: what a
 * script actually fills); RLIMIT_AS adds a looser backstop against shared anonymous mappings,
 * with headroom for reservations that never hold data (a bare node 20 maps ~1.6 GB of address
 * space: V8 cages + a malloc arena per thread; python ~100 MB).
 */
export function rlimitArgs(l: Required<Omit<SandboxLimits, 'stderrBytes' | 'stdoutBytes'>>, addressSpaceHeadroom: number | null): string[] {
  return [
    `--data=${l.memoryBytes}`,
    ...(addressSpaceHeadroom !== null ? [`--as=${l.memoryBytes + addressSpaceHeadroom}`] : []),
    `--nproc=${l.pids}`,
    `--nofile=${l.openFiles}`,
    `--fsize=${l.fileBytes}`,
    `--cpu=${l.cpuSeconds}:${l.cpuSeconds + 2}`,
    '--core=0',
  ]
}

/** The run's whole environment: the task's env, then what the sandbox sets itself (not overridable). */
export async function sandboxEnv(input: SandboxRunInput, interp: Interpreter): Promise<Record<string, string>> {
  const caBundle = '/etc/ssl/certs/ca-certificates.crt'
  const hasCaBundle = await access(caBundle).then(
    () => true,
    () => false,
  )
  return {
    // The system trust store (bound read-only from the host) for every TLS client; overridable.
    ...(hasCaBundle ? { SSL_CERT_FILE: caBundle, REQUESTS_CA_BUNDLE: caBundle, PIP_CERT: caBundle } : {}),
    ...input.env,
    PATH: [...new Set([interp.binDir, '/usr/local/bin', '/usr/bin', '/bin'])].join(':'),
    HOME: '/tmp',
    TMPDIR: '/tmp',
    LANG: 'C.UTF-8',
    HTTP_PROXY: `http://127.0.0.1:${PROXY_PORT}`,
    HTTPS_PROXY: `http://127.0.0.1:${PROXY_PORT}`,
    http_proxy: `http://127.0.0.1:${PROXY_PORT}`,
    https_proxy: `http://127.0.0.1:${PROXY_PORT}`,
    NODE_USE_ENV_PROXY: '1',
    ...(interp.nodeOptions ? { NODE_OPTIONS: [interp.nodeOptions, input.env.NODE_OPTIONS].filter(Boolean).join(' ') } : {}),
    AGW_RUN_ID: input.runId,
    ...(input.helper ? { AGW_HELPER_URL: 'http://agw-helper.internal', AGW_RUN_TOKEN: input.helper.token } : {}),
  }
}

/**
 * A run's bwrap options (everything before the command). The work dir holds script/ (bound at
 * /work/script), agw/ (bootstrap, run.json, proxy socket; at /agw) and the generated etc/ files.
 */
export async function runBwrapArgs(run: {
  runtime: 'python' | 'node'
  workDir: string
  interp: Interpreter
  tmpBytes: number
  nodeLibs: string | null
  env: Record<string, string>
}): Promise<string[]> {
  const { workDir } = run
  return [
    ...SANDBOX_IDENTITY_ARGS,
    '--info-fd',
    '5',
    ...(await systemMountArgs()),
    ...run.interp.mounts.flatMap((m) => ['--ro-bind', m, m]),
    '--ro-bind',
    path.join(workDir, 'etc', 'passwd'),
    '/etc/passwd',
    '--ro-bind',
    path.join(workDir, 'etc', 'group'),
    '/etc/group',
    '--ro-bind',
    path.join(workDir, 'etc', 'hosts'),
    '/etc/hosts',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--size',
    String(64 * MiB),
    '--tmpfs',
    '/dev/shm',
    '--remount-ro',
    '/dev', // bwrap's /dev is an unsized tmpfs; device nodes and /dev/shm stay usable
    '--size',
    String(run.tmpBytes),
    '--tmpfs',
    '/tmp',
    '--ro-bind',
    path.join(workDir, 'script'),
    '/work/script',
    '--ro-bind',
    path.join(workDir, 'agw'),
    '/agw',
    ...(run.runtime === 'node' ? ['--symlink', '/tmp/.agw/node/node_modules', '/work/node_modules'] : []),
    ...(run.nodeLibs ? ['--ro-bind', run.nodeLibs, '/node_modules'] : []),
    '--remount-ro',
    '/',
    '--chdir',
    '/tmp',
    '--clearenv',
    ...Object.entries(run.env).flatMap(([k, v]) => ['--setenv', k, v]),
  ]
}
