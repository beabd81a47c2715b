// The kubernetes executor as the topology drill runs it (test/helpers/topology-kube.ts): the fake
// API server with a kubelet double, TWO real `agent-gateway controller` processes competing for
// the Lease and one scheduler-api, on a throw-away Postgres database and a dev chain. Shows: one
// leader; a paid task's run executes through the double with its exit code, logs and duration; the
// leader killed with SIGKILL mid-run → the other takes the Lease within the lease duration and the
// run finishes once; the API server restarted (watches answered 410 on resume) → both controllers
// carry on and the next runs finish; never a second Job or a second charge for one run.
import { randomBytes } from 'node:crypto'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { createJobExecutor, createKubernetesStores, loadKubeConfig } from '../../controllers/kubernetes/index.ts'
import { Informer } from '../../controllers/informer.ts'
import { ANVIL_ACCOUNT_0_KEY, startDevChain } from '../../src/payments/chain/dev.ts'
import { openDb } from '../../src/platform/db/index.ts'
import { type CliProcess, freePort, repoRoot, startCli } from '../helpers/cli.ts'
import { ownerCall } from '../helpers/owner-call.ts'
import { disownGroup, killGroup, ownGroup } from '../helpers/process-groups.ts'
import { reachableRedis, throwawayDatabase } from '../helpers/servers.ts'
import { startKubeForDrill } from '../helpers/topology-kube.ts'
import { until } from '../helpers/waiting.ts'

type Json = Record<string, any>

const execFileAsync = promisify(execFile)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
/** controllers/kubernetes/leader-election.ts defaults: lease 15 s, retry 2 s. */
const LEASE_MS = 15_000
const RETRY_MS = 2_000
/**
 * The latest a follower takes a dead leader's Lease: it saw the last renewal up to one retry
 * period after the kill, waits the lease duration from then, and acts on its next round; plus slack.
 */
const TAKEOVER_MS = LEASE_MS + 2 * RETRY_MS + 1_500

async function json(res: Response): Promise<Json> {
  return (await res.json().catch(() => ({}))) as Json
}

async function untilReady(url: string, timeoutMs: number): Promise<void> {
  await until(`${url} answers 200`, async () => (await fetch(url, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined))?.status === 200, timeoutMs, 200)
}

t.test('the kubelet double runs a Job for the real executor; the API server restarts on its port', async (t) => {
  const kube = await startKubeForDrill({ runMs: [1_500, 1_500], startDelayMs: [100, 100] })
  t.teardown(() => kube.stop())
  const kubeConfig = loadKubeConfig({ kubeconfigPath: kube.env.KUBECONFIG as string })
  const { tasks, runs } = createKubernetesStores({ kubeConfig, namespace: 'default' })
  const api = 'jobs.agent-gateway.dev/v1alpha1'
  const task = await tasks.create({ apiVersion: api, kind: 'Task', metadata: { name: 'nightly', namespace: 'default' }, spec: {} })
  const run = await runs.create({
    apiVersion: api,
    kind: 'Run',
    metadata: { name: 'nightly-1', namespace: 'default', ownerReferences: [{ kind: 'Task', name: 'nightly', uid: task.metadata.uid }] },
    spec: { taskRef: { name: 'nightly' }, trigger: { type: 'manual', scheduledTime: new Date().toISOString() } },
  })
  const executor = createJobExecutor({ kubeConfig, namespace: 'default', images: { python: 'registry.example/runner-python:3.12.7', node: 'registry.example/runner-node:22.11' } })
  const result = await executor.execute({
    runName: run.metadata.name,
    namespace: 'default',
    taskName: 'nightly',
    taskUid: task.metadata.uid,
    runtime: 'python',
    source: 'print(1)\n',
    entrypoint: 'main.py',
    env: {},
    envSecretName: 'nightly-env',
    dependencies: [],
    maxRuntimeSec: 10,
    signal: new AbortController().signal,
  } as Parameters<typeof executor.execute>[0])
  t.match(result, { outcome: 'succeeded', exitCode: 0, stderr: '', runtimeVersion: 'python 3.12.7' })
  t.match(result.stdout, /^=== agent-gateway: program output follows ===\nkubelet double: python run of nightly-1 on fake-node\n$/, 'timestamps stripped, sentinel first')
  t.ok(result.durationMs >= 1_200 && result.durationMs <= 2_000, `program duration from the stamped sentinel to the container's end (${result.durationMs} ms)`)
  t.equal(result.installDurationMs, 0)
  t.same(kube.kubelet, { started: 1, completed: 1, vanished: 0 })

  // Restart: refused while down, back on the same port with the same objects, old resumes are 410.
  const informer = new Informer(runs, { namespace: 'default', minBackoffMs: 100 })
  await informer.start()
  t.teardown(() => informer.stop())
  const rv = kube.server.resourceVersion()
  await kube.server.stop()
  const refused = await fetch(`${kube.url}/version`).then(
    () => 'answered',
    (err: Error & { cause?: { code?: string } }) => err.cause?.code,
  )
  t.equal(refused, 'ECONNREFUSED', 'connections refused while down')
  await kube.server.listen()
  t.equal(kube.server.url, `http://127.0.0.1:${kube.port}`)
  t.ok(await runs.get('default', 'nightly-1'), 'the same objects after the restart')
  const resumed = await fetch(`${kube.url}/apis/${api}/namespaces/default/runs?watch=true&resourceVersion=${Number(rv) - 1}`, {
    headers: { authorization: `Bearer ${kube.server.token}` },
  })
  t.match(await resumed.text(), /"type":"ERROR".*"code":410/, 'a resumed watch gets 410 Gone')
  await runs.create({
    apiVersion: api,
    kind: 'Run',
    metadata: { name: 'nightly-2', namespace: 'default', ownerReferences: [{ kind: 'Task', name: 'nightly', uid: task.metadata.uid }] },
    spec: { taskRef: { name: 'nightly' }, trigger: { type: 'manual', scheduledTime: new Date().toISOString() } },
  })
  await until('the informer relisted after the restart', () => informer.get('default', 'nightly-2') !== undefined, 10_000)
  t.ok(informer.stats.lists >= 2, `relisted (${informer.stats.lists} lists, ${informer.stats.gone} after 410)`)
})

t.test('two controllers with Lease election on the fake API server and a kubelet double', async (t) => {
  const dbUrl = await throwawayDatabase(t)
  if (!dbUrl) return
  const redis = await reachableRedis(t)
  if (!redis) return
  const root = mkdtempSync(path.join(os.tmpdir(), 'agw-topology-kube-'))
  const processes = new Map<string, { env: Record<string, string>; port: number; cli?: CliProcess }>()
  const started: (() => Promise<void>)[] = []
  t.teardown(async () => {
    for (const [name, proc] of processes) {
      if (!proc.cli) continue
      if (!t.passing()) t.comment(`${name} output:\n${proc.cli.output().slice(-3000)}`)
      const pgid = proc.cli.child.pid as number
      await Promise.race([proc.cli.stop('SIGTERM'), sleep(10_000)])
      killGroup(pgid)
      disownGroup(pgid)
    }
    for (const done of started.reverse()) await done().catch(() => {})
    rmSync(root, { recursive: true, force: true })
  })

  const chain = await startDevChain({ dataDir: path.join(root, 'chain') })
  started.push(() => chain.close())
  // anvil mines only on a transaction; a real chain produces blocks (the confirmations need them).
  const miner = setInterval(() => {
    void fetch(chain.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}' }).catch(() => {})
  }, 1_000)
  started.push(async () => clearInterval(miner))
  const kube = await startKubeForDrill({ log: (line) => t.comment(line) })
  started.push(() => kube.stop())

  const redisUrl = new URL(redis)
  redisUrl.pathname = `/${9 + ((randomBytes(1)[0] as number) % 7)}`
  const schedulerPort = await freePort()
  const scheduler = `http://127.0.0.1:${schedulerPort}`
  const service = privateKeyToAccount(ANVIL_ACCOUNT_0_KEY).address
  const shared: Record<string, string> = {
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    DATABASE_URL: dbUrl,
    DATABASE_POOL_MAX: '4',
    REDIS_URL: redisUrl.toString(),
    PAY_TO_ADDRESS: service,
    CHAIN_RPC_URL: chain.rpcUrl,
    CHAIN_CONFIRMATIONS: '1',
    SETTLER_PRIVATE_KEY: ANVIL_ACCOUNT_0_KEY,
    MPP_SECRET_KEY: randomBytes(32).toString('hex'),
    SCHEDULER_SECRET_KEY: randomBytes(32).toString('hex'),
    SCHEDULER_INTERNAL_URL: scheduler,
    PUBLIC_SCHEDULER_URL: scheduler,
    SHUTDOWN_GRACE_MS: '3000',
    ...kube.env,
  }
  const dataDir = (name: string) => {
    const dir = path.join(root, name)
    mkdirSync(dir, { recursive: true })
    return dir
  }
  processes.set('scheduler-api-1', {
    port: schedulerPort,
    env: { ...shared, DATA_DIR: dataDir('scheduler-api-1'), SCHEDULER_PORT: String(schedulerPort), OFFER_RECEIPT_SIGNING_KEY: `0x${randomBytes(32).toString('hex')}` },
  })
  for (const name of ['controller-1', 'controller-2']) {
    const port = await freePort()
    processes.set(name, { port, env: { ...shared, ...kube.controllerEnv(name), DATA_DIR: dataDir(name), CONTROLLER_PORT: String(port) } })
  }
  const start = async (name: string): Promise<void> => {
    const proc = processes.get(name) as { env: Record<string, string>; port: number; cli?: CliProcess }
    const role = name.replace(/-\d+$/, '')
    proc.cli = await startCli({ args: [role], env: proc.env, detached: true, readyTimeoutMs: 120_000 })
    ownGroup(proc.cli.child.pid as number)
    await untilReady(`http://127.0.0.1:${proc.port}/readyz`, 60_000)
  }
  const kill = async (name: string): Promise<void> => {
    const proc = processes.get(name) as { cli?: CliProcess }
    const cli = proc.cli as CliProcess
    const pgid = cli.child.pid as number
    killGroup(pgid) // the whole group, as a node dies with its pod
    await cli.stop('SIGKILL')
    disownGroup(pgid)
    proc.cli = undefined
  }

  const { stdout } = await execFileAsync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'migrate'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: dbUrl, LOG_LEVEL: 'warn' },
  })
  t.match(stdout, /migrations applied/)
  const booted = performance.now()
  await Promise.all([...processes.keys()].map(start))
  t.comment(`scheduler-api and two controllers ready in ${((performance.now() - booted) / 1000).toFixed(1)} s`)

  // --- one leader, and it stays ---
  await until('a Lease holder', () => kube.leader() !== undefined, 20_000)
  const first = kube.leader() as NonNullable<ReturnType<typeof kube.leader>>
  t.ok(['controller-1', 'controller-2'].includes(first.name), `the Lease names a controller (${first.identity})`)
  await sleep(2 * RETRY_MS + 500)
  const steady = kube.leader()
  t.equal(steady?.identity, first.identity, 'the same holder a few renewals later')
  t.equal(steady?.transitions, 0, 'no transitions between two healthy candidates')
  t.not(steady?.renewTime, first.renewTime, 'the leader renews')

  // --- a paid task; its runs go through the kubelet double ---
  const wallet: PrivateKeyAccount = privateKeyToAccount(generatePrivateKey())
  await chain.mint(wallet.address, 5_000_000n)
  const pay = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(wallet)).setSpendControls(false))
  const created = await pay(`${scheduler}/api/v1/tasks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': randomBytes(8).toString('hex'), 'x-pay-amount-micros': '1000000' },
    body: JSON.stringify({ runtime: 'python', entrypoint: 'main.py', source: 'print(1)', max_runtime_sec: 10, max_sibling_calls: 0, max_amount_usdc_micros: 1_000_000 }),
  })
  const task = await json(created)
  t.equal(created.status, 201, `task created (${JSON.stringify(task).slice(0, 300)})`)
  const base = `${scheduler}/api/v1/tasks/${task.id}`
  const runs = async (): Promise<Json[]> => (await json(await ownerCall(wallet, `${base}/runs`))).runs ?? []
  /** Triggers a run and resolves with its id once its Job exists. */
  const trigger = async (): Promise<string> => {
    const before = new Set(kube.jobs().map((job) => job.metadata.name))
    const res = await ownerCall(wallet, `${base}/trigger`, { method: 'POST' })
    t.equal(res.status, 202, 'trigger queued')
    await res.body?.cancel()
    let runId = ''
    await until(
      'the triggered run has its Job',
      () => {
        const job = kube.jobs().find((j) => !before.has(j.metadata.name))
        runId = job?.metadata.labels?.['jobs.agent-gateway.dev/run'] ?? ''
        return runId !== ''
      },
      30_000,
    )
    return runId
  }
  const finished = async (runId: string, timeoutMs: number): Promise<Json> => {
    await until(`run ${runId} finished`, async () => (await runs()).some((run) => run.id === runId && run.finished_at !== null), timeoutMs, 500)
    return json(await ownerCall(wallet, `${scheduler}/api/v1/runs/${runId}`))
  }

  const run1 = await trigger()
  const view1 = await finished(run1, 30_000)
  t.match(view1, { status: 'succeeded', exit_code: 0 }, 'the first run succeeded through the double')
  t.match(view1.stdout, /kubelet double: python run of/, 'the pod log is the run output')
  t.ok(view1.duration_ms >= 500 && view1.duration_ms <= 5_000, `a plausible duration (${view1.duration_ms} ms)`)
  t.ok(BigInt(view1.cost_micros) > 0n, `charged (${view1.cost_micros} micros)`)

  // --- the leader dies mid-run ---
  const run2 = await trigger()
  await until('the pod of run 2 runs', () => (kube.jobs(run2)[0]?.status as Json | undefined)?.active === 1, 10_000)
  const killedAt = performance.now()
  await kill(first.name)
  const other = first.name === 'controller-1' ? 'controller-2' : 'controller-1'
  await until('the other controller takes the Lease', () => kube.leader()?.name === other, TAKEOVER_MS + 5_000, 100)
  const takeoverMs = performance.now() - killedAt
  t.comment(`takeover after kill -9 of ${first.name}: ${(takeoverMs / 1000).toFixed(1)} s`)
  t.ok(takeoverMs <= TAKEOVER_MS, `within the lease duration plus two retry periods (${Math.round(takeoverMs)} ms)`)
  t.equal(kube.leader()?.transitions, 1, 'one transition')
  const view2 = await finished(run2, 30_000)
  t.match(view2, { status: 'succeeded', exit_code: 0 }, 'the run in flight during the kill finished under the new leader (its Job adopted)')
  t.comment(`run 2 settled ${((performance.now() - killedAt) / 1000).toFixed(1)} s after the kill`)

  // The killed controller comes back (restartPolicy: Always) and follows.
  await start(first.name)
  await sleep(RETRY_MS * 2)
  t.equal(kube.leader()?.name, other, 'the restarted controller follows')

  // --- the API server restarts: watches end, connections are refused, resumes get 410 ---
  const leaderBefore = kube.leader()?.identity
  for (const downMs of [3_000, 0]) {
    const mark = kube.server.requests.length
    const expiredBefore = kube.server.stats.expiredWatches
    const restartedAt = performance.now()
    const restarting = kube.restartApiServer(downMs)
    if (downMs > 0) {
      // A request that needs the API server while it is away: a retryable 503, never a 500.
      await sleep(300)
      const during = await ownerCall(wallet, `${base}/trigger`, { method: 'POST' })
      const problem = await json(during)
      t.equal(during.status, 503, `trigger while the API server is down: 503 (${JSON.stringify(problem).slice(0, 200)})`)
      t.ok(during.headers.get('retry-after'), 'with Retry-After')
    }
    await restarting
    const run = await trigger()
    const view = await finished(run, 45_000)
    t.match(view, { status: 'succeeded', exit_code: 0 }, `a run after a ${downMs} ms API server restart succeeded`)
    const lists = kube.server.requests.slice(mark).filter((r) => r.method === 'GET' && /\/namespaces\/default\/(runs|tasks)(\?|$)/.test(r.path) && !/watch=(true|1)/.test(r.path))
    t.ok(lists.length >= 2, `the leader's informers relisted Runs and Tasks (${lists.length} lists)`)
    t.comment(
      `API restart (${downMs} ms down): next run settled ${((performance.now() - restartedAt) / 1000).toFixed(1)} s after the restart began; ${kube.server.stats.expiredWatches - expiredBefore} watches answered 410`,
    )
    await sleep(RETRY_MS * 2)
    t.equal(kube.leader()?.identity, leaderBefore, 'the leader kept the Lease (down less than the renew deadline)')
  }

  // The follower came through the restarts too: it takes over when the leader dies now.
  const killedAgainAt = performance.now()
  await kill(other)
  await until('the first controller takes the Lease back', () => kube.leader()?.name === first.name, TAKEOVER_MS + 5_000, 100)
  const secondTakeoverMs = performance.now() - killedAgainAt
  t.comment(`second takeover (after the API restarts): ${(secondTakeoverMs / 1000).toFixed(1)} s`)
  t.ok(secondTakeoverMs <= TAKEOVER_MS, `within the lease duration plus two retry periods (${Math.round(secondTakeoverMs)} ms)`)
  const run5 = await trigger()
  t.match(await finished(run5, 30_000), { status: 'succeeded', exit_code: 0 }, 'a run under the third leader succeeded')

  // --- never a second Job or a second charge for one run ---
  const all = await runs()
  t.equal(all.length, 5, 'five runs')
  t.ok(
    all.every((run) => run.status === 'succeeded'),
    'all succeeded',
  )
  const seen = kube.jobHistory()
  t.same(seen.map((job) => job.run).sort(), all.map((run) => run.id).sort(), 'exactly one Job per run (the double saw every Job)')
  const jobPosts = kube.server.requests.filter((r) => r.method === 'POST' && /\/apis\/batch\/v1\/namespaces\/default\/jobs(\?|$)/.test(r.path) && r.status === 201)
  t.equal(jobPosts.length, 5, 'five Jobs created in all')
  const db = await openDb({ kind: 'postgres', url: dbUrl, poolMax: 1 })
  const charges = await db.query<{ run_id: string; n: number }>(`select run_id, count(*)::int as n from scheduler_ledger where kind = 'run_cost' group by run_id`)
  await db.close()
  t.equal(charges.length, 5, 'a run_cost for each run')
  t.ok(
    charges.every((row) => row.n === 1),
    'each charged once',
  )
  t.same(kube.kubelet, { started: 5, completed: 5, vanished: 0 }, 'the double ran five pods')
})
