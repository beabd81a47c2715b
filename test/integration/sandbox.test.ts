// Local sandbox executor (controllers/local/sandbox.ts) against real bubblewrap: isolation of
// files, env, processes, memory, time, output and network, dependency installs (npm registry,
// a local PEP 503 index built here), helpers, cancellation. Skipped only when bwrap is missing.

import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { chmod, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { isPrivateAddress } from '../../src/platform/addresses.ts'
import type { EgressLogEntry } from '../../src/platform/egress-proxy.ts'
import { createEgressProxy } from '../../src/platform/egress-proxy.ts'
import { runInSandbox, sandboxAvailable, SandboxInputError, SENTINEL } from '../../controllers/local/sandbox.ts'
import { removeStaleWorkDirs } from '../../controllers/local/workdirs.ts'
import type { SandboxOptions, SandboxRunInput, SandboxRunResult } from '../../controllers/local/sandbox.ts'

const avail = await sandboxAvailable()
if (!avail.ok) {
  console.log(`# skipping sandbox tests: ${avail.reason}`)
  t.plan(0, avail.reason)
  process.exit(0)
}

// Per-run dirs go here (not straight into /tmp) so the test can check they are all removed;
// the sandbox uids must be able to traverse it, hence 0711.
const workRoot = await mkdtemp(path.join(os.tmpdir(), 'agw-sandbox-test-'))
await chmod(workRoot, 0o711)
t.teardown(() => rm(workRoot, { recursive: true, force: true }))

let seq = 0
function run(input: Partial<SandboxRunInput> & Pick<SandboxRunInput, 'runtime' | 'source'>, options: SandboxOptions = {}): Promise<SandboxRunResult> {
  return runInSandbox(
    {
      runId: `test-${++seq}`,
      entrypoint: input.runtime === 'python' ? 'main.py' : 'index.mjs',
      env: {},
      dependencies: [],
      maxRuntimeSec: 20,
      ...input,
    },
    { workRoot, ...options },
  )
}

/** A short diagnostic for assertion messages (the tail of stderr). */
const why = (r: SandboxRunResult) => `exit ${r.exitCode} ${r.signal ?? ''} ${r.stderr.slice(-400)}`

/** Program output: what follows the sentinel line. */
function program(r: SandboxRunResult): string {
  const i = r.stdout.indexOf(`${SENTINEL}\n`)
  return i < 0 ? '' : r.stdout.slice(i + SENTINEL.length + 1)
}

/**
 * Live (non-zombie) processes on the host owned by the sandbox uid pool (uid >= 1_600_000),
 * waiting up to 2 s for SIGKILLed ones to finish dying. A sandbox init that outlives bwrap is
 * left as a zombie for the host's pid 1 to reap (see docs/sandbox.md); zombies run nothing.
 */
/** Whether a sandboxed process is blocked in a sleep (its kernel wait channel is the nanosleep timer). */
async function sandboxSleeper(): Promise<boolean> {
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
    if (Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1) < 1_600_000) continue
    if (/nanosleep/.test(await readFile(`/proc/${pid}/wchan`, 'utf8').catch(() => ''))) return true
  }
  return false
}

async function sandboxProcesses(): Promise<string[]> {
  let live: string[] = []
  for (let i = 0; i < 20; i++) {
    live = []
    for (const pid of await readdir('/proc')) {
      if (!/^\d+$/.test(pid)) continue
      const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '')
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1)
      const state = /^State:\s+(\S+)/m.exec(status)?.[1] ?? '?'
      if (uid >= 1_600_000 && state !== 'Z') live.push(`${pid} ${state} ${/^Name:\s+(.*)$/m.exec(status)?.[1]}`)
    }
    if (live.length === 0) break
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return live
}

t.test('hello world in both runtimes: sentinel, stdout, exit code, real version, start overhead', async (t) => {
  const py = await run({ runtime: 'python', source: 'import platform\nprint("hello from python", platform.python_version())\n' })
  t.equal(py.outcome, 'succeeded', why(py))
  t.equal(py.exitCode, 0)
  t.equal(py.signal, null)
  t.ok(py.stdout.startsWith(`${SENTINEL}\n`), 'sentinel first')
  const pyVersion = /hello from python (\S+)/.exec(program(py))?.[1]
  t.ok(pyVersion, program(py))
  t.equal(py.runtimeVersion, `python ${pyVersion}`, 'runtimeVersion is the interpreter that ran')
  t.equal(py.installDurationMs, 0)
  t.equal(py.stdoutBytes, Buffer.byteLength(py.stdout))

  const js = await run({ runtime: 'node', source: 'console.log("hello from node", process.versions.node)\nconsole.error("to stderr")\n' })
  t.equal(js.outcome, 'succeeded', why(js))
  t.equal(js.exitCode, 0)
  t.equal(program(js), `hello from node ${js.runtimeVersion.replace('node ', '')}\n`)
  t.equal(js.stderr, 'to stderr\n')

  const failing = await run({ runtime: 'python', source: 'import sys\nprint("partial")\nsys.exit(3)\n' })
  t.equal(failing.outcome, 'failed')
  t.equal(failing.exitCode, 3)
  t.equal(program(failing), 'partial\n')
  const thrown = await run({ runtime: 'node', source: 'throw new Error("boom")\n' })
  t.equal(thrown.outcome, 'failed')
  t.equal(thrown.exitCode, 1)
  t.match(thrown.stderr, /Error: boom/)

  const times: Record<string, number[]> = { python: [], node: [] }
  for (let i = 0; i < 3; i++) {
    for (const runtime of ['python', 'node'] as const) {
      const r = await run({ runtime, source: runtime === 'python' ? 'pass\n' : '\n' })
      t.equal(r.outcome, 'succeeded')
      times[runtime]!.push(r.durationMs)
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]
  t.comment(`empty-script run, median of 3: python ${median(times.python!)} ms, node ${median(times.node!)} ms (sandbox + interpreter + bootstrap)`)
  t.ok(await readdir(workRoot).then((d) => d.length === 0), 'per-run work dirs are deleted')
  await mkdir(path.join(workRoot, 'agw-run-left-by-a-crash'))
  t.equal(await removeStaleWorkDirs(workRoot, 60_000), 0, 'recent dirs are left alone')
  t.equal(await removeStaleWorkDirs(workRoot, 60_000, Date.now() + 120_000), 1, 'stale dirs are swept')
})

t.test('env: task env visible, host env not', async (t) => {
  process.env.AGW_TEST_PARENT_SECRET = 'parent-secret-value'
  t.teardown(() => {
    delete process.env.AGW_TEST_PARENT_SECRET
  })
  const source = 'import os, json\nprint(json.dumps(dict(os.environ)))\n'
  const r = await run({ runtime: 'python', source, env: { API_KEY: 'task-secret', EMPTY: '' } })
  t.equal(r.outcome, 'succeeded', why(r))
  const env = JSON.parse(program(r)) as Record<string, string>
  t.equal(env.API_KEY, 'task-secret')
  t.equal(env.EMPTY, '')
  t.equal(env.HOME, '/tmp')
  t.notOk('AGW_TEST_PARENT_SECRET' in env, 'parent env is not inherited')
  t.notOk(JSON.stringify(env).includes('parent-secret-value'))
  for (const k of Object.keys(process.env)) {
    if (['PATH', 'HOME', 'LANG', 'PWD', 'TMPDIR'].includes(k) || /proxy|CA_BUNDLE|CERT/i.test(k)) continue
    t.notOk(k in env, `host variable ${k} absent`)
  }
  t.equal(env.HTTPS_PROXY, 'http://127.0.0.1:3128')
  t.notOk('AGW_HELPER_URL' in env, 'no helper endpoint unless configured')

  const js = await run({ runtime: 'node', source: 'console.log(JSON.stringify(process.env))\n', env: { API_KEY: 'task-secret' } })
  const jsEnv = JSON.parse(program(js)) as Record<string, string>
  t.equal(jsEnv.API_KEY, 'task-secret')
  t.notOk('AGW_TEST_PARENT_SECRET' in jsEnv)

  await t.rejects(run({ runtime: 'python', source: '', env: { PATH: '/evil' } }), { code: 'VALIDATION_ERROR' })
  await t.rejects(run({ runtime: 'python', source: '', entrypoint: '../escape.py' }), SandboxInputError)
  await t.rejects(run({ runtime: 'python', source: '', entrypoint: 'a/b.py' }), { code: 'VALIDATION_ERROR' })
  await t.rejects(run({ runtime: 'python', source: '', dependencies: ['--index-url=http://evil/'] }), { code: 'UNSUPPORTED_DEPENDENCY' })
  await t.rejects(run({ runtime: 'node', source: '', dependencies: ['git+https://example.com/x.git'] }), { code: 'UNSUPPORTED_DEPENDENCY' })
  await t.rejects(run({ runtime: 'node', source: 'x'.repeat(256 * 1024 + 1) }), { code: 'VALIDATION_ERROR' })
})

t.test('filesystem: host files invisible, only /tmp writable', async (t) => {
  const source = `
import json, os
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except Exception as e:
        out[name] = type(e).__name__
attempt("read /etc/shadow", lambda: open("/etc/shadow").read())
attempt("read /work/main/package.json", lambda: open("/work/main/package.json").read())
attempt("list /root", lambda: os.listdir("/root"))
attempt("list /work", lambda: os.listdir("/work"))
attempt("read own script", lambda: open("/work/script/main.py").read())
attempt("write /work/script/x", lambda: open("/work/script/x", "w").write("x"))
attempt("write /usr/x", lambda: open("/usr/x", "w").write("x"))
attempt("write /etc/x", lambda: open("/etc/x", "w").write("x"))
attempt("write /x", lambda: open("/x", "w").write("x"))
attempt("write /dev/x", lambda: open("/dev/x", "w").write("x"))
attempt("write /dev/null", lambda: open("/dev/null", "w").write("x"))
attempt("write /tmp/x", lambda: open("/tmp/x", "w").write("x"))
out["uid"] = [os.getuid(), os.getgid()]
out["cwd"] = os.getcwd()
out["root"] = sorted(os.listdir("/"))
out["etc"] = sorted(os.listdir("/etc"))
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(out))
`
  const r = await run({ runtime: 'python', source })
  t.equal(r.outcome, 'succeeded', why(r))
  const o = JSON.parse(program(r)) as Record<string, unknown>
  t.equal(o['read /etc/shadow'], 'FileNotFoundError')
  t.equal(o['read /work/main/package.json'], 'FileNotFoundError')
  t.equal(o['list /root'], 'FileNotFoundError')
  t.same(o['list /work'], 'ok')
  t.equal(o['read own script'], 'ok')
  for (const w of ['write /work/script/x', 'write /usr/x', 'write /etc/x', 'write /x', 'write /dev/x']) t.equal(o[w], 'OSError', `${w} refused (read-only)`)
  t.equal(o['write /dev/null'], 'ok')
  t.equal(o['write /tmp/x'], 'ok')
  t.same(o.uid, [65534, 65534], 'unprivileged uid/gid inside')
  t.equal(o.cwd, '/tmp')
  t.notOk((o.root as string[]).includes('root'), '/root does not exist inside')
  t.notOk((o.root as string[]).includes('home'))
  t.notOk((o.etc as string[]).includes('shadow'))
  t.ok((o.pids as number[]).length < 10, 'own pid namespace')
})

t.test('fork bomb is contained by RLIMIT_NPROC and killed at the wall clock', async (t) => {
  const bomb = `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`
  const started = Date.now()
  const r = await run({ runtime: 'python', source: bomb, maxRuntimeSec: 2, limits: { pids: 32 } })
  t.equal(r.outcome, 'timed_out')
  t.ok(Date.now() - started < 10_000, 'returned promptly')
  t.same(await sandboxProcesses(), [], 'no sandbox process survives')

  const counted = await run({
    runtime: 'python',
    limits: { pids: 32 },
    source: `
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print("fork refused after", n, "errno", e.errno)
`,
  })
  const n = Number(/fork refused after (\d+) errno 11/.exec(program(counted))?.[1] ?? -1)
  t.ok(n > 0 && n < 32, `fork refused with EAGAIN after ${n} children`)
  t.equal(counted.outcome, 'succeeded', 'sleeping children are reaped with the sandbox')
  t.same(await sandboxProcesses(), [])
  const after = await run({ runtime: 'python', source: 'print("still fine")' })
  t.equal(program(after), 'still fine\n', 'the service keeps running sandboxes')
})

t.test('memory hog (2 GB) is stopped; the service is unaffected', async (t) => {
  const rssBefore = process.memoryUsage().rss
  const py = await run({ runtime: 'python', source: 'b = bytearray(2 * 1024 ** 3)\nprint("allocated")\n' })
  t.ok(['killed_oom', 'failed'].includes(py.outcome), `python outcome ${py.outcome}`)
  t.equal(py.outcome, 'killed_oom')
  t.notMatch(program(py), /allocated/)
  const js = await run({ runtime: 'node', source: 'const b = Buffer.alloc(2 * 1024 ** 3, 1)\nconsole.log("allocated", b.length)\n' })
  t.equal(js.outcome, 'killed_oom', why(js))
  t.notMatch(program(js), /allocated/)
  const heap = await run({ runtime: 'node', source: 'const a = []\nfor (;;) a.push(new Array(1e6).fill(Math.random()))\n' })
  t.ok(['killed_oom', 'failed'].includes(heap.outcome), `node heap growth: ${heap.outcome}`)
  t.ok(process.memoryUsage().rss - rssBefore < 200 * 1024 * 1024, 'service memory did not balloon')
})

t.test('infinite loop → timed_out at max_runtime_sec', async (t) => {
  const r = await run({ runtime: 'python', source: 'print("spinning", flush=True)\nwhile True:\n    pass\n', maxRuntimeSec: 2 })
  t.equal(r.outcome, 'timed_out')
  t.equal(r.signal, 'SIGKILL')
  t.equal(r.exitCode, null)
  t.ok(r.durationMs >= 2000 && r.durationMs < 5000, `took ${r.durationMs} ms`)
  t.equal(program(r), 'spinning\n', 'output before the kill is kept')
  const js = await run({ runtime: 'node', source: 'for (;;) {}\n', maxRuntimeSec: 2 })
  t.equal(js.outcome, 'timed_out')
  t.same(await sandboxProcesses(), [])
})

t.test('endless output → output_limit quickly, memory bounded', async (t) => {
  const started = Date.now()
  const r = await run({ runtime: 'python', source: 'import sys\nwhile True:\n    sys.stdout.write("x" * 4096 + "\\n")\n', limits: { stdoutBytes: 256 * 1024 } })
  t.equal(r.outcome, 'output_limit')
  t.ok(Date.now() - started < 5000, `stopped after ${Date.now() - started} ms`)
  t.ok(r.stdoutBytes > 256 * 1024, `counted ${r.stdoutBytes} bytes`)
  t.ok(Buffer.byteLength(r.stdout) < 256 * 1024 + 200, 'kept output is capped')
  t.match(r.stdout, /\[agent-gateway: stdout truncated at 262144 of \d+ bytes\]\n$/)
  const js = await run({ runtime: 'node', source: 'const s = "y".repeat(65536)\nfor (;;) process.stderr.write(s)\n' })
  t.equal(js.outcome, 'output_limit')
  t.match(js.stderr, /stderr truncated at 1048576/)
})

t.test('filling the disk stops at RLIMIT_FSIZE and the tmpfs size', async (t) => {
  const source = `
import errno, os
def fill(path, limit):
    n = 0
    try:
        with open(path, "wb") as f:
            while n < limit:
                f.write(b"z" * 1048576)
                f.flush()
                n += 1
        return "wrote %d MiB" % n
    except OSError as e:
        return errno.errorcode[e.errno] + " after %d MiB" % n
print(fill("/tmp/one-big-file", 10_000))
results = [fill("/tmp/part%d" % i, 15) for i in range(20)]
print(next((r for r in results if not r.startswith("wrote")), "never stopped"))
`
  const r = await run({ runtime: 'python', source, limits: { fileBytes: 16 * 1024 * 1024, tmpBytes: 48 * 1024 * 1024 } })
  t.equal(r.outcome, 'succeeded', why(r))
  const [big, many] = program(r).trim().split('\n')
  t.match(big, /^EFBIG after 16 MiB$/, 'one file stops at fsize')
  t.match(many, /^ENOSPC after \d+ MiB$/, 'many files stop at the tmpfs size')
})

t.test('network: no direct access; proxy refuses private, lets public through', async (t) => {
  let hits = 0
  const server = http.createServer((_req, res) => {
    hits++
    res.end('host service')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const port = (server.address() as AddressInfo).port
  const egress: EgressLogEntry[] = []

  const source = `
import json, socket, urllib.request, urllib.error
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except urllib.error.HTTPError as e:
        out[name] = "HTTP %d" % e.code
    except Exception as e:
        out[name] = type(e).__name__ + ": " + str(e)[:120]
attempt("direct loopback", lambda: socket.create_connection(("127.0.0.1", ${port}), timeout=3) and "connected")
attempt("direct metadata", lambda: socket.create_connection(("169.254.169.254", 80), timeout=3) and "connected")
attempt("direct public", lambda: socket.create_connection(("8.8.8.8", 53), timeout=3) and "connected")
attempt("dns", lambda: socket.getaddrinfo("registry.npmjs.org", 443))
attempt("proxy loopback", lambda: urllib.request.urlopen("http://127.0.0.1:${port}/", timeout=10).status)
attempt("proxy localhost name", lambda: urllib.request.urlopen("http://localhost:${port}/", timeout=10).status)
attempt("proxy metadata", lambda: urllib.request.urlopen("http://169.254.169.254/latest/meta-data/", timeout=10).status)
attempt("proxy private https", lambda: urllib.request.urlopen("https://10.1.2.3/", timeout=10).status)
attempt("proxy public https", lambda: urllib.request.urlopen("https://registry.npmjs.org/is-number", timeout=30).status)
print(json.dumps(out))
`
  const r = await run({ runtime: 'python', source }, { onEgress: (e) => egress.push(e) })
  t.equal(r.outcome, 'succeeded', why(r))
  const o = JSON.parse(program(r)) as Record<string, string | number>
  t.match(o['direct loopback'], /ConnectionRefusedError/, 'the sandbox loopback is its own')
  t.match(o['direct metadata'], /Network is unreachable/)
  t.match(o['direct public'], /Network is unreachable/)
  t.match(o.dns, /gaierror/, 'no resolver inside; names go to the proxy')
  t.equal(o['proxy loopback'], 'HTTP 403')
  t.equal(o['proxy localhost name'], 'HTTP 403', 'names are checked after resolution')
  t.equal(o['proxy metadata'], 'HTTP 403')
  t.match(o['proxy private https'], /403/)
  t.equal(hits, 0, 'the host service saw no request')
  const refused = egress.filter((e) => e.decision === 'refused').map((e) => e.host)
  t.same(refused.sort(), ['10.1.2.3', '127.0.0.1', '169.254.169.254', 'localhost'])
  const pub = egress.find((e) => e.host === 'registry.npmjs.org')
  t.equal(pub?.decision, 'allowed', 'a public name is attempted, not refused')
  t.comment(`public https through the proxy: ${o['proxy public https']} (${pub?.address}${pub?.status ? `, proxy status ${pub.status}` : ''})`)

  // node: fetch and http.request reach the proxy on every Node version
  const js = await run(
    {
      runtime: 'node',
      source: `
import http from 'node:http'
const attempt = async (fn) => { try { return await fn() } catch (e) { return 'error: ' + (e.cause?.message ?? e.message) } }
const out = {
  loopback: await attempt(async () => (await fetch('http://127.0.0.1:${port}/')).status),
  metadata: await attempt(async () => (await fetch('http://169.254.169.254/latest/meta-data/')).status),
  private: await attempt(() => new Promise((res, rej) => http.get('http://192.168.1.1/', (r) => { r.resume(); res(r.statusCode) }).on('error', rej))),
  public: await attempt(async () => { const r = await fetch('https://registry.npmjs.org/is-number'); await r.arrayBuffer(); return r.status }),
}
console.log(JSON.stringify(out))
`,
    },
    { onEgress: (e) => egress.push(e) },
  )
  t.equal(js.outcome, 'succeeded', why(js))
  const jo = JSON.parse(program(js)) as Record<string, string | number>
  t.match(jo.loopback, /ECONNREFUSED/)
  t.match(String(jo.metadata), /403|not reachable/)
  t.match(String(jo.private), /403|not reachable/)
  t.equal(hits, 0)
  t.comment(`node public https through the proxy: ${jo.public}`)

  t.ok(isPrivateAddress('::ffff:169.254.169.254') && isPrivateAddress('fd00:ec2::254') && !isPrivateAddress('8.8.8.8'))
})

t.test('egress policy: checked after resolution, exact exemptions, own host addresses', async (t) => {
  const answers: Record<string, string[]> = {
    'rebind.example': ['10.0.0.7'],
    'mixed.example': ['10.0.0.7', '93.184.215.14'],
    'public.example': ['93.184.215.14'],
    'v6meta.example': ['fd00:ec2::254'],
    'mapped.example': ['::ffff:169.254.169.254'],
  }
  const lookup = async (host: string) => (answers[host] ?? []).map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  const proxy = createEgressProxy({ lookup, allow: ['rebind.example:8443'], denyAddresses: ['93.184.215.14'] })
  const open = createEgressProxy({ lookup })
  t.match(await open.check('rebind.example', 443), { ok: false, status: 403 }, 'a name resolving to a private address is refused')
  t.match(await open.check('mixed.example', 443), { ok: true, address: '93.184.215.14' }, 'only a checked public address is dialled')
  t.match(await open.check('public.example', 443), { ok: true })
  t.match(await open.check('v6meta.example', 443), { ok: false, status: 403 })
  t.match(await open.check('mapped.example', 80), { ok: false, status: 403 })
  t.match(await open.check('nowhere.example', 443), { ok: false, status: 502 })
  t.match(await open.check('[::1]', 443), { ok: false, status: 403 })
  t.match(await proxy.check('rebind.example', 8443), { ok: true, address: '10.0.0.7' }, 'exact host:port exemption')
  t.match(await proxy.check('rebind.example', 443), { ok: false }, 'other ports are not exempt')
  t.match(await proxy.check('public.example', 443), { ok: false, status: 403 }, 'denied host address')
  proxy.revokeAllow()
  t.match(await proxy.check('rebind.example', 8443), { ok: false }, 'exemption revoked')
  const self = createEgressProxy()
  const own = Object.values(os.networkInterfaces())
    .flatMap((l) => l ?? [])
    .find((a) => !a.internal)
  if (own) t.match(await self.check(own.address, 443), { ok: false, status: 403 }, `own address ${own.address} refused`)
})

t.test('node dependency from the npm registry; install output precedes the sentinel', async (t) => {
  const r = await run({
    runtime: 'node',
    dependencies: ['is-number@7.0.0'],
    source: 'import isNumber from "is-number"\nconsole.log("isNumber(42) =", isNumber(42))\n',
  })
  t.equal(r.outcome, 'succeeded', why(r))
  const i = r.stdout.indexOf(SENTINEL)
  t.ok(i > 0, 'sentinel after install output')
  t.match(r.stdout.slice(0, i), /added 1 package/)
  t.equal(program(r), 'isNumber(42) = true\n')
  t.ok(r.installDurationMs > 0 && r.installDurationMs < r.durationMs, `install took ${r.installDurationMs} ms of ${r.durationMs}`)
})

t.test('python dependency from a local PEP 503 index', async (t) => {
  const wheelDir = await mkdtemp(path.join(os.tmpdir(), 'agw-wheel-'))
  t.teardown(() => rm(wheelDir, { recursive: true, force: true }))
  const wheel = 'agwdemo-1.0.0-py3-none-any.whl'
  // A minimal, valid wheel (zip + dist-info with a hashed RECORD), written by the host python.
  await promisify(execFile)('python3', [
    '-c',
    `
import base64, hashlib, sys, zipfile
files = {
    "agwdemo/__init__.py": "def greet(name):\\n    return 'hello ' + name + ' from agwdemo'\\n",
    "agwdemo-1.0.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: agwdemo\\nVersion: 1.0.0\\n",
    "agwdemo-1.0.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: agw-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        data = text.encode()
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append("agwdemo-1.0.0.dist-info/RECORD,,")
    z.writestr("agwdemo-1.0.0.dist-info/RECORD", "\\n".join(record) + "\\n")
`,
    path.join(wheelDir, wheel),
  ])
  const wheelBytes = await readFile(path.join(wheelDir, wheel))
  const sha = createHash('sha256').update(wheelBytes).digest('hex')
  const requests: string[] = []
  const index = http.createServer((req, res) => {
    requests.push(req.url ?? '')
    if (req.url === '/simple/' || req.url === '/simple') {
      res.end('<!DOCTYPE html><html><body><a href="/simple/agwdemo/">agwdemo</a></body></html>')
    } else if (req.url === '/simple/agwdemo/' || req.url === '/simple/agwdemo') {
      res.setHeader('content-type', 'text/html')
      res.end(`<!DOCTYPE html><html><body><a href="/files/${wheel}#sha256=${sha}">${wheel}</a></body></html>`)
    } else if (req.url === `/files/${wheel}`) {
      res.setHeader('content-type', 'application/octet-stream')
      res.end(wheelBytes)
    } else {
      res.statusCode = 404
      res.end('not found')
    }
  })
  await new Promise<void>((resolve) => index.listen(0, '127.0.0.1', resolve))
  t.teardown(() => index.close())
  const url = `http://127.0.0.1:${(index.address() as AddressInfo).port}/simple/`

  const r = await run({
    runtime: 'python',
    dependencies: ['agwdemo==1.0.0'],
    pipIndexUrl: url,
    source: `
import agwdemo, urllib.request, urllib.error
print(agwdemo.greet("sandbox"))
try:
    urllib.request.urlopen("${url}", timeout=10)
    print("index reachable after install")
except urllib.error.HTTPError as e:
    print("index after install: HTTP", e.code)
`,
  })
  t.equal(r.outcome, 'succeeded', why(r))
  const i = r.stdout.indexOf(SENTINEL)
  t.ok(i > 0)
  t.match(r.stdout.slice(0, i), /Successfully installed agwdemo-1\.0\.0/, 'pip output precedes the sentinel')
  t.equal(program(r), 'hello sandbox from agwdemo\nindex after install: HTTP 403\n', 'the index exemption ends with the install phase')
  t.ok(requests.includes(`/files/${wheel}`), 'the wheel came from the local index')
  t.ok(r.installDurationMs > 0)

  const missing = await run({ runtime: 'python', dependencies: ['no-such-package'], pipIndexUrl: url, source: 'print("never")' })
  t.equal(missing.outcome, 'failed')
  t.notMatch(missing.stdout, new RegExp(SENTINEL), 'no program output after a failed install')
  t.match(missing.stderr, /dependency install failed/)
})

t.test('helpers: clear error without an endpoint, thin HTTP client with one', async (t) => {
  const py = await run({ runtime: 'python', source: 'generate_text("hi")\n' })
  t.equal(py.outcome, 'failed')
  t.match(py.stderr, /RuntimeError: generate_text\(\) is not available in this run/)
  const js = await run({ runtime: 'node', source: 'await store_artifact("a.txt", "x")\n' })
  t.equal(js.outcome, 'failed')
  t.match(js.stderr, /store_artifact\(\) is not available in this run/)

  const calls: Array<{ url: string; auth: string | undefined; body: unknown }> = []
  const helper = http.createServer((req, res) => {
    let raw = ''
    req.on('data', (c: Buffer) => {
      raw += c.toString()
    })
    req.on('end', () => {
      calls.push({ url: req.url ?? '', auth: req.headers.authorization, body: JSON.parse(raw) })
      res.setHeader('content-type', 'application/json')
      res.end(JSON.stringify({ text: 'generated', url: 'https://cdn.example/a.txt' }))
    })
  })
  await new Promise<void>((resolve) => helper.listen(0, '127.0.0.1', resolve))
  t.teardown(() => helper.close())
  const helperUrl = `http://127.0.0.1:${(helper.address() as AddressInfo).port}/internal/runs/r1`
  const withHelper = { url: helperUrl, token: 'run-token-1' }

  const p = await run({
    runtime: 'python',
    helper: withHelper,
    source: `
r = generate_text("write a haiku", model_alias="quick", max_output_tokens=50)
print(r["status"], r["body"]["text"])
a = store_artifact("data.bin", b"\\x00\\x01", "application/octet-stream", True)
print(a["status"])
`,
  })
  t.equal(p.outcome, 'succeeded', why(p))
  t.equal(program(p), '200 generated\n200\n')
  const n = await run({
    runtime: 'node',
    helper: withHelper,
    source: `
const r = await call('urlshortener', '/shorten', { url: 'https://example.com' })
console.log(r.status, r.body.text)
const c = await request_continuation(30)
console.log(c.status)
`,
  })
  t.equal(n.outcome, 'succeeded', why(n))
  t.equal(program(n), '200 generated\n200\n')
  t.same(
    calls.map((c) => c.url),
    ['/internal/runs/r1/generate_text', '/internal/runs/r1/store_artifact', '/internal/runs/r1/call', '/internal/runs/r1/request_continuation'],
  )
  t.ok(calls.every((c) => c.auth === 'Bearer run-token-1'))
  t.same(calls[0]!.body, { prompt: 'write a haiku', model_alias: 'quick', max_output_tokens: 50 })
  t.same(calls[1]!.body, { name: 'data.bin', data_base64: 'AAE=', content_type: 'application/octet-stream', stable: true })
  t.same(calls[2]!.body, { capability: 'urlshortener', path: '/shorten', body: { url: 'https://example.com' } })
  t.same(calls[3]!.body, { delay_sec: 30 })
})

t.test('cancel via AbortSignal', async (t) => {
  const ac = new AbortController()
  let abortedAt = 0
  // Aborted once the script sleeps (it has printed by then), not after a fixed delay: on a loaded
  // machine the interpreter may not have started within one.
  const sleeping = (async () => {
    for (const deadline = Date.now() + 15_000; Date.now() < deadline && !ac.signal.aborted; ) {
      if (await sandboxSleeper()) break
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    abortedAt = Date.now()
    ac.abort()
  })()
  const r = await run({ runtime: 'python', source: 'import time\nprint("working", flush=True)\ntime.sleep(30)\n', signal: ac.signal })
  await sleeping
  t.equal(r.outcome, 'cancelled')
  t.ok(Date.now() - abortedAt < 5000, `cancelled ${Date.now() - abortedAt} ms after the abort`)
  t.equal(program(r), 'working\n')
  t.same(await sandboxProcesses(), [])
  const pre = await run({ runtime: 'node', source: 'console.log(1)', signal: AbortSignal.abort() })
  t.equal(pre.outcome, 'cancelled', 'already-aborted signal: nothing starts')
  t.equal(pre.stdout, '')
})
