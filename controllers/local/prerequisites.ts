// Prerequisites of the local executor (SCHEDULER_EXECUTOR=local): what sandbox.ts invokes for
// every run, checked once at start and again cheaply when asked, so a host that cannot run task
// scripts says so (the exact fix on stderr, /readyz 503, task creation and runs 503 before any
// payment) instead of selling tasks whose every run fails.
//
//   bwrap, prlimit      looked up on PATH, as runs do (sandbox-tools.ts findTool)
//   python, node        the interpreters runs use (sandbox-interpreters.ts resolveInterpreter)
//   sandbox             one trivial `prlimit -- bwrap … -- true` as a run uid: user namespaces
//                       may be forbidden (sysctl, AppArmor, a container's seccomp profile)
//   workroot            the temp dir must be reachable by the run uids
//
// The Kubernetes executor needs none of this: the runner images carry everything.
import { execFile } from 'node:child_process'
import { access, readFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { PREINSTALLED } from '../../src/scheduler/contract/index.ts'
import { checkWorkRoot } from './sandbox-identity.ts'
import { preinstalledNodeLibs, resolveInterpreter } from './sandbox-interpreters.ts'
import { probeSandbox } from './sandbox-probe.ts'
import { FALLBACK_TOOL_DIRS, findTool } from './sandbox-tools.ts'

export type PrerequisiteName = 'bwrap' | 'prlimit' | 'python' | 'node' | 'nodelibs' | 'userns' | 'sandbox' | 'workroot'

export interface PrerequisiteProblem {
  name: PrerequisiteName
  /** What is wrong, one line. */
  reason: string
  /** The exact command(s) or setting that fixes it. */
  fix: string
}

export interface PrerequisiteReport {
  ok: boolean
  /** Epoch ms of the check. */
  checkedAt: number
  durationMs: number
  tools: { bwrap?: string; prlimit?: string }
  /** Interpreter the sandbox would use: `3.11.2 (/usr/bin/python3.11)`. */
  runtimes: { python?: string; node?: string }
  problems: PrerequisiteProblem[]
  /**
   * The SPEC's preinstalled libraries (PREINSTALLED, src/catalog/schemas/scheduler-runtimes.ts)
   * that local runs do not have (undefined: not checked, the interpreter is missing). Not a
   * problem: scripts that do not import them run; those that do fail, and may not list them as
   * dependencies.
   */
  missingLibraries: { python?: string[]; node?: string[] }
  /** What is not a problem but worth an operator's look (the missing libraries and their fix). */
  notes: string[]
}

export interface PrerequisiteOptions {
  /** The PATH tools are looked up on; default the service's PATH (what runs use). */
  searchPath?: string
  /** Standard dirs searched for a tool missing from PATH, to tell "not on PATH" from "not installed". Default FALLBACK_TOOL_DIRS. */
  standardDirs?: readonly string[]
  /** Interpreter overrides, as in SandboxOptions (else AGW_SANDBOX_PYTHON / AGW_SANDBOX_NODE). */
  pythonPath?: string
  nodePath?: string
  /** Preinstalled node libraries dir, as in SandboxOptions (else AGW_SANDBOX_NODE_LIBS). */
  nodeLibsDir?: string
  /** Per-run uid pool (the probe sandbox takes one slot), as in SandboxOptions. */
  uidBase?: number
  /** Budget of the probe sandbox. Default 5 s. */
  probeTimeoutMs?: number
  /** Where run work dirs are made. Default os.tmpdir(). */
  workRoot?: string
  /** Text of /etc/os-release (picks the install command); default read from the host. */
  osRelease?: string
  /** Root of the sysctl tree (tests); default /proc/sys. */
  procSys?: string
  now?: () => number
}

/** The scheduler's view of a report (the ExecutorHealth port of src/scheduler/executor-health.ts). */
export type ExecutorStatus = { ok: true } | { ok: false; reason: string; fix: string }

// ---------------------------------------------------------------------------------------------
// Fixes

interface PackageManager {
  install: string
  packages: Record<'bwrap' | 'prlimit' | 'python' | 'node', string>
}

const APT: PackageManager = { install: 'apt-get install -y', packages: { bwrap: 'bubblewrap', prlimit: 'util-linux', python: 'python3', node: 'nodejs' } }
const MANAGERS: Array<[RegExp, PackageManager]> = [
  [/\b(debian|ubuntu)\b/, APT],
  [/\b(fedora|rhel|centos|rocky|almalinux|amzn)\b/, { install: 'dnf install -y', packages: { bwrap: 'bubblewrap', prlimit: 'util-linux', python: 'python3', node: 'nodejs' } }],
  [/\balpine\b/, { install: 'apk add', packages: { bwrap: 'bubblewrap', prlimit: 'util-linux-misc', python: 'python3', node: 'nodejs' } }],
  [/\b(arch|manjaro)\b/, { install: 'pacman -S --noconfirm', packages: { bwrap: 'bubblewrap', prlimit: 'util-linux', python: 'python', node: 'nodejs' } }],
  [/\b(suse|opensuse)\b/, { install: 'zypper install -y', packages: { bwrap: 'bubblewrap', prlimit: 'util-linux', python: 'python3', node: 'nodejs' } }],
]

/** The install command for `what` on this distribution (Debian/Ubuntu's when it is not recognised). */
export function installCommand(what: keyof PackageManager['packages'], osRelease: string): string {
  const ids = [...osRelease.matchAll(/^(ID|ID_LIKE)=["']?([^"'\n]*)/gm)].map((m) => m[2]!.toLowerCase()).join(' ')
  const known = MANAGERS.find(([pattern]) => pattern.test(ids))?.[1]
  const manager = known ?? APT
  const command = `${manager.install} ${manager.packages[what]}`
  return known ? command : `${command} (Debian/Ubuntu; the package is ${manager.packages[what]} on most distributions)`
}

async function readTrimmed(file: string): Promise<string | null> {
  return readFile(file, 'utf8').then(
    (text) => text.trim(),
    () => null,
  )
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  )

/** What to change when bwrap cannot create its namespaces, from the host's sysctls. */
async function usernsFix(procSys: string): Promise<string> {
  const fixes: string[] = []
  if ((await readTrimmed(path.join(procSys, 'kernel/unprivileged_userns_clone'))) === '0') {
    fixes.push('sysctl -w kernel.unprivileged_userns_clone=1 (unprivileged user namespaces are disabled; persist it in /etc/sysctl.d/)')
  }
  if ((await readTrimmed(path.join(procSys, 'kernel/apparmor_restrict_unprivileged_userns'))) === '1') {
    fixes.push(
      'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (AppArmor restricts unprivileged user namespaces, Ubuntu ≥ 23.10; or give /usr/bin/bwrap an AppArmor profile that allows `userns`; persist it in /etc/sysctl.d/)',
    )
  }
  if ((await readTrimmed(path.join(procSys, 'user/max_user_namespaces'))) === '0') {
    fixes.push('sysctl -w user.max_user_namespaces=15000 (user namespaces are limited to 0)')
  }
  if ((await exists('/.dockerenv')) || (await exists('/run/.containerenv'))) {
    fixes.push(
      'this is a container: its seccomp/AppArmor profile may forbid namespaces; run it with --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or use SCHEDULER_EXECUTOR=kubernetes',
    )
  }
  if (fixes.length === 0) {
    fixes.push(
      'allow unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1 (Debian/older kernels), ' +
        'sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu ≥ 23.10), sysctl -w user.max_user_namespaces=15000; ' +
        'in a container run it with --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or use SCHEDULER_EXECUTOR=kubernetes',
    )
  }
  return fixes.join('; ')
}

// ---------------------------------------------------------------------------------------------
// The check

/** Checks everything a local run needs. Never throws; the problems say what is missing and how to fix it. */
export async function checkLocalExecutor(options: PrerequisiteOptions = {}): Promise<PrerequisiteReport> {
  const now = options.now ?? Date.now
  const started = now()
  const searchPath = options.searchPath ?? process.env.PATH
  const osRelease = options.osRelease ?? (await readFile('/etc/os-release', 'utf8').catch(() => ''))
  const procSys = options.procSys ?? '/proc/sys'
  // The checks are independent (each spawns or reads on its own), so they run at once; each returns
  // what it found, merged in this fixed order whatever finishes first (the report reads the same).
  type Found = {
    problems: PrerequisiteProblem[]
    notes: string[]
    tools?: PrerequisiteReport['tools']
    runtimes?: PrerequisiteReport['runtimes']
    missingLibraries?: PrerequisiteReport['missingLibraries']
  }
  const found = (): Found => ({ problems: [], notes: [] })

  const checkTool = async (name: 'bwrap' | 'prlimit', label: string): Promise<Found> => {
    const out = found()
    const at = await findTool(name, searchPath)
    if (at) return { ...out, tools: { [name]: at } }
    const standardDirs = options.standardDirs ?? FALLBACK_TOOL_DIRS
    const elsewhere = standardDirs.length > 0 ? await findTool(name, standardDirs.join(':')) : null
    out.problems.push(
      elsewhere
        ? { name, reason: `${label} is not on the service's PATH; it is at ${elsewhere}`, fix: `add ${path.dirname(elsewhere)} to the service's PATH` }
        : { name, reason: `${label} is not installed (not on PATH)`, fix: installCommand(name, osRelease) },
    )
    return out
  }

  const checkRuntime = async (runtime: 'python' | 'node'): Promise<Found> => {
    const out = found()
    try {
      const it = await resolveInterpreter(runtime, {
        ...(options.pythonPath ? { pythonPath: options.pythonPath } : {}),
        ...(options.nodePath ? { nodePath: options.nodePath } : {}),
      })
      out.runtimes = { [runtime]: `${it.version} (${it.bin})` }
      const major = Number(it.version.split('.')[0])
      if (runtime === 'node' && major < 20)
        out.notes.push(
          `node ${it.version} is older than 20, the oldest the sandbox bootstrap is tested with (the SPEC's is 22): install a newer node (NodeSource) or set AGW_SANDBOX_NODE`,
        )
      if (runtime === 'python' && major === 3 && Number(it.version.split('.')[1]) < 12)
        out.notes.push(`python ${it.version} is not the SPEC's 3.12 (scripts run on it as they are)`)
      if (runtime === 'python') {
        const missing = await missingPythonModules(it.bin)
        if (missing) {
          out.missingLibraries = { python: missing }
          if (missing.length > 0)
            out.notes.push(
              `python libraries the SPEC preinstalls are missing for local runs: ${missing.join(', ')} (a task may not list them in dependencies either); ${pythonLibrariesFix(missing, osRelease)}`,
            )
        }
      }
    } catch (error) {
      const variable = runtime === 'python' ? 'AGW_SANDBOX_PYTHON' : 'AGW_SANDBOX_NODE'
      out.problems.push({
        name: runtime,
        reason: (error as Error).message,
        fix: `${installCommand(runtime, osRelease)}, or set ${variable} to a ${runtime === 'python' ? 'python 3' : 'node ≥ 20'} the sandbox uids can reach (not under /root)`,
      })
    }
    return out
  }

  const checkNodeLibs = async (): Promise<Found> => {
    const out = found()
    try {
      const dir = await preinstalledNodeLibs(options.nodeLibsDir ? { nodeLibsDir: options.nodeLibsDir } : {})
      const present = await Promise.all(PREINSTALLED.node.map(async (name) => (dir ? exists(path.join(dir, name, 'package.json')) : false)))
      const missing = PREINSTALLED.node.filter((_, i) => !present[i])
      out.missingLibraries = { node: missing }
      if (missing.length > 0) {
        out.notes.push(
          `node libraries the SPEC preinstalls are missing for local runs: ${missing.join(', ')}${dir ? ` (not in ${dir})` : ' (AGW_SANDBOX_NODE_LIBS is unset)'}; ${NODE_LIBRARIES_FIX}`,
        )
      }
    } catch (error) {
      out.problems.push({ name: 'nodelibs', reason: (error as Error).message, fix: `fix or unset AGW_SANDBOX_NODE_LIBS; ${NODE_LIBRARIES_FIX}` })
    }
    return out
  }

  const checkWorkRootDir = async (): Promise<Found> => {
    const out = found()
    const workRoot = options.workRoot ?? os.tmpdir()
    try {
      await checkWorkRoot(workRoot)
    } catch (error) {
      out.problems.push({ name: 'workroot', reason: (error as Error).message, fix: `chmod o+x on every directory of ${workRoot}, or set TMPDIR to a directory under /tmp` })
    }
    return out
  }

  /** The sandbox probe, with the tools found (it needs both; the other checks do not wait for it). */
  const checkSandbox = async (tools: PrerequisiteReport['tools']): Promise<Found> => {
    const out = found()
    if (!tools.bwrap || !tools.prlimit) return out
    const probe = await probeSandbox(
      { bwrap: tools.bwrap, prlimit: tools.prlimit },
      {
        ...(options.uidBase !== undefined ? { uidBase: options.uidBase } : {}),
        timeoutMs: options.probeTimeoutMs ?? 5000,
      },
    )
    if (!probe.ok) {
      if (/unknown option|unrecognized option|--disable-userns/i.test(probe.output)) {
        out.problems.push({
          name: 'bwrap',
          reason: `${tools.bwrap} is too old for the sandbox's options (${probe.reason})`,
          fix: `bubblewrap ≥ 0.8.0 is needed (--disable-userns): ${installCommand('bwrap', osRelease)} from a newer release (Debian 12, Ubuntu 24.04 and later ship it)`,
        })
      } else if (!probe.timedOut && /namespace|uid map|gid map|unshare|clone|operation not permitted|permission denied|RTM_NEWADDR|loopback/i.test(probe.output)) {
        out.problems.push({ name: 'userns', reason: `user namespaces are not allowed for the sandbox: ${probe.reason}`, fix: await usernsFix(procSys) })
      } else {
        out.problems.push({
          name: 'sandbox',
          reason: probe.reason,
          fix: `run \`${tools.bwrap} --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 -- true\` to see the failure; if it is about namespaces: ${await usernsFix(procSys)}`,
        })
      }
    }
    return out
  }

  const toolChecks = Promise.all([checkTool('bwrap', 'bwrap (bubblewrap)'), checkTool('prlimit', 'prlimit (util-linux)')])
  const sandboxCheck = toolChecks.then((checks) => checkSandbox(Object.assign({}, ...checks.map((check) => check.tools))))
  const otherChecks = [checkRuntime('python'), checkRuntime('node'), checkNodeLibs(), checkWorkRootDir(), sandboxCheck]
  const results = (await Promise.all([toolChecks, ...otherChecks])).flat()
  const tools: PrerequisiteReport['tools'] = Object.assign({}, ...results.map((result) => result.tools))
  const runtimes: PrerequisiteReport['runtimes'] = Object.assign({}, ...results.map((result) => result.runtimes))
  const missingLibraries: PrerequisiteReport['missingLibraries'] = Object.assign({}, ...results.map((result) => result.missingLibraries))
  const problems = results.flatMap((result) => result.problems)
  const notes = results.flatMap((result) => result.notes)

  return { ok: problems.length === 0, checkedAt: started, durationMs: now() - started, tools, runtimes, problems, missingLibraries, notes }
}

/** Import names of the SPEC's python libraries (PyPI name → module). */
const PYTHON_MODULES: Record<string, string> = {
  requests: 'requests',
  httpx: 'httpx',
  feedparser: 'feedparser',
  beautifulsoup4: 'bs4',
  lxml: 'lxml',
  'python-dateutil': 'dateutil',
  pyyaml: 'yaml',
  pillow: 'PIL',
}
/** Debian/Ubuntu packages of the same (into /usr, which the sandbox sees). */
const PYTHON_DEBIAN: Record<string, string> = {
  requests: 'python3-requests',
  httpx: 'python3-httpx',
  feedparser: 'python3-feedparser',
  beautifulsoup4: 'python3-bs4',
  lxml: 'python3-lxml',
  'python-dateutil': 'python3-dateutil',
  pyyaml: 'python3-yaml',
  pillow: 'python3-pil',
}

function pythonLibrariesFix(missing: string[], osRelease: string): string {
  const apt = /\b(debian|ubuntu)\b/.test(osRelease.toLowerCase()) ? `apt-get install -y ${missing.map((name) => PYTHON_DEBIAN[name] ?? name).join(' ')}, or ` : ''
  return `${apt}pip install them into the sandbox interpreter's system site-packages (under /usr/local)`
}

const NODE_LIBRARIES_FIX =
  'from the repository root: mkdir -p /opt/agw && cp runner-image/node/package.json /opt/agw/ && (cd /opt/agw && npm install --omit=dev --no-package-lock), then AGW_SANDBOX_NODE_LIBS=/opt/agw/node_modules'

/** Which of the SPEC's python libraries `python` cannot import in isolated mode (-I, as runs), or undefined when it cannot tell. */
function missingPythonModules(python: string): Promise<string[] | undefined> {
  const names = PREINSTALLED.python.filter((name) => PYTHON_MODULES[name])
  const script = 'import importlib.util, json, sys; print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]))'
  return new Promise((resolve) => {
    execFile(python, ['-I', '-c', script, ...names.map((name) => PYTHON_MODULES[name]!)], { env: { PATH: '/usr/bin:/bin' }, timeout: 10_000 }, (error, stdout) => {
      if (error) return resolve(undefined)
      try {
        const missing = new Set(JSON.parse(stdout) as string[])
        resolve(names.filter((name) => missing.has(PYTHON_MODULES[name]!)))
      } catch {
        resolve(undefined)
      }
    })
  })
}

/** The report as the scheduler's ExecutorHealth port answers it. */
export function executorStatus(report: PrerequisiteReport): ExecutorStatus {
  if (report.ok) return { ok: true }
  return {
    ok: false,
    reason: report.problems.map((problem) => problem.reason).join('; '),
    fix: report.problems.map((problem) => problem.fix).join('; '),
  }
}

/** A human block for stderr: every problem and its fix, and what the service does meanwhile. */
export function formatReport(report: PrerequisiteReport): string {
  if (report.ok) return `agent-gateway: local sandbox executor ready (bwrap ${report.tools.bwrap}, python ${report.runtimes.python}, node ${report.runtimes.node})\n`
  const lines = ['agent-gateway: the local sandbox executor (SCHEDULER_EXECUTOR=local) cannot run task scripts on this host:']
  for (const problem of report.problems) {
    lines.push(`  - ${problem.name}: ${problem.reason}`, `    fix: ${problem.fix}`)
  }
  lines.push(
    'Until then the scheduler answers 503 to task creation, funding, run now, trigger and webhook (before any payment is asked),',
    'and its /readyz is 503; everything else (discovery, payments, plans, memory) is served. A fix is picked up without a',
    'restart: the check reruns when /readyz or a task request asks, at most every 30 s. Or use SCHEDULER_EXECUTOR=kubernetes.',
  )
  return `${lines.join('\n')}\n`
}

// ---------------------------------------------------------------------------------------------
// Cached, re-checked health

export interface ExecutorHealthMonitor {
  /** The cached verdict, synchronous; a stale one (older than maxAgeMs) starts a re-check in the background. */
  check(): ExecutorStatus
  /** For /readyz: re-checks first when the cached verdict is stale. */
  readiness(): Promise<{ ok: boolean; reason?: string; fix?: string }>
  /** Runs the check now (one at a time; concurrent callers share it). */
  refresh(): Promise<PrerequisiteReport>
  /** The latest report (undefined before the first check finished). */
  readonly report: PrerequisiteReport | undefined
}

export interface ExecutorHealthOptions extends PrerequisiteOptions {
  /** How long a verdict is trusted before it is re-checked on demand. Default 30 s. */
  maxAgeMs?: number
  /** Called after every check whose verdict (ok, or the set of reasons) differs from the previous one. */
  onChange?: (report: PrerequisiteReport, previous: PrerequisiteReport | undefined) => void
  /** The check itself (tests); default checkLocalExecutor. */
  checker?: (options: PrerequisiteOptions) => Promise<PrerequisiteReport>
}

export function createExecutorHealth(options: ExecutorHealthOptions = {}): ExecutorHealthMonitor {
  const now = options.now ?? Date.now
  const maxAgeMs = options.maxAgeMs ?? 30_000
  const checker = options.checker ?? checkLocalExecutor
  let report: PrerequisiteReport | undefined
  let inflight: Promise<PrerequisiteReport> | undefined
  const signature = (r: PrerequisiteReport) => JSON.stringify(r.problems.map((p) => [p.name, p.reason]))

  const refresh = (): Promise<PrerequisiteReport> => {
    inflight ??= (async () => {
      try {
        const next = await checker(options)
        const previous = report
        report = next
        if (!previous || previous.ok !== next.ok || signature(previous) !== signature(next)) options.onChange?.(next, previous)
        return next
      } finally {
        inflight = undefined
      }
    })()
    return inflight
  }
  const stale = () => report === undefined || now() - report.checkedAt >= maxAgeMs

  return {
    get report() {
      return report
    },
    refresh,
    check() {
      if (stale()) void refresh().catch(() => {})
      if (!report) return { ok: false, reason: 'the local executor prerequisites are still being checked', fix: 'retry in a few seconds' }
      return executorStatus(report)
    },
    async readiness() {
      const current = stale() ? await refresh() : (report as PrerequisiteReport)
      const status = executorStatus(current)
      return status.ok ? { ok: true } : status
    },
  }
}
