// The Kubernetes backend with the REAL @kubernetes/client-node 2.0.1 against the fake API server
// (test/helpers/fake-kube-apiserver.ts, which plays kubelet and the Job controller):
// - the ResourceStore contract shared with the Postgres backend (incl. the TaskController on these
//   stores with a fake clock and the informer's relist on 410 after server.compact());
// - what only this backend does: status writes as server-side apply / merge patch, Background
//   deletes, task env Secrets;
// - Lease leader election with two electors on a fake clock;
// - the Job executor: the sandboxed Job, outcomes, infra errors that never hang, cancel, adoption.
import t from 'tap'
import type { Test } from 'tap'
import { CoordinationV1Api, KubeConfig, V1MicroTime } from '@kubernetes/client-node'
import { Job } from 'kubernetes-models/batch/v1'
import type { Clock } from '../../controllers/task-controller.ts'
import { createKubernetesStores, createTaskEnvSecrets, FIELD_MANAGER, taskEnvSecretName } from '../../controllers/kubernetes/store.ts'
import { LeaderElector } from '../../controllers/kubernetes/leader-election.ts'
import { createJobExecutor, type KubernetesJobExecutor } from '../../controllers/kubernetes/job-executor.ts'
import { CONFIG_KEYS, runJobName, SENTINEL } from '../../controllers/kubernetes/job-spec.ts'
import { openKubernetesBackend } from '../../controllers/kubernetes/index.ts'
import { startFakeKubeApiServer, type FakeKubeApiServer, type KubeObject } from '../helpers/fake-kube-apiserver.ts'
import { API, CONTRACT_NAMESPACES, FakeClock, rejection, resourceStoreContract, until } from '../helpers/resource-store-contract.ts'
import type { ExecutionRequest, ExecutionResult } from '../../src/scheduler/contract/index.ts'

function kubeConfigOf(server: FakeKubeApiServer): KubeConfig {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromFile(server.kubeconfigPath)
  return kubeConfig
}

t.test('ResourceStore contract on the Kubernetes backend', async (t) => {
  let serverClock: Clock | undefined
  const server = await startFakeKubeApiServer({ namespaces: [...CONTRACT_NAMESPACES], now: () => serverClock?.now() ?? new Date() })
  t.teardown(() => server.close())
  const kubeConfig = kubeConfigOf(server)
  resourceStoreContract(t, {
    stores: (options = {}) => {
      // The API server stamps creationTimestamp: it must follow the test's clock.
      if (options.clock !== undefined) serverClock = options.clock
      return createKubernetesStores({ kubeConfig })
    },
    compact: async () => server.compact(),
  })
})

t.test('Kubernetes specifics: SSA and merge status writes, Background deletes, env Secrets', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: ['agents'] })
  t.teardown(() => server.close())
  const kubeConfig = kubeConfigOf(server)
  const { tasks, runs } = createKubernetesStores({ kubeConfig, namespace: 'agents' })
  const task = await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'ssa', namespace: 'agents' }, spec: {} })
  const run = await runs.create({
    apiVersion: API,
    kind: 'Run',
    metadata: { name: 'ssa-1', namespace: 'agents', ownerReferences: [{ kind: 'Task', name: 'ssa', uid: task.metadata.uid }] },
    spec: { taskRef: { name: 'ssa' }, trigger: { type: 'manual', scheduledTime: '2026-11-24T00:00:00.000Z' } },
  })
  const ownerRef = server.get(API, 'Run', 'agents', 'ssa-1')?.metadata.ownerReferences
  t.same(ownerRef, [{ apiVersion: API, kind: 'Task', name: 'ssa', uid: task.metadata.uid, controller: true }], 'owner references carry apiVersion; a sole owner is the controller')

  const mark = server.requests.length
  await runs.patchStatus('agents', 'ssa-1', { phase: 'Running', startTime: '2026-11-24T00:00:01.000Z' })
  const applied = server.requests.slice(mark).find((r) => r.method === 'PATCH')
  t.match(
    applied,
    { path: /\/namespaces\/agents\/runs\/ssa-1\/status\?.*fieldManager=agent-gateway-controller/, contentType: 'application/apply-patch+yaml' },
    'server-side apply to /status',
  )
  t.match(applied?.path, /force=true/, 'apply with force')
  const stored = server.get(API, 'Run', 'agents', 'ssa-1') as KubeObject
  t.ok(
    stored.metadata.managedFields?.some((f) => f.manager === FIELD_MANAGER && f.operation === 'Apply' && f.subresource === 'status'),
    'the status fields are owned by agent-gateway-controller',
  )

  const mark2 = server.requests.length
  const current = await runs.get('agents', 'ssa-1')
  await runs.patchStatus('agents', 'ssa-1', { phase: 'Succeeded' }, { resourceVersion: current?.metadata.resourceVersion ?? '' })
  t.match(
    server.requests.slice(mark2).find((r) => r.method === 'PATCH'),
    { contentType: 'application/merge-patch+json' },
    'a merge patch with a resourceVersion',
  )
  t.same((await runs.get('agents', 'ssa-1'))?.status, { phase: 'Succeeded', startTime: '2026-11-24T00:00:01.000Z' })
  t.equal(run.metadata.generation, 1)

  const mark3 = server.requests.length
  await tasks.delete('agents', 'ssa')
  t.match(
    server.requests.slice(mark3).find((r) => r.method === 'DELETE'),
    { path: /propagationPolicy=Background/ },
    'deletes are Background',
  )
  await until('the owned Run is collected', async () => (await runs.get('agents', 'ssa-1')) === undefined)

  // Task env Secrets: owned by the Task, replaced whole, deleted idempotently.
  const envTask = await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'with-env', namespace: 'agents' }, spec: {} })
  const secrets = createTaskEnvSecrets(kubeConfig, 'agents')
  const name = await secrets.put('with-env', envTask.metadata.uid, { API_KEY: 'k1', OTHER: 'o' })
  t.equal(name, taskEnvSecretName('with-env'))
  t.equal(name, 'with-env-env')
  const first = server.get('v1', 'Secret', 'agents', name) as KubeObject & { data?: Record<string, string> }
  t.same(first.data, { API_KEY: Buffer.from('k1').toString('base64'), OTHER: Buffer.from('o').toString('base64') })
  t.same(first.metadata.ownerReferences, [{ apiVersion: API, kind: 'Task', name: 'with-env', uid: envTask.metadata.uid, controller: true }])
  await secrets.put('with-env', envTask.metadata.uid, { API_KEY: 'k2' })
  const second = server.get('v1', 'Secret', 'agents', name) as KubeObject & { data?: Record<string, string> }
  t.same(second.data, { API_KEY: Buffer.from('k2').toString('base64') }, 'put replaces the env (a removed key is gone)')
  await tasks.delete('agents', 'with-env')
  t.equal(server.get('v1', 'Secret', 'agents', name), undefined, 'the Secret is collected with its Task')
  await secrets.delete('with-env')
  t.pass('delete of a missing Secret is fine')
})

t.test('leader election: two electors on one Lease', async (t) => {
  const clock = new FakeClock('2026-11-24T12:00:00Z')
  const server = await startFakeKubeApiServer({ namespaces: ['agents'], now: () => clock.now() })
  t.teardown(() => server.close())
  const kubeConfig = kubeConfigOf(server)
  const errors: unknown[] = []
  const make = (identity: string) => {
    const state = { started: 0, stopped: 0, signal: undefined as AbortSignal | undefined }
    const elector = new LeaderElector({
      kubeConfig,
      namespace: 'agents',
      leaseName: 'controller',
      identity,
      clock,
      leaseDurationSec: 15,
      renewDeadlineSec: 10,
      retryPeriodSec: 2,
      onStartedLeading: (signal) => {
        state.started += 1
        state.signal = signal
      },
      onStoppedLeading: () => {
        state.stopped += 1
      },
      onError: (err) => errors.push(err),
    })
    t.teardown(() => elector.stop({ release: false }))
    return { elector, state }
  }
  const lease = () =>
    server.get('coordination.k8s.io/v1', 'Lease', 'agents', 'controller') as
      | (KubeObject & { spec: { holderIdentity?: string; renewTime?: string; leaseTransitions?: number } })
      | undefined
  /** Advances the clock one retry period and waits for every running elector to finish its round. */
  const step = async (...electors: LeaderElector[]) => {
    const before = electors.map((e) => e.stats.ticks)
    clock.advance(2000)
    await until('a round of every elector', () => electors.every((e, i) => e.stats.ticks > (before[i] as number)))
  }

  const a = make('a')
  const b = make('b')
  a.elector.start()
  await until('a created the Lease', () => a.elector.stats.ticks >= 1)
  b.elector.start()
  await until('b read it', () => b.elector.stats.ticks >= 1)
  t.ok(a.elector.isLeader, 'the first candidate leads')
  t.notOk(b.elector.isLeader, 'the second follows')
  t.equal(a.state.started, 1)
  t.match(lease()?.spec.renewTime, /\.\d{6}Z$/, 'MicroTime with 6 fractional digits')
  for (let i = 0; i < 10; i += 1) {
    await step(a.elector, b.elector)
    t.ok(a.elector.isLeader && !b.elector.isLeader, `round ${i + 1}: exactly one leader`)
  }
  t.equal(b.state.started, 0, 'the follower never acted')
  t.ok(a.elector.stats.renewed >= 10, 'the leader renewed every round')

  // The leader stops renewing (a crash: no release). b takes over only once the lease expired,
  // 15 s after b last saw the record change.
  const crashedAt = clock.now().getTime()
  await a.elector.stop({ release: false })
  t.ok(a.state.signal?.aborted, "the old leader's work signal aborted")
  let waited = 0
  while (!b.elector.isLeader) {
    await step(b.elector)
    waited += 2000
    if (waited > 30_000) break
    if (!b.elector.isLeader) t.equal(lease()?.spec.holderIdentity, 'a', `${waited / 1000}s: still a's lease`)
  }
  t.ok(b.elector.isLeader, 'b leads after the expiry')
  t.ok(clock.now().getTime() - crashedAt >= 15_000, `not before the lease duration (${(clock.now().getTime() - crashedAt) / 1000}s)`)
  t.ok(clock.now().getTime() - crashedAt <= 15_000 + 2 * 2000, 'within a retry period or two of it')
  t.equal(lease()?.spec.holderIdentity, 'b')
  t.equal(lease()?.spec.leaseTransitions, 1, 'a new holder bumps leaseTransitions')
  t.equal(b.state.started, 1)

  // Someone else takes the Lease (e.g. a partition healed the other way): b stops at once.
  const coordination = kubeConfig.makeApiClient(CoordinationV1Api)
  const current = await coordination.readNamespacedLease({ name: 'controller', namespace: 'agents' })
  const stamp = new V1MicroTime(clock.now().getTime())
  await coordination.replaceNamespacedLease({
    name: 'controller',
    namespace: 'agents',
    body: { ...current, spec: { ...current.spec, holderIdentity: 'intruder', renewTime: stamp, acquireTime: stamp } },
  })
  await step(b.elector)
  t.notOk(b.elector.isLeader, 'b saw another holder')
  t.ok(b.state.signal?.aborted, "b's work signal aborted on losing the lease")
  t.equal(b.state.stopped, 1, 'onStoppedLeading called')

  // A clean stop releases the Lease: the successor does not wait for the expiry.
  const c = make('c')
  await until(
    'intruder lease expired for c',
    async () => {
      if (!c.elector.isLeader) {
        if (c.elector.stats.ticks === 0) c.elector.start()
        else await step(b.elector, c.elector)
      }
      return c.elector.isLeader || b.elector.isLeader
    },
    20_000,
  )
  const leader = c.elector.isLeader ? c : b
  const follower = leader === c ? b : c
  t.notOk(follower.elector.isLeader, 'one leader after the intruder expired')
  await leader.elector.stop()
  t.equal(lease()?.spec.holderIdentity, '', 'released')
  await step(follower.elector)
  t.ok(follower.elector.isLeader, 'the follower takes a released Lease on its next round')
  t.same(errors, [], 'no errors')
})

t.test('leader election: a leader that cannot renew stops within the renew deadline', async (t) => {
  const clock = new FakeClock('2026-11-24T12:00:00Z')
  const server = await startFakeKubeApiServer({ namespaces: ['agents'], now: () => clock.now() })
  let signal: AbortSignal | undefined
  const errors: unknown[] = []
  const elector = new LeaderElector({
    kubeConfig: kubeConfigOf(server),
    namespace: 'agents',
    leaseName: 'controller',
    identity: 'solo',
    clock,
    onStartedLeading: (s) => {
      signal = s
    },
    onError: (err) => errors.push(err),
  })
  t.teardown(() => elector.stop({ release: false }))
  elector.start()
  await until('leading', () => elector.isLeader)
  await server.close() // the API server is gone: every renewal fails
  for (let elapsed = 2000; elapsed < 10_000; elapsed += 2000) {
    const ticks = elector.stats.ticks
    clock.advance(2000)
    await until('a failed round', () => elector.stats.ticks > ticks)
    t.ok(elector.isLeader, `${elapsed / 1000}s without renewal: still leading (deadline 10 s)`)
  }
  clock.advance(2000)
  await until('the watchdog', () => !elector.isLeader)
  t.ok(signal?.aborted, 'work aborted at the renew deadline')
  t.ok(errors.length >= 4, 'the failed renewals were reported')
})

// ------------------------------------------------------------------ the Job executor

interface ExecutorWorld {
  server: FakeKubeApiServer
  clock: FakeClock
  executor: KubernetesJobExecutor
  kubeConfig: KubeConfig
  request(runName: string, overrides?: Partial<ExecutionRequest>): Promise<ExecutionRequest>
  jobsCreated(): number
}

async function executorWorld(t: Test, options: { waitingGraceMs?: number } = {}): Promise<ExecutorWorld> {
  const clock = new FakeClock('2026-11-24T10:00:00Z')
  const server = await startFakeKubeApiServer({ namespaces: ['agents'], now: () => clock.now() })
  t.teardown(() => server.close())
  const kubeConfig = kubeConfigOf(server)
  const { tasks, runs } = createKubernetesStores({ kubeConfig, namespace: 'agents' })
  const task = await tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'nightly', namespace: 'agents' }, spec: {} })
  const executor = createJobExecutor({
    kubeConfig,
    namespace: 'agents',
    images: { python: 'registry.example/agw/runner-python:3.12.7', node: 'registry.example/agw/runner-node:22.11' },
    clock,
    waitingGraceMs: options.waitingGraceMs ?? 0,
    resyncMs: 60_000,
  })
  return {
    server,
    clock,
    executor,
    kubeConfig,
    async request(runName, overrides = {}) {
      await runs.create({
        apiVersion: API,
        kind: 'Run',
        metadata: { name: runName, namespace: 'agents', ownerReferences: [{ kind: 'Task', name: 'nightly', uid: task.metadata.uid }] },
        spec: { taskRef: { name: 'nightly' }, trigger: { type: 'manual', scheduledTime: '2026-11-24T10:00:00.000Z' } },
      })
      return {
        runName,
        namespace: 'agents',
        taskName: 'nightly',
        taskUid: task.metadata.uid,
        runtime: 'python',
        source: 'import requests\nprint("hi")\n',
        entrypoint: 'main.py',
        env: {},
        envSecretName: 'nightly-env',
        dependencies: ['requests==2.32.3'],
        maxRuntimeSec: 60,
        helper: { url: 'http://agent-gateway-helper.agents.svc:4025', token: `token-${runName}` },
        signal: new AbortController().signal,
        ...overrides,
      }
    },
    jobsCreated: () => server.requests.filter((r) => r.method === 'POST' && /\/apis\/batch\/v1\/namespaces\/agents\/jobs(\?|$)/.test(r.path)).length,
  }
}

/** What kubelet returns for `timestamps=true` (the fake serves logs as given). */
function stampedLog(lines: Array<[string, string]>): string {
  return lines.map(([at, text]) => `${at} ${text}\n`).join('')
}

t.test('Job executor: a run to completion', async (t) => {
  const world = await executorWorld(t)
  const { server, clock } = world
  const request = await world.request('nightly-202611241000')
  const jobName = runJobName('nightly-202611241000')
  const running = world.executor.execute(request)
  await until('the Job', () => server.get('batch/v1', 'Job', 'agents', jobName) !== undefined)

  const job = server.get('batch/v1', 'Job', 'agents', jobName) as KubeObject & { spec: { template: { spec: Record<string, unknown> } } }
  const run = server.get(API, 'Run', 'agents', 'nightly-202611241000') as KubeObject
  new Job(job as unknown as ConstructorParameters<typeof Job>[0]).validate()
  t.same(
    job.metadata.ownerReferences,
    [{ apiVersion: API, kind: 'Run', name: 'nightly-202611241000', uid: run.metadata.uid, controller: true, blockOwnerDeletion: true }],
    'owned by the Run (uid looked up)',
  )
  const podSpec = job.spec.template.spec as {
    securityContext: unknown
    automountServiceAccountToken: boolean
    containers: Array<{ securityContext: unknown; envFrom: unknown; env: Array<{ name: string }> }>
  }
  t.same(
    podSpec.securityContext,
    { runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534, fsGroup: 65534, seccompProfile: { type: 'RuntimeDefault' } },
    'the sandbox security context reached the server',
  )
  t.match(podSpec.containers[0]?.securityContext, { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } })
  t.equal(podSpec.automountServiceAccountToken, false)
  t.same(podSpec.containers[0]?.envFrom, [{ secretRef: { name: 'nightly-env', optional: false } }])
  const configMap = server.get('v1', 'ConfigMap', 'agents', `${jobName}-files`) as KubeObject & { data: Record<string, string> }
  t.equal(configMap.data['script.main.py'], request.source)
  t.match(JSON.parse(configMap.data[CONFIG_KEYS.runJson] as string), { entrypoint: '/work/script/main.py', dependencies: ['requests==2.32.3'], installDir: '/tmp/.agw' })
  t.match(configMap.data[CONFIG_KEYS.bootstrap], /agent-gateway task bootstrap \(python\)/, 'the shared bootstrap ships with the run')
  const token = server.get('v1', 'Secret', 'agents', `${jobName}-token`) as KubeObject & { stringData?: Record<string, string> }
  t.same(token.stringData, { token: 'token-nightly-202611241000' })

  server.startJob('agents', jobName)
  clock.advance(5000)
  server.completeJob('agents', jobName, {
    exitCode: 0,
    logs: stampedLog([
      ['2026-11-24T10:00:01.000000000Z', 'Collecting requests==2.32.3'],
      ['2026-11-24T10:00:03.250000000Z', SENTINEL],
      ['2026-11-24T10:00:03.300000000Z', 'hi'],
      ['2026-11-24T10:00:04.500000000Z', 'bye'],
    ]),
  })
  const result = await running
  t.equal(result.outcome, 'succeeded')
  t.equal(result.exitCode, 0)
  t.equal(result.stdout, `Collecting requests==2.32.3\n${SENTINEL}\nhi\nbye\n`, 'merged output in order, kubelet timestamps stripped')
  t.equal(result.stderr, '')
  t.equal(result.stdoutBytes, Buffer.byteLength(result.stdout))
  t.equal(result.startedAt.toISOString(), '2026-11-24T10:00:00.000Z', 'container start')
  t.equal(result.finishedAt.toISOString(), '2026-11-24T10:00:05.000Z', 'container finish')
  t.equal(result.installDurationMs, 3250, 'install: container start → sentinel')
  t.equal(result.durationMs, 1750, 'program: sentinel → finish')
  t.equal(result.runtimeVersion, 'python 3.12.7', 'from the image tag')
  t.equal(server.get('v1', 'ConfigMap', 'agents', `${jobName}-files`), undefined, 'ConfigMap cleaned up')
  t.equal(server.get('v1', 'Secret', 'agents', `${jobName}-token`), undefined, 'token Secret cleaned up')
  t.ok(server.get('batch/v1', 'Job', 'agents', jobName), 'the Job stays for its TTL')
  t.equal(world.jobsCreated(), 1)
})

t.test('Job executor: failures, timeouts, infra errors', async (t) => {
  const world = await executorWorld(t)
  const { server } = world
  const finish = async (runName: string, act: (jobName: string) => void): Promise<ExecutionResult> => {
    const running = world.executor.execute(await world.request(runName))
    const jobName = runJobName(runName)
    await until(`Job ${jobName}`, () => server.get('batch/v1', 'Job', 'agents', jobName) !== undefined)
    act(jobName)
    return running
  }

  const failed = await finish('fail-1', (job) => {
    server.startJob('agents', job)
    server.completeJob('agents', job, { exitCode: 3, logs: `${SENTINEL}\nTraceback (most recent call last):\nValueError: boom\n` })
  })
  t.match(failed, { outcome: 'failed', exitCode: 3, error: 'exited with code 3' })
  t.match(failed.stdout, /ValueError: boom/, 'the traceback is in the (merged) output')

  const oom = await finish('oom-1', (job) => {
    server.startJob('agents', job)
    server.completeJob('agents', job, { exitCode: 137, reason: 'OOMKilled', logs: `${SENTINEL}\n` })
  })
  t.match(oom, { outcome: 'failed', exitCode: 137, error: /OOMKilled/ })

  const timedOut = await finish('slow-1', (job) => {
    server.startJob('agents', job)
    server.completeJob('agents', job, { exitCode: 137, reason: 'DeadlineExceeded', logs: `${SENTINEL}\nstill working\n` })
  })
  t.match(timedOut, { outcome: 'timed_out', error: /DeadlineExceeded/ })

  const imagePull = await finish('pull-1', (job) => server.failPod('agents', job, 'ImagePullBackOff', 'Back-off pulling image "registry.example/agw/runner-python:3.12.7"'))
  t.match(imagePull, { outcome: 'infra_error', exitCode: null, error: /^ImagePullBackOff: Back-off pulling image/ })
  t.equal(server.get('batch/v1', 'Job', 'agents', runJobName('pull-1')), undefined, 'the stuck Job is deleted')

  const missingSecret = await finish('env-1', (job) => server.failPod('agents', job, 'CreateContainerConfigError', 'secret "nightly-env" not found'))
  t.match(missingSecret, { outcome: 'infra_error', error: 'CreateContainerConfigError: secret "nightly-env" not found' })
})

t.test('Job executor: the waiting grace runs on the clock', async (t) => {
  const world = await executorWorld(t, { waitingGraceMs: 60_000 })
  const { server, clock } = world
  let result: ExecutionResult | undefined
  const running = world.executor.execute(await world.request('grace-1')).then((r) => (result = r))
  const jobName = runJobName('grace-1')
  await until('the Job', () => server.get('batch/v1', 'Job', 'agents', jobName) !== undefined)
  server.failPod('agents', jobName, 'ErrImagePull', 'not found')
  await until('the executor saw the waiting pod', () => world.executor.stats.waitingPods === 1)
  clock.advance(59_000)
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(result, undefined, 'still waiting inside the grace period')
  clock.advance(1_000)
  await running
  t.match(result, { outcome: 'infra_error', error: /^ErrImagePull/ })
})

t.test('Job executor: abort deletes the Job (Background) → cancelled', async (t) => {
  const world = await executorWorld(t)
  const { server } = world
  const abort = new AbortController()
  const running = world.executor.execute(await world.request('cancel-1', { signal: abort.signal }))
  const jobName = runJobName('cancel-1')
  await until('the Job', () => server.get('batch/v1', 'Job', 'agents', jobName) !== undefined)
  server.startJob('agents', jobName)
  await until('the pod', () => server.list('v1', 'Pod', 'agents').length === 1)
  const mark = server.requests.length
  abort.abort()
  const result = await running
  t.equal(result.outcome, 'cancelled')
  t.equal(result.exitCode, null)
  t.equal(server.get('batch/v1', 'Job', 'agents', jobName), undefined, 'the Job is deleted')
  t.same(server.list('v1', 'Pod', 'agents'), [], 'and its Pod with it (Background, not the Job default Orphan)')
  t.ok(
    server.requests.slice(mark).some((r) => r.method === 'DELETE' && r.path.includes(`/jobs/${jobName}`) && r.path.includes('propagationPolicy=Background')),
    'DELETE with propagationPolicy=Background',
  )

  const early = new AbortController()
  early.abort()
  const before = world.jobsCreated()
  const notStarted = await world.executor.execute(await world.request('cancel-2', { signal: early.signal }))
  t.equal(notStarted.outcome, 'cancelled')
  t.equal(world.jobsCreated(), before, 'an already-aborted request creates nothing')
})

t.test('Job executor: a restarted controller adopts the running Job', async (t) => {
  const world = await executorWorld(t)
  const { server, kubeConfig, clock } = world
  const request = await world.request('adopt-1')
  const jobName = runJobName('adopt-1')
  const first = world.executor.execute(request)
  await until('the Job', () => server.get('batch/v1', 'Job', 'agents', jobName) !== undefined)
  server.startJob('agents', jobName)

  // A new controller process: its own executor, the same Run and attempt.
  const restarted = createJobExecutor({ kubeConfig, namespace: 'agents', images: { python: 'python:3.12-slim', node: 'node:22-slim' }, clock, waitingGraceMs: 0, resyncMs: 60_000 })
  const second = restarted.execute({ ...request, signal: new AbortController().signal })
  await until('the restarted executor attached', () => restarted.stats.adopted === 1)
  server.completeJob('agents', jobName, { exitCode: 0, logs: `${SENTINEL}\nonce\n` })
  const [a, b] = await Promise.all([first, second])
  t.equal(a.outcome, 'succeeded')
  t.equal(b.outcome, 'succeeded')
  t.equal(b.stdout, `${SENTINEL}\nonce\n`, 'the adopted run reports the same output')
  t.equal(world.jobsCreated(), 1, 'exactly one Job was ever created for the attempt')
  t.equal(restarted.stats.created, 0)

  const retry = world.executor.execute({ ...(await world.request('adopt-2')), attempt: 2 } as ExecutionRequest)
  await until('the attempt-2 Job', () => server.get('batch/v1', 'Job', 'agents', runJobName('adopt-2', 2)) !== undefined)
  server.startJob('agents', runJobName('adopt-2', 2))
  server.completeJob('agents', runJobName('adopt-2', 2), { exitCode: 0, logs: '' })
  t.equal((await retry).outcome, 'succeeded', 'a second attempt is its own Job')
  t.equal(runJobName('adopt-2', 2), 'adopt-2-a2')
})

t.test('openKubernetesBackend wires the parts from a kubeconfig file and a Job template file', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: ['agents'] })
  t.teardown(() => server.close())
  const dir = t.testdir({
    'job-template.yaml':
      'apiVersion: batch/v1\nkind: Job\nspec:\n  ttlSecondsAfterFinished: 42\n  template:\n    spec:\n      runtimeClassName: gvisor\n      containers:\n        - name: script\n',
  })
  const backend = await openKubernetesBackend({ namespace: 'agents', kubeconfigPath: server.kubeconfigPath, jobTemplateFile: `${dir}/job-template.yaml`, env: {} })
  const task = await backend.tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'wired', namespace: 'agents' }, spec: {} })
  t.equal((await backend.tasks.list()).items.length, 1, 'stores scoped to the namespace')
  await backend.envSecrets.put('wired', task.metadata.uid, { A: 'b' })
  t.ok(server.get('v1', 'Secret', 'agents', 'wired-env'))
  const clock = new FakeClock('2026-11-24T10:00:00Z')
  const executor = backend.createExecutor({ clock, waitingGraceMs: 0 })
  await backend.runs.create({
    apiVersion: API,
    kind: 'Run',
    metadata: { name: 'wired-1', namespace: 'agents', ownerReferences: [{ kind: 'Task', name: 'wired', uid: task.metadata.uid }] },
    spec: { taskRef: { name: 'wired' }, trigger: { type: 'manual', scheduledTime: '2026-11-24T10:00:00.000Z' } },
  })
  const running = executor.execute({
    runName: 'wired-1',
    namespace: 'agents',
    taskName: 'wired',
    runtime: 'node',
    source: 'console.log(1)',
    entrypoint: 'main.mjs',
    env: {},
    dependencies: [],
    maxRuntimeSec: 5,
    signal: new AbortController().signal,
  })
  await until('the Job', () => server.get('batch/v1', 'Job', 'agents', 'wired-1') !== undefined)
  const job = server.get('batch/v1', 'Job', 'agents', 'wired-1') as KubeObject & {
    spec: { ttlSecondsAfterFinished: number; template: { spec: { runtimeClassName: string; containers: Array<{ image: string }> } } }
  }
  t.equal(job.spec.ttlSecondsAfterFinished, 42, 'the template file is used')
  t.equal(job.spec.template.spec.runtimeClassName, 'gvisor')
  t.equal(job.spec.template.spec.containers[0]?.image, 'node:22-slim', 'default node image')
  server.startJob('agents', 'wired-1')
  server.completeJob('agents', 'wired-1', { exitCode: 0, logs: `${SENTINEL}\n1\n` })
  t.equal((await running).outcome, 'succeeded')
  let started = false
  const elector = backend.createElector({ clock, onStartedLeading: () => void (started = true) })
  elector.start()
  await until('leading', () => elector.isLeader)
  t.ok(started)
  await elector.stop()
  const err = await rejection(openKubernetesBackend({ namespace: 'agents', kubeconfigPath: server.kubeconfigPath, jobTemplateFile: `${dir}/missing.yaml`, env: {} }))
  t.match(String(err), /ENOENT/, 'a missing template file fails start-up')
})
