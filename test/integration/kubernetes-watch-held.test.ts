// The Kubernetes store's watch with WatchOptions.held (controllers/kubernetes/store.ts), against the
// fake API server: an ADDED or MODIFIED event whose version the watcher holds is left out (not
// decoded, taken off the held versions) and the watch resumes past it; a newer version of the same
// object, and a delete, are always delivered.
import t from 'tap'
import { KubeConfig } from '@kubernetes/client-node'
import { createKubernetesStores } from '../../controllers/kubernetes/store.ts'
import { CRD_API_VERSION } from '../../controllers/kubernetes/crds.ts'
import { startFakeKubeApiServer } from '../helpers/fake-kube-apiserver.ts'
import type { TaskResource, WatchEvent } from '../../src/scheduler/contract/index.ts'
import { until } from '../helpers/waiting.ts'

const NS = 'echoes'

t.test('a held event is left out, a newer one and a delete are delivered, a re-watch resumes past it', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: [NS] })
  t.teardown(() => server.close())
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromFile(server.kubeconfigPath)
  const { tasks } = createKubernetesStores({ kubeConfig, namespace: NS })
  const task = await tasks.create({ apiVersion: CRD_API_VERSION, kind: 'Task', metadata: { name: 'a', namespace: NS }, spec: { schedule: { cron: '* * * * *' } } })

  const held = new Map<string, string>()
  const events: string[] = []
  const abort = new AbortController()
  const watching = tasks.watch({ resourceVersion: task.metadata.resourceVersion, signal: abort.signal, held }, (event: WatchEvent<TaskResource>) =>
    events.push(`${event.type} ${event.object.metadata.resourceVersion} ${event.object.status?.phase ?? '-'}`),
  )
  t.teardown(async () => {
    abort.abort()
    await watching
  })

  // The server's counter is the resourceVersion: the next write's version is known beforehand,
  // as if the watcher's cache had taken that write's answer before its event.
  const next = () => String(Number(server.resourceVersion()) + 1)
  const echo = next()
  held.set(echo, `${NS}/a`)
  const written = await tasks.patchStatus(NS, 'a', { phase: 'Active' }, { resourceVersion: task.metadata.resourceVersion })
  t.equal(written.metadata.resourceVersion, echo)
  const newer = await tasks.patchStatus(NS, 'a', { phase: 'Suspended' }, { resourceVersion: written.metadata.resourceVersion })
  await until('the newer event', () => events.length === 1)
  t.same(events, [`MODIFIED ${newer.metadata.resourceVersion} Suspended`], 'the held event was left out, the newer one delivered')
  t.equal(held.has(echo), false, 'taken off the held versions')
  t.equal(tasks.stats.held, 1)

  // A version held for another object's key is no match: delivered.
  held.set(next(), `${NS}/someone-else`)
  const third = await tasks.patchStatus(NS, 'a', { phase: 'Active' }, { resourceVersion: newer.metadata.resourceVersion })
  await until('the third event', () => events.length === 2)
  t.equal(events[1], `MODIFIED ${third.metadata.resourceVersion} Active`)

  // The stream ends and is watched again from the last version seen: nothing is delivered twice.
  held.set(next(), `${NS}/a`)
  const fourth = await tasks.patchStatus(NS, 'a', { phase: 'Suspended' }, { resourceVersion: third.metadata.resourceVersion })
  await until('the fourth held', () => tasks.stats.held === 2)
  const watches = tasks.stats.watches
  server.closeWatches()
  await until('watching again', () => tasks.stats.watches > watches)
  held.set(next(), `${NS}/a`) // even so, a delete is delivered
  await tasks.delete(NS, 'a')
  await until('the delete', () => events.length === 3)
  t.match(events[2], /^DELETED /)
  t.equal(events.filter((line) => line.startsWith(`MODIFIED ${fourth.metadata.resourceVersion} `)).length, 0, 'the held event was not replayed by the re-watch')
  t.equal(tasks.stats.held, 2)
})
