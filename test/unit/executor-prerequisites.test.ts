// The local executor's prerequisite check (controllers/local/prerequisites.ts): tools looked up on
// the PATH it is given (fake dirs with fake executables here), the distinct verdicts of the probe
// sandbox (user namespaces forbidden, bwrap too old, hung), the fixes, and the cached monitor.
import t from 'tap'
import { chmodSync, existsSync, mkdirSync, mkdtempSync as makeTemp, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { checkLocalExecutor, createExecutorHealth, executorStatus, formatReport, installCommand, type PrerequisiteReport } from '../../controllers/local/prerequisites.ts'
import { findTool } from '../../controllers/local/sandbox.ts'

const REAL_PRLIMIT = ['/usr/bin/prlimit', '/bin/prlimit'].find((p) => existsSync(p))
const REAL_BWRAP = ['/usr/bin/bwrap', '/bin/bwrap'].find((p) => existsSync(p))

/** A fresh dir (reachable by the per-run uids: the probe runs as one when tests run as root). */
function binDir(tools: Record<string, string>, links: Record<string, string | undefined> = {}): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-prereq-'))
  chmodSync(dir, 0o755)
  for (const [name, script] of Object.entries(tools)) {
    writeFileSync(path.join(dir, name), `#!/bin/sh\n${script}\n`, { mode: 0o755 })
  }
  for (const [name, target] of Object.entries(links)) if (target) symlinkSync(target, path.join(dir, name))
  return dir
}

const temps: string[] = []
function mkdtempSync(prefix: string): string {
  const dir = makeTemp(prefix)
  temps.push(dir)
  return dir
}
t.teardown(() => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true })
})

const DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'

t.test('findTool honours PATH: a tool off PATH is not found; PATH order wins; no PATH = the standard dirs', async (t) => {
  const empty = binDir({})
  t.equal(await findTool('bwrap', empty), null, 'a PATH without bwrap has no bwrap, even when /usr/bin has one')
  const fake = binDir({ bwrap: 'exit 0' })
  t.equal(await findTool('bwrap', `${fake}:/usr/bin:/bin`), path.join(fake, 'bwrap'), 'the first PATH entry that has it')
  if (REAL_BWRAP) {
    t.equal(await findTool('bwrap', ''), '/usr/bin/bwrap', 'PATH unset or empty: the standard system dirs')
    t.equal(await findTool('bwrap', undefined), await findTool('bwrap', process.env.PATH), 'default: the process PATH')
  }
})

t.test('a PATH without bwrap: reported as not installed, with the install command of the distribution', async (t) => {
  const dir = binDir({}, { prlimit: REAL_PRLIMIT })
  const report = await checkLocalExecutor({ searchPath: dir, standardDirs: [], osRelease: DEBIAN })
  t.equal(report.ok, false)
  const bwrap = report.problems.find((p) => p.name === 'bwrap')
  t.ok(bwrap, 'bwrap is a problem')
  t.match(bwrap?.reason, /bwrap \(bubblewrap\) is not installed/)
  t.equal(bwrap?.fix, 'apt-get install -y bubblewrap')
  t.notOk(report.tools.bwrap)
  if (REAL_PRLIMIT) t.equal(report.tools.prlimit, path.join(dir, 'prlimit'), 'prlimit found on that PATH')
  t.notOk(
    report.problems.some((p) => p.name === 'userns' || p.name === 'sandbox'),
    'no sandbox probe without bwrap',
  )
  const status = executorStatus(report)
  t.equal(status.ok, false)
  if (!status.ok) {
    t.match(status.reason, /bwrap/)
    t.match(status.fix, /apt-get install -y bubblewrap/)
  }
  const text = formatReport(report)
  t.match(text, /cannot run task scripts/)
  t.match(text, /fix: apt-get install -y bubblewrap/)
  t.match(text, /503/)

  const nothing = await checkLocalExecutor({ searchPath: binDir({}), standardDirs: [], osRelease: 'ID=alpine\n' })
  t.same(
    nothing.problems.filter((p) => p.name === 'bwrap' || p.name === 'prlimit').map((p) => p.fix),
    ['apk add bubblewrap', 'apk add util-linux-misc'],
    'alpine names',
  )
})

t.test('installed but off PATH: the fix is the PATH, not an install', { skip: REAL_BWRAP ? false : 'no bwrap on this machine' }, async (t) => {
  const report = await checkLocalExecutor({ searchPath: binDir({}, { prlimit: REAL_PRLIMIT }), osRelease: DEBIAN })
  const bwrap = report.problems.find((p) => p.name === 'bwrap')
  t.match(bwrap?.reason, /not on the service's PATH; it is at \/(usr\/)?bin\/bwrap/)
  t.match(bwrap?.fix, /^add \/(usr\/)?bin to the service's PATH$/)
})

t.test('install commands per distribution', async (t) => {
  t.equal(installCommand('bwrap', 'ID=ubuntu\nID_LIKE=debian\n'), 'apt-get install -y bubblewrap')
  t.equal(installCommand('bwrap', 'ID="fedora"\n'), 'dnf install -y bubblewrap')
  t.equal(installCommand('bwrap', 'ID="rocky"\nID_LIKE="rhel centos fedora"\n'), 'dnf install -y bubblewrap')
  t.equal(installCommand('prlimit', 'ID=arch\n'), 'pacman -S --noconfirm util-linux')
  t.match(installCommand('bwrap', ''), /^apt-get install -y bubblewrap \(Debian\/Ubuntu/)
})

t.test('bwrap present but user namespaces forbidden: reported distinctly, with the sysctl that fixes it', { skip: REAL_PRLIMIT ? false : 'no prlimit' }, async (t) => {
  const dir = binDir(
    { bwrap: "echo 'bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2; exit 1" },
    { prlimit: REAL_PRLIMIT },
  )
  const procSys = mkdtempSync(path.join(os.tmpdir(), 'agw-sysctl-'))
  mkdirSync(path.join(procSys, 'kernel'))
  mkdirSync(path.join(procSys, 'user'))
  writeFileSync(path.join(procSys, 'kernel/unprivileged_userns_clone'), '0\n')
  writeFileSync(path.join(procSys, 'kernel/apparmor_restrict_unprivileged_userns'), '1\n')
  writeFileSync(path.join(procSys, 'user/max_user_namespaces'), '15000\n')
  const report = await checkLocalExecutor({ searchPath: dir, procSys, osRelease: DEBIAN })
  t.equal(report.ok, false)
  t.equal(report.tools.bwrap, path.join(dir, 'bwrap'))
  const userns = report.problems.find((p) => p.name === 'userns')
  t.ok(userns, `a userns problem: ${JSON.stringify(report.problems)}`)
  t.match(userns?.reason, /user namespaces are not allowed for the sandbox: bwrap cannot create a sandbox here: bwrap: No permissions to create new namespace/)
  t.match(userns?.fix, /sysctl -w kernel\.unprivileged_userns_clone=1/)
  t.match(userns?.fix, /sysctl -w kernel\.apparmor_restrict_unprivileged_userns=0/)
  t.notMatch(userns?.fix, /max_user_namespaces/, 'only the sysctls that are actually set restrictively')

  const zero = mkdtempSync(path.join(os.tmpdir(), 'agw-sysctl-'))
  mkdirSync(path.join(zero, 'user'))
  writeFileSync(path.join(zero, 'user/max_user_namespaces'), '0\n')
  const limited = await checkLocalExecutor({ searchPath: dir, procSys: zero, osRelease: DEBIAN })
  t.match(limited.problems.find((p) => p.name === 'userns')?.fix, /sysctl -w user\.max_user_namespaces=15000/)
})

t.test('bwrap too old for the sandbox flags, and a hung bwrap', { skip: REAL_PRLIMIT ? false : 'no prlimit' }, async (t) => {
  const old = binDir({ bwrap: "echo 'bwrap: Unknown option --disable-userns' >&2; exit 1" }, { prlimit: REAL_PRLIMIT })
  const tooOld = await checkLocalExecutor({ searchPath: old, osRelease: DEBIAN })
  const problem = tooOld.problems.find((p) => p.name === 'bwrap')
  t.match(problem?.reason, /too old/)
  t.match(problem?.fix, /bubblewrap ≥ 0\.8\.0/)

  const hung = binDir({ bwrap: 'exec sleep 30' }, { prlimit: REAL_PRLIMIT })
  const started = Date.now()
  const report = await checkLocalExecutor({ searchPath: hung, osRelease: DEBIAN, probeTimeoutMs: 300 })
  t.ok(Date.now() - started < 10_000, 'the probe has a short timeout')
  const stuck = report.problems.find((p) => p.name === 'sandbox')
  t.match(stuck?.reason, /did not finish within 300 ms/)
})

t.test('a missing interpreter is a problem of its own', async (t) => {
  const report = await checkLocalExecutor({ nodePath: '/nonexistent/bin/node', searchPath: binDir({}), standardDirs: [], osRelease: DEBIAN })
  const node = report.problems.find((p) => p.name === 'node')
  t.match(node?.reason, /no usable node interpreter found at \/nonexistent\/bin\/node/)
  t.match(node?.fix, /apt-get install -y nodejs, or set AGW_SANDBOX_NODE/)
})

t.test("the SPEC's preinstalled libraries: missing ones are notes, not problems; a broken AGW_SANDBOX_NODE_LIBS is a problem", async (t) => {
  const libs = mkdtempSync(path.join(os.tmpdir(), 'agw-node-libs-'))
  chmodSync(libs, 0o755)
  for (const name of ['axios', 'yaml']) {
    mkdirSync(path.join(libs, name))
    writeFileSync(path.join(libs, name, 'package.json'), JSON.stringify({ name, version: '1.0.0' }))
  }
  const report = await checkLocalExecutor({ nodeLibsDir: libs, osRelease: DEBIAN })
  t.same(report.missingLibraries.node, ['node-fetch', 'cheerio', 'date-fns', 'sharp'])
  t.notOk(report.problems.some((p) => p.name === 'nodelibs'))
  t.ok(
    report.notes.some((note) => note.includes(`node-fetch, cheerio, date-fns, sharp (not in ${libs})`)),
    report.notes.join('\n'),
  )
  if (report.missingLibraries.python?.length) {
    t.ok(
      report.notes.some((note) => /python libraries the SPEC preinstalls are missing .* apt-get install -y python3-/.test(note)),
      'python: the Debian packages that provide them',
    )
  }

  const unset = await checkLocalExecutor({ osRelease: DEBIAN })
  t.same(unset.missingLibraries.node, ['axios', 'node-fetch', 'cheerio', 'date-fns', 'yaml', 'sharp'], 'none without AGW_SANDBOX_NODE_LIBS')
  t.ok(unset.notes.some((note) => /AGW_SANDBOX_NODE_LIBS is unset.*npm install --omit=dev/.test(note)))

  const broken = await checkLocalExecutor({ nodeLibsDir: path.join(libs, 'missing'), osRelease: DEBIAN })
  const problem = broken.problems.find((p) => p.name === 'nodelibs')
  t.match(problem?.reason, /is not a directory/)
  t.equal(broken.ok, false)
})

t.test('this machine, with its own PATH: every prerequisite is there', { skip: REAL_BWRAP ? false : 'no bwrap on this machine' }, async (t) => {
  const report = await checkLocalExecutor()
  t.same(report.problems, [], formatReport(report))
  t.equal(report.ok, true)
  t.match(report.runtimes.python, /^3\.\d+\.\d+ \(\//)
  t.match(report.runtimes.node, /^\d+\.\d+\.\d+ \(\//)
  t.same(executorStatus(report), { ok: true })
})

t.test('the monitor: cached, re-checked when stale, change reported', async (t) => {
  let clock = 1_000
  let calls = 0
  let broken = true
  const report = (): PrerequisiteReport => ({
    ok: !broken,
    checkedAt: clock,
    durationMs: 1,
    tools: {},
    runtimes: {},
    problems: broken ? [{ name: 'bwrap', reason: 'bwrap (bubblewrap) is not installed (not on PATH)', fix: 'apt-get install -y bubblewrap' }] : [],
    missingLibraries: {},
    notes: [],
  })
  const changes: Array<[boolean, boolean | undefined]> = []
  const health = createExecutorHealth({
    now: () => clock,
    maxAgeMs: 30_000,
    checker: async () => {
      calls++
      return report()
    },
    onChange: (next, previous) => changes.push([next.ok, previous?.ok]),
  })
  t.same(health.check(), { ok: false, reason: 'the local executor prerequisites are still being checked', fix: 'retry in a few seconds' }, 'before the first check: not ok')
  await health.refresh()
  t.same(health.check(), { ok: false, reason: 'bwrap (bubblewrap) is not installed (not on PATH)', fix: 'apt-get install -y bubblewrap' })
  const callsAfterFirst = calls
  for (let i = 0; i < 5; i++) health.check()
  t.equal(calls, callsAfterFirst, 'a fresh verdict is not re-checked')
  t.same(await health.readiness(), { ok: false, reason: 'bwrap (bubblewrap) is not installed (not on PATH)', fix: 'apt-get install -y bubblewrap' })
  broken = false
  clock += 30_000
  t.same(await health.readiness(), { ok: true }, 'readiness re-checks a stale verdict first')
  t.equal(calls, callsAfterFirst + 1)
  broken = true
  clock += 30_000
  t.equal(health.check().ok, true, 'check() answers the cached verdict at once ...')
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(health.check().ok, false, '... and re-checks a stale one in the background')
  t.same(
    changes,
    [
      [false, undefined],
      [true, false],
      [false, true],
    ],
    'each change is reported once',
  )
  await Promise.all([health.refresh(), health.refresh()])
  t.equal(calls, callsAfterFirst + 3, 'concurrent refreshes share one check')
})
