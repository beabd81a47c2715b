// The kubernetes executor for the topology drill: the fake API server (test/helpers/fake-kube-apiserver.ts,
// with the project's CRDs) on a fixed port, and a kubelet double that plays the kubelet and the
// Job controller for every Job the controller creates: the pod starts after a short delay, writes
// the bootstrap's sentinel line and some output (stamped, as timestamps=true reads them), and
// terminates with exit 0 after 1-3 s, so the executor's accounting (durations from the log and the
// container times, logs, exit codes) is the one a real cluster gives it.
//
// The roles get `env` (what the chart sets for scheduler-api and controller) plus, per controller,
// `controllerEnv(name)`: HOSTNAME, the pod name the Lease identity starts with (`<HOSTNAME>-<8 hex>`,
// controllers/kubernetes/index.ts), so `leader()` can name the process that holds the Lease.
// Faults: `restartApiServer(downMs)` (connections refused, watches ended, back on the same port
// with the same objects and a compacted watch history: resumed watches get 410) and `leader()`.
import { LABELS, SENTINEL } from '../../controllers/kubernetes/job-spec.ts'
import { DEFAULT_LEASE_NAME } from '../../controllers/kubernetes/index.ts'
import { freePort } from './cli.ts'
import { type FakeKubeApiServer, type KubeObject, startFakeKubeApiServer } from './fake-kube-apiserver.ts'

/** What one run pod does; the default prints a line and exits 0. */
export interface PodBehaviour {
  exitCode: number
  /** Program output after the sentinel line (newline-terminated lines). */
  output: string
  /** Container start → termination. */
  runMs: number
}

export interface KubeDrillOptions {
  /** Port of the API server on 127.0.0.1 (kept across restarts); default a free one. */
  port?: number
  namespace?: string
  /** Job created → container running, ms; default 300-800. */
  startDelayMs?: readonly [number, number]
  /** Container running → terminated, ms; default 1000-3000. */
  runMs?: readonly [number, number]
  /** Overrides the pod's outcome per Job. */
  behaviour?: (job: KubeObject, defaults: PodBehaviour) => PodBehaviour
  /** How often the double looks at Jobs, ms; default 200. */
  pollMs?: number
  random?: () => number
  log?: (line: string) => void
}

export interface LeaseHolder {
  /** holderIdentity, `<HOSTNAME>-<8 hex>`. */
  identity: string
  /** The HOSTNAME part: the process name given to controllerEnv(). */
  name: string
  renewTime: string | undefined
  transitions: number
}

export interface KubeletStats {
  /** Pods started (startJob). */
  started: number
  /** Pods terminated (completeJob). */
  completed: number
  /** Jobs deleted before their pod terminated (a cancelled run). */
  vanished: number
}

export interface KubeDrill {
  server: FakeKubeApiServer
  url: string
  port: number
  namespace: string
  /** For scheduler-api and controller: the chart's SCHEDULER_EXECUTOR and KUBE_NAMESPACE, and the kubeconfig. */
  env: Record<string, string>
  /** For each controller, with a distinct `name` (its process name, e.g. controller-1). */
  controllerEnv(name: string): Record<string, string>
  /** The API server away for `downMs`, then back; the ms it was actually down. */
  restartApiServer(downMs: number): Promise<number>
  /**
   * Who holds the Lease now (read from the fake's state, also while it is down); undefined when
   * nobody does. A killed leader stays the holder until a candidate takes the expired Lease.
   */
  leader(): LeaseHolder | undefined
  /** The run Jobs there now, of one Run (its label) or all (finished Runs beyond the history limit take theirs along). */
  jobs(runName?: string): KubeObject[]
  /** Every Job the double has seen, in order, even after it was deleted: duplicates show here. */
  jobHistory(): Array<{ name: string; uid: string; run: string | undefined }>
  kubelet: KubeletStats
  stop(): Promise<void>
}

const LEASE_API = 'coordination.k8s.io/v1'

type Tracked =
  | { phase: 'pending'; uid: string; dueAt: number }
  | { phase: 'running'; uid: string; sentinelAt: number; finishAt: number; sentinel: boolean; behaviour: PodBehaviour }

function finished(job: KubeObject): boolean {
  const conditions = ((job.status as { conditions?: Array<{ type?: string; status?: string }> } | undefined)?.conditions ?? []).filter((c) => c.status === 'True')
  return conditions.some((c) => c.type === 'Complete' || c.type === 'Failed')
}

function entrypointOf(job: KubeObject): string {
  const containers = (job.spec as { template?: { spec?: { containers?: Array<{ command?: string[]; args?: string[] }> } } } | undefined)?.template?.spec?.containers ?? []
  const command = [...(containers[0]?.command ?? []), ...(containers[0]?.args ?? [])]
  return command.some((part) => part.includes('bootstrap.mjs')) ? 'node' : 'python'
}

export async function startKubeForDrill(options: KubeDrillOptions = {}): Promise<KubeDrill> {
  const namespace = options.namespace ?? 'default'
  const port = options.port ?? (await freePort())
  const random = options.random ?? Math.random
  const log = options.log ?? (() => {})
  const between = ([low, high]: readonly [number, number]) => low + Math.floor(random() * (high - low + 1))
  const server = await startFakeKubeApiServer({ namespaces: [namespace], port })
  const kubelet: KubeletStats = { started: 0, completed: 0, vanished: 0 }
  const tracked = new Map<string, Tracked>()
  const history = new Map<string, { name: string; uid: string; run: string | undefined }>()

  // One step per Job and poll: a kubelet cannot report while the API server is away, so nothing
  // moves then; the pod's own clock (its run time) keeps going, as a real container's does.
  const step = (): void => {
    if (!server.isUp()) return
    const now = Date.now()
    const jobs = new Map(server.list('batch/v1', 'Job', namespace).map((job) => [job.metadata.name, job]))
    for (const [name, entry] of tracked) {
      const job = jobs.get(name)
      if (job !== undefined && job.metadata.uid === entry.uid) continue
      tracked.delete(name)
      kubelet.vanished += 1
    }
    for (const [name, job] of jobs) {
      if (!history.has(job.metadata.uid)) history.set(job.metadata.uid, { name, uid: job.metadata.uid, run: job.metadata.labels?.[LABELS.run] })
      let entry = tracked.get(name)
      if (entry === undefined) {
        if (finished(job)) continue
        entry = { phase: 'pending', uid: job.metadata.uid, dueAt: now + between(options.startDelayMs ?? [300, 800]) }
        tracked.set(name, entry)
      }
      try {
        if (entry.phase === 'pending' && now >= entry.dueAt) {
          server.startJob(namespace, name)
          kubelet.started += 1
          const runtime = entrypointOf(job)
          const defaults: PodBehaviour = {
            exitCode: 0,
            output: `kubelet double: ${runtime} run of ${name} on fake-node\n`,
            runMs: between(options.runMs ?? [1000, 3000]),
          }
          const behaviour = options.behaviour?.(job, defaults) ?? defaults
          entry = { phase: 'running', uid: entry.uid, sentinelAt: now + 50 + between([0, 100]), finishAt: now + behaviour.runMs, sentinel: false, behaviour }
          tracked.set(name, entry)
        }
        if (entry.phase === 'running') {
          if (!entry.sentinel && now >= entry.sentinelAt) {
            server.writeLog(namespace, name, `${SENTINEL}\n`)
            entry.sentinel = true
          }
          if (now >= entry.finishAt) {
            if (!entry.sentinel) server.writeLog(namespace, name, `${SENTINEL}\n`)
            if (entry.behaviour.output !== '') server.writeLog(namespace, name, entry.behaviour.output)
            server.completeJob(namespace, name, { exitCode: entry.behaviour.exitCode, logs: '' })
            kubelet.completed += 1
            tracked.delete(name)
            // A finished Job stays listed (ttlSecondsAfterFinished is not emulated): never tracked again.
          }
        }
      } catch (err) {
        log(`kubelet double: ${name}: ${(err as Error).message}`)
      }
    }
  }
  const timer = setInterval(step, options.pollMs ?? 200)
  timer.unref()

  const env: Record<string, string> = {
    SCHEDULER_EXECUTOR: 'kubernetes',
    KUBE_NAMESPACE: namespace,
    // Outside a pod (no KUBERNETES_SERVICE_HOST) the client reads $KUBECONFIG.
    KUBECONFIG: server.kubeconfigPath,
  }

  return {
    server,
    url: server.url,
    port,
    namespace,
    env,
    kubelet,
    controllerEnv: (name) => ({ HOSTNAME: name }),
    async restartApiServer(downMs) {
      const begun = performance.now()
      await server.stop()
      log(`fake API server down (for ${downMs} ms)`)
      await new Promise((resolve) => setTimeout(resolve, downMs))
      await server.listen()
      const down = performance.now() - begun
      log(`fake API server back on port ${port} after ${Math.round(down)} ms; watch history compacted at resourceVersion ${server.resourceVersion()}`)
      return down
    },
    leader() {
      const lease = server.get(LEASE_API, 'Lease', namespace, DEFAULT_LEASE_NAME) as
        | (KubeObject & { spec?: { holderIdentity?: string; renewTime?: string; leaseTransitions?: number } })
        | undefined
      const identity = lease?.spec?.holderIdentity
      if (identity === undefined || identity === '') return undefined
      return { identity, name: identity.replace(/-[0-9a-f]{8}$/, ''), renewTime: lease?.spec?.renewTime, transitions: lease?.spec?.leaseTransitions ?? 0 }
    },
    jobs(runName) {
      const all = server.list('batch/v1', 'Job', namespace)
      return runName === undefined ? all : all.filter((job) => job.metadata.labels?.[LABELS.run] === runName)
    },
    jobHistory: () => [...history.values()],
    async stop() {
      clearInterval(timer)
      await server.close()
    },
  }
}
