// The whole chain on the Kubernetes backend, against the fake API server with the real
// client-node: a task created through the scheduler service becomes a Task CR; at the slot the Task
// controller creates the Run CR; the Run controller claims it and the Job executor creates a
// sandboxed Job; when the Job completes the Run gets its phase, duration and cost, and the ledger
// charges it once. A controller crash mid-run and a restart never create a second Job.
import t from 'tap'
import { startFakeKubeApiServer } from '../helpers/fake-kube-apiserver.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { openWorld } from '../helpers/scheduler-world.ts'
import { createKubernetesStores, createJobExecutor, loadKubeConfig } from '../../controllers/kubernetes/index.ts'
import { SENTINEL } from '../../controllers/local/sandbox.ts'
import { until as waitUntil } from '../helpers/waiting.ts'

/** Waits here are for retries and workers: up to 15 s before a test fails. */
const until = (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 15_000) => waitUntil(what, check, timeoutMs)

const OWNER = '0x2222222222222222222222222222222222222222'
const API = 'jobs.agent-gateway.dev/v1alpha1'

t.test('scheduler API → Task CR → Run CR at the slot → sandboxed Job → Run phase, duration and cost', async (t) => {
  const clock = new FakeClock('2026-11-24T10:00:30Z')
  const server = await startFakeKubeApiServer({ namespaces: ['default'], now: () => clock.now() })
  t.teardown(() => server.close())
  const kubeConfig = loadKubeConfig({ kubeconfigPath: server.kubeconfigPath })
  const images = { python: 'registry.example/agw/runner-python:3.12.7', node: 'registry.example/agw/runner-node:22.11' }
  const makeExecutor = () => createJobExecutor({ kubeConfig, namespace: 'default', images, clock, waitingGraceMs: 0, resyncMs: 60_000 })
  const world = await openWorld({ clock, stores: createKubernetesStores({ kubeConfig, namespace: 'default' }), makeRunExecutor: makeExecutor })
  t.teardown(() => world.close())

  const taskId = await world.createTask('k8s-1', { owner: OWNER, body: { source: 'print("hi")', max_runtime_sec: 30 } })
  const cr = server.get(API, 'Task', 'default', taskId) as Record<string, any>
  t.ok(cr, 'the Task CR exists')
  t.match(cr.spec, { taskId, runtime: 'python', source: 'print("hi")', suspend: false, schedule: { cron: '* * * * *' } })
  t.notOk(JSON.stringify(cr).includes('max_amount'), 'no money in the CR')

  clock.advance(60_000) // the 10:01 slot
  const runName = `${taskId}-202611241001`
  await until('the Run CR at the slot', () => server.get(API, 'Run', 'default', runName) !== undefined)
  await until('the Job', () => server.list('batch/v1', 'Job', 'default').length === 1)
  const job = server.list('batch/v1', 'Job', 'default')[0] as Record<string, any>
  const pod = job.spec.template.spec
  t.equal(pod.automountServiceAccountToken, false)
  t.equal(pod.enableServiceLinks, false)
  t.equal(pod.securityContext.runAsNonRoot, true)
  t.equal(pod.securityContext.seccompProfile.type, 'RuntimeDefault')
  const container = pod.containers[0]
  t.equal(container.securityContext.allowPrivilegeEscalation, false)
  t.same(container.securityContext.capabilities.drop, ['ALL'])
  t.equal(container.securityContext.readOnlyRootFilesystem, true)
  t.equal(job.metadata.ownerReferences[0].kind, 'Run')

  // The controller dies mid-run; a new one (new executor) adopts the same Job.
  await world.crashAndRestart()
  server.startJob('default', job.metadata.name)
  clock.advance(4_000)
  server.completeJob('default', job.metadata.name, { exitCode: 0, logs: `${SENTINEL}\nhi\n` })
  await until('the Run succeeded', () => (server.get(API, 'Run', 'default', runName) as Record<string, any>)?.status?.phase === 'Succeeded')
  const run = server.get(API, 'Run', 'default', runName) as Record<string, any>
  t.ok(BigInt(run.status.costMicros) > 0n, `cost mirrored on the Run (${run.status.costMicros} micros)`)
  t.equal(server.list('batch/v1', 'Job', 'default').length, 1, 'exactly one Job for the slot across the restart')
  const rows = await world.db.query<{ status: string; cost_micros: bigint }>(`select status, cost_micros from scheduler_runs where id = $1`, [runName])
  t.equal(rows[0]?.status, 'succeeded')
  t.equal(rows[0]?.cost_micros.toString(), run.status.costMicros, 'the CR mirrors the ledger')
  const ledger = await world.db.query(`select 1 from scheduler_ledger where kind = 'run_cost' and run_id = $1`, [runName])
  t.equal(ledger.length, 1, 'charged once')
})
