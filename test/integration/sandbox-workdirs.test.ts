// Run work dirs left by a crashed process (controllers/local/workdirs.ts removeStaleWorkDirs): they
// are removed at start, but never one a live process may own: several controller processes (and
// parallel tests) share the temp dir. Owner markers written here by hand, then a real crash: a
// child process running a sandbox is SIGKILLed and its dir is swept, while a live run's is kept.
import t, { type Test } from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { sandboxAvailable } from '../../controllers/local/sandbox.ts'
import { MAX_RUN_AGE_MS, OWNER_FILE, ownerMarker, removeStaleWorkDirs } from '../../controllers/local/workdirs.ts'

const self = await ownerMarker()

/** A pid that was alive a moment ago and is not now. */
function deadPid(): number {
  const child = spawnSync('/bin/sh', ['-c', 'echo $$'], { encoding: 'utf8' })
  return Number(child.stdout.trim())
}

async function workRoot(t: Test): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-workdirs-test-'))
  await chmod(dir, 0o711)
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

async function runDir(root: string, name: string, owner?: object | string): Promise<string> {
  const dir = path.join(root, name)
  await mkdir(path.join(dir, 'agw'), { recursive: true })
  if (owner !== undefined) await writeFile(path.join(dir, OWNER_FILE), typeof owner === 'string' ? owner : JSON.stringify(owner))
  return dir
}

t.test('only dirs no live process can own are removed', async (t) => {
  const root = await workRoot(t)
  const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' })
  t.teardown(() => {
    sleeper.kill('SIGKILL')
  })
  await runDir(root, 'agw-run-dead-owner-aaaaaa', { ...self, pid: deadPid() })
  await runDir(root, 'agw-run-previous-boot-bbbbbb', { ...self, pid: sleeper.pid, bootId: '00000000-0000-0000-0000-000000000000' })
  await runDir(root, 'agw-run-live-owner-cccccc', { ...self, pid: sleeper.pid })
  await runDir(root, 'agw-run-this-process-dddddd', self)
  await runDir(root, 'agw-run-other-pid-namespace-eeeeee', { ...self, pid: deadPid(), pidNamespace: 'pid:[1]' })
  await runDir(root, 'agw-run-other-host-ffffff', { ...self, pid: deadPid(), host: `not-${self.host}` })
  await runDir(root, 'agw-run-no-marker-yet-gggggg')
  await runDir(root, 'agw-run-garbled-marker-hhhhhh', '{not json')
  await runDir(root, 'not-a-run-dir', { ...self, pid: deadPid() })

  t.equal(await removeStaleWorkDirs(root), 2, 'two removed')
  t.same(
    (await readdir(root)).sort(),
    [
      'agw-run-garbled-marker-hhhhhh',
      'agw-run-live-owner-cccccc',
      'agw-run-no-marker-yet-gggggg',
      'agw-run-other-host-ffffff',
      'agw-run-other-pid-namespace-eeeeee',
      'agw-run-this-process-dddddd',
      'not-a-run-dir',
    ],
    'the dead owner and the previous boot are gone; live, own, unjudgeable and foreign dirs stay',
  )

  // Past the longest possible run every agw-run-* dir is a leftover, whoever wrote it (a pid reused
  // by a new process, another pid namespace, no marker).
  const old = new Date(Date.now() - MAX_RUN_AGE_MS - 60_000)
  for (const name of await readdir(root)) await utimes(path.join(root, name), old, old)
  t.equal(await removeStaleWorkDirs(root), 6)
  t.same(await readdir(root), ['not-a-run-dir'], 'only the unrelated dir is left')
  t.equal(await removeStaleWorkDirs(path.join(root, 'missing')), 0, 'a missing workRoot is no error')
})

const available = await sandboxAvailable()

t.test('a crashed process: its dir is swept; a live run of another process is not', { skip: available.ok ? false : available.reason }, async (t) => {
  const root = await workRoot(t)
  const sandboxTs = fileURLToPath(new URL('../../controllers/local/sandbox.ts', import.meta.url))
  const script = path.join(root, 'runner.ts')
  await writeFile(
    script,
    [
      `import { runInSandbox } from ${JSON.stringify(sandboxTs)}`,
      'const [workRoot, runId, uidBase] = process.argv.slice(2)',
      'const source = \'import time\\nprint("started", flush=True)\\ntime.sleep(60)\\n\'',
      "await runInSandbox({ runId, runtime: 'python', entrypoint: 'main.py', source, env: {}, dependencies: [], maxRuntimeSec: 120 }, { workRoot, uidBase: Number(uidBase) })",
    ].join('\n'),
  )

  /** The run dir of `runId`, once its owner marker is written. */
  const dirOf = async (runId: string) => {
    for (let i = 0; i < 300; i++) {
      const name = (await readdir(root)).find((entry) => entry.startsWith(`agw-run-${runId}-`))
      if (name && (await readFile(path.join(root, name, OWNER_FILE), 'utf8').catch(() => null))) return name
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    throw new Error(`no work dir for ${runId}`)
  }
  /** A process with one sandbox run in flight (python sleeping), as a controller mid-run. */
  const waitRunning = async (runId: string, uidBase: number) => {
    const child = spawn(process.execPath, [script, root, runId, String(uidBase)], { stdio: 'ignore' })
    t.teardown(() => {
      child.kill('SIGKILL')
    })
    const name = await dirOf(runId)
    await new Promise((resolve) => setTimeout(resolve, 1500)) // the sandbox is up (python sleeping)
    return { child, name }
  }
  // uids below the default pool (1_600_000+), which test/integration/sandbox.test.ts watches for survivors.
  const crashed = await waitRunning('crashed', 1_510_000)
  const live = await waitRunning('live', 1_520_000)
  const marker = JSON.parse(await readFile(path.join(root, crashed.name, OWNER_FILE), 'utf8')) as { pid: number }
  t.equal(marker.pid, crashed.child.pid, 'the run dir names the process that owns it')

  const gone = new Promise((resolve) => crashed.child.once('exit', resolve))
  crashed.child.kill('SIGKILL') // a crash: no finally, the dir stays (the sandbox dies with it)
  await gone
  t.ok((await readdir(root)).includes(crashed.name), 'the crashed process left its dir')

  // Another process starts and sweeps (as the controller role does at start).
  const workdirsTs = fileURLToPath(new URL('../../controllers/local/workdirs.ts', import.meta.url))
  const sweep = spawnSync(
    process.execPath,
    ['--input-type=module', '-e', `import { removeStaleWorkDirs } from ${JSON.stringify(workdirsTs)}; console.log(await removeStaleWorkDirs(${JSON.stringify(root)}))`],
    { encoding: 'utf8' },
  )
  t.equal(sweep.stdout.trim(), '1', `one dir removed ${sweep.stderr}`)
  const left = await readdir(root)
  t.notOk(left.includes(crashed.name), "the crashed process's dir is gone")
  t.ok(left.includes(live.name), "the live process's run dir is kept")

  const stopped = new Promise((resolve) => live.child.once('exit', resolve))
  live.child.kill('SIGTERM')
  await stopped
})
