// Task controller throughput on the Kubernetes backend: N Tasks (default 10,000), each with one due
// cron slot, against the fake API server (test/helpers/fake-kube-apiserver.ts) in a CHILD process,
// so this process is the controller alone (its RSS and heap are the controller's). Measured: from
// TaskController.start() (list + watch of Tasks and Runs) until every Task has its Run created and
// its status written and the work queue is quiet; then verified by listing.
//   node bench/k8s-reconcile.bench.ts                       (10,000 tasks, controller concurrency 4)
//   BENCH_TASKS=2000 BENCH_CONCURRENCY=16 node bench/k8s-reconcile.bench.ts
//   BENCH_FAKE_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/p" node --cpu-prof bench/k8s-reconcile.bench.ts
// Also reported: the fake API server's CPU over the same interval (from /proc: it shares the 2
// cores with the controller here, which a real API server would not) and the load average.
// The floor, run first in the same process against the same fake: the three API calls a Task costs
// (create the Run, write the Run's status, merge-patch the Task's status) made by a bare loop through
// the same stores, client and concurrency, on N Tasks of a namespace of their own, with the calls'
// bodies decided beforehand by the same pure reconciler: no informers, no watch events, no work
// queue. The result is the controller's Tasks/s as a ratio of the floor's (target ≥ 0.75).
// There is no peer run here: no real kube-apiserver is available offline (see docs/BENCHMARKS.md).
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { fileURLToPath } from 'node:url'
import { KubeConfig } from '@kubernetes/client-node'
import { runOf, statusPatch, TaskController } from '../controllers/task-controller.ts'
import { reconcileTask } from '../controllers/task-reconciler.ts'
import type { ResourceStore, TaskResource } from '../src/scheduler/contract/index.ts'
import { createKubernetesStores } from '../controllers/kubernetes/store.ts'
import { CRD_API_VERSION } from '../controllers/kubernetes/crds.ts'
import { FakeClock } from '../test/helpers/resource-store-contract.ts'

const NAMESPACE = 'bench'
const FLOOR_NAMESPACE = 'bench-floor'
/** The controller's Tasks/s over the floor's this bench is held to. */
const TARGET_RATIO = 0.75
/** USER_HZ: /proc times are in these ticks (100 on every Linux build that matters). */
const CLOCK_TICKS = 100

if (process.argv.includes('--serve-fake')) {
  // Child: the fake API server, until stdin closes.
  const { startFakeKubeApiServer } = await import('../test/helpers/fake-kube-apiserver.ts')
  const server = await startFakeKubeApiServer({ namespaces: [NAMESPACE, FLOOR_NAMESPACE], watchWindow: 50_000 })
  process.stdout.write(`${JSON.stringify({ kubeconfigPath: server.kubeconfigPath })}\n`)
  process.stdin.resume()
  process.stdin.on('end', () => void server.close().then(() => process.exit(0)))
} else {
  await main()
}

async function main(): Promise<void> {
  const tasksWanted = Number(process.env.BENCH_TASKS ?? 10_000)
  const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 4)
  // BENCH_FAKE_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") goes to the fake's Node.
  const fakeArgs = (process.env.BENCH_FAKE_NODE_ARGS ?? '').split(' ').filter((a) => a !== '')
  const child = spawn(process.execPath, [...fakeArgs, fileURLToPath(import.meta.url), '--serve-fake'], { stdio: ['pipe', 'pipe', 'inherit'] })
  const { kubeconfigPath } = await new Promise<{ kubeconfigPath: string }>((resolve) => child.stdout?.once('data', (b: Buffer) => resolve(JSON.parse(b.toString()))))
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromFile(kubeconfigPath)
  const { tasks, runs } = createKubernetesStores({ kubeConfig, namespace: NAMESPACE })

  // Seed (not timed): N Tasks per namespace, every minute, created "now" on the server's clock.
  const seedStart = performance.now()
  const floorTasks = await seed(tasks, FLOOR_NAMESPACE, tasksWanted)
  await seed(tasks, NAMESPACE, tasksWanted)
  const seedMs = performance.now() - seedStart
  // The controller's clock is 61 s later: exactly one slot is due per Task, well inside its deadline.
  const clock = new FakeClock(new Date(Date.now() + 61_000).toISOString())

  // The floor: the same calls, decided beforehand (not timed), made by `concurrency` bare workers.
  const planned = floorTasks.map((task) => ({ task, actions: reconcileTask({ task, runs: [], now: clock.now() }) }))
  const floorCpu0 = process.cpuUsage()
  const floorStart = performance.now()
  let nextPlanned = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (nextPlanned < planned.length) {
        const { task, actions } = planned[nextPlanned++] as (typeof planned)[number]
        for (const action of actions) if (action.type === 'createRun') await runs.create(runOf(task, action))
        for (const action of actions) {
          if (action.type !== 'patchTaskStatus') continue
          await tasks.patchStatus(FLOOR_NAMESPACE, task.metadata.name, statusPatch(task.status ?? {}, action.status), { resourceVersion: task.metadata.resourceVersion })
        }
      }
    }),
  )
  const floorMs = performance.now() - floorStart
  const floorCpu = process.cpuUsage(floorCpu0)
  const floorRuns = (await runs.list(FLOOR_NAMESPACE)).items.length

  global.gc?.()
  const base = process.memoryUsage()
  let peakRss = base.rss
  let peakHeap = base.heapUsed
  const sampler = setInterval(() => {
    const m = process.memoryUsage()
    peakRss = Math.max(peakRss, m.rss)
    peakHeap = Math.max(peakHeap, m.heapUsed)
  }, 50)
  const errors: unknown[] = []
  const controller = new TaskController({ tasks, runs, clock, namespace: NAMESPACE, concurrency, onError: (_w, err) => errors.push(err) })
  const cpu0 = process.cpuUsage()
  const fakeCpu0 = processCpuSeconds(child.pid)
  const load0 = loadavg()[0] as number
  const start = performance.now()
  await controller.start()
  const listedMs = performance.now() - start
  // Done = every Task reconciled to a Run + status and the queue quiet (Run events re-enqueue Tasks).
  for (;;) {
    await controller.idle()
    const settled = controller.stats.runsCreated + controller.stats.alreadyExists >= tasksWanted
    await new Promise((resolve) => setTimeout(resolve, 200))
    if (settled && (await Promise.race([controller.idle().then(() => true), new Promise((r) => setTimeout(() => r(false), 0))]))) break
  }
  const elapsedMs = performance.now() - start - 200
  const cpu = process.cpuUsage(cpu0)
  const fakeCpu = processCpuSeconds(child.pid)
  clearInterval(sampler)
  const end = process.memoryUsage()
  await controller.stop()

  const runList = await runs.list(NAMESPACE)
  const taskList = await tasks.list(NAMESPACE)
  const withStatus = taskList.items.filter((task) => task.status?.lastScheduleTime !== undefined && (task.status.active?.length ?? 0) === 1).length
  child.stdin?.end()

  const MiB = 1024 * 1024
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    tasks: tasksWanted,
    controllerConcurrency: concurrency,
    seedTasksPerSec: Math.round((2 * tasksWanted) / (seedMs / 1000)),
    floor: {
      what: '3 API calls per Task (create Run, Run status, Task status) by bare workers, same client, fake and concurrency',
      seconds: Number((floorMs / 1000).toFixed(2)),
      tasksPerSec: Math.round(tasksWanted / (floorMs / 1000)),
      clientCpuSeconds: Number(((floorCpu.user + floorCpu.system) / 1e6).toFixed(2)),
      runsCreated: floorRuns,
    },
    initialListMs: Math.round(listedMs),
    reconcileSeconds: Number((elapsedMs / 1000).toFixed(2)),
    tasksPerSec: Math.round(tasksWanted / (elapsedMs / 1000)),
    ratioToFloor: Number((floorMs / elapsedMs).toFixed(2)),
    runsCreated: runList.items.length,
    tasksWithStatus: withStatus,
    stats: controller.stats,
    /** Watch events left out undecoded: echoes of the controller's own writes already in its caches. */
    watchEventsHeld: { tasks: tasks.stats.held, runs: runs.stats.held },
    conflictsRetried: errors.length,
    controllerCpuSeconds: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
    fakeApiServerCpuSeconds: fakeCpu === undefined || fakeCpu0 === undefined ? null : Number((fakeCpu - fakeCpu0).toFixed(2)),
    /** 1-minute load average of the machine at start()/at the end: this 2-core machine is shared. */
    loadAverage: [Number(load0.toFixed(2)), Number((loadavg()[0] as number).toFixed(2))],
    rssMiB: { before: Math.round(base.rss / MiB), peak: Math.round(peakRss / MiB), after: Math.round(end.rss / MiB) },
    heapUsedMiB: { before: Math.round(base.heapUsed / MiB), peak: Math.round(peakHeap / MiB), after: Math.round(end.heapUsed / MiB) },
  }
  console.log(JSON.stringify(result, null, 2))
  const verdict = result.ratioToFloor >= TARGET_RATIO ? 'MEETS' : 'MISSES'
  console.log(
    `controller ${result.tasksPerSec} Tasks/s, floor ${result.floor.tasksPerSec} Tasks/s: ${result.ratioToFloor}× the floor (${verdict} the target of ≥ ${TARGET_RATIO}×)`,
  )
  if (floorRuns !== tasksWanted) {
    console.error(`floor incomplete: ${floorRuns} runs of ${tasksWanted}`)
    process.exitCode = 1
  }
  if (runList.items.length !== tasksWanted || withStatus !== tasksWanted) {
    console.error(`incomplete: ${runList.items.length} runs, ${withStatus} tasks with status, of ${tasksWanted}`)
    process.exitCode = 1
  }
}

/** Creates `count` every-minute Tasks in `namespace`, 32 at a time; returns them as created. */
async function seed(tasks: ResourceStore<TaskResource>, namespace: string, count: number): Promise<TaskResource[]> {
  const created: TaskResource[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < count) {
        const i = next++
        created[i] = await tasks.create({
          apiVersion: CRD_API_VERSION,
          kind: 'Task',
          metadata: { name: `t-${String(i).padStart(5, '0')}`, namespace },
          spec: { schedule: { cron: '* * * * *' }, concurrencyPolicy: 'Allow' },
        })
      }
    }),
  )
  return created
}

/** utime + stime of a process from /proc (Linux), in seconds; undefined elsewhere. */
function processCpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
  } catch {
    return undefined
  }
}
