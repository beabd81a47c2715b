// The Kubernetes client plumbing of controllers/kubernetes/store.ts: one dispatcher per cluster and
// TLS material however often client-node asks (shareConnections), and resource calls sent straight
// to it (directHttpLibrary) carrying what client-node's fetch path sends, with the same answers.
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node'
import { apiStatus, makeCustomObjectsApi, shareConnections } from '../../controllers/kubernetes/store.ts'

function kubeConfig(server: string): KubeConfig {
  const kc = new KubeConfig()
  kc.loadFromOptions({
    clusters: [{ name: 'c', server, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'secret-token' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  })
  return kc
}

type CreateDispatcher = (cluster: unknown, options: Record<string, unknown>) => { close(): Promise<void> }

t.test('shareConnections: one dispatcher per cluster and TLS material, matched by content', async (t) => {
  const kc = shareConnections(kubeConfig('https://127.0.0.1:6443'))
  const create = (kc as unknown as { createDispatcher: CreateDispatcher }).createDispatcher.bind(kc)
  const cluster = kc.getCurrentCluster()
  const first = create(cluster, { ca: Buffer.from('ca-1'), rejectUnauthorized: false })
  t.equal(create(cluster, { ca: Buffer.from('ca-1'), rejectUnauthorized: false }), first, 'equal material in fresh Buffers: the same dispatcher')
  t.equal(create({ ...cluster }, { ca: Buffer.from('ca-1'), rejectUnauthorized: false, servername: undefined }), first, 'an equal cluster object, an undefined option')
  const rotated = create(cluster, { ca: Buffer.from('ca-2'), rejectUnauthorized: false })
  t.not(rotated, first, 'another CA: another dispatcher')
  t.not(create(cluster, { ca: Buffer.from('ca-1'), rejectUnauthorized: true }), first, 'another setting: another dispatcher')
  t.not(create({ ...cluster, server: 'https://10.0.0.1' }, { ca: Buffer.from('ca-1'), rejectUnauthorized: false }), first, 'another cluster: another dispatcher')
  t.equal(shareConnections(kc), kc, 'applying it twice is harmless')
  t.equal(create(cluster, { ca: Buffer.from('ca-2'), rejectUnauthorized: false }), rotated)
  for (let i = 0; i < 5; i += 1) create(cluster, { ca: Buffer.from(`other-${i}`) })
  t.not(create(cluster, { ca: Buffer.from('ca-1'), rejectUnauthorized: false }), first, 'at most a few are kept; the oldest is closed')
})

interface Seen {
  method: string | undefined
  url: string | undefined
  headers: Record<string, string | undefined>
  body: string
}

t.test('directHttpLibrary sends what the fetch path sends and reads the same answers', async (t) => {
  const seen: Seen[] = []
  const server = createServer(async (req: IncomingMessage, res) => {
    let body = ''
    for await (const chunk of req) body += String(chunk)
    const pick = ['authorization', 'user-agent', 'accept', 'content-type', 'content-length']
    seen.push({ method: req.method, url: req.url, headers: Object.fromEntries(pick.map((h) => [h, req.headers[h] as string | undefined])), body })
    if (req.url?.includes('/missing')) {
      res.writeHead(404, { 'content-type': 'application/json' })
      return res.end(JSON.stringify({ kind: 'Status', code: 404, reason: 'NotFound', message: 'runs "missing" not found' }))
    }
    if (req.url?.includes('/taken')) {
      res.writeHead(409, { 'content-type': 'application/json' })
      return res.end(JSON.stringify({ kind: 'Status', code: 409, reason: 'AlreadyExists', message: 'runs "taken" already exists' }))
    }
    // Repeated headers: fetch joins them with ", ".
    res.setHeader('warning', ['299 - "one"', '299 - "two"'])
    res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' })
    res.end(
      JSON.stringify({ apiVersion: 'jobs.agent-gateway.dev/v1alpha1', kind: 'Run', metadata: { name: 'r', resourceVersion: '7' }, echo: body === '' ? null : JSON.parse(body) }),
    )
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const ref = { group: 'jobs.agent-gateway.dev', version: 'v1alpha1', namespace: 'ns', plural: 'runs' }

  const exercise = async (api: CustomObjectsApi) => {
    const out: unknown[] = []
    out.push(await api.getNamespacedCustomObject({ ...ref, name: 'r' }))
    out.push(await api.createNamespacedCustomObject({ ...ref, body: { metadata: { name: 'r' }, spec: { note: 'ünïcödé' } }, fieldManager: 'm' }))
    out.push(
      await api.patchNamespacedCustomObjectStatus(
        { ...ref, name: 'r', body: { metadata: { resourceVersion: '6' }, status: { phase: 'Pending' } }, fieldManager: 'm' },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      ),
    )
    out.push(await api.listNamespacedCustomObject({ ...ref, labelSelector: 'a=b,c=d' }))
    for (const name of ['missing', 'taken']) {
      try {
        await api.getNamespacedCustomObject({ ...ref, name })
        out.push('no error')
      } catch (err) {
        out.push(apiStatus(err))
      }
    }
    const headers = await api.getNamespacedCustomObjectWithHttpInfo({ ...ref, name: 'r' })
    out.push(headers.headers.warning)
    return out
  }

  const fetchApi = kubeConfig(base).makeApiClient(CustomObjectsApi) // client-node as shipped: fetch
  const viaFetch = await exercise(fetchApi)
  const fetchSeen = seen.splice(0)
  const viaDirect = await exercise(makeCustomObjectsApi(kubeConfig(base)))
  const directSeen = seen.splice(0)

  t.same(viaDirect, viaFetch, 'the same results and errors')
  t.equal(viaDirect.at(-1), '299 - "one", 299 - "two"', 'repeated response headers joined as fetch joins them')
  t.same(viaDirect.slice(4, 6), [
    { code: 404, reason: 'NotFound', message: 'runs "missing" not found' },
    { code: 409, reason: 'AlreadyExists', message: 'runs "taken" already exists' },
  ])
  t.same(directSeen, fetchSeen, 'the same requests: method, path and query, auth, User-Agent, Accept, Content-Type, body')
  t.match(directSeen[0]?.headers, { authorization: 'Bearer secret-token', 'user-agent': /^kubernetes-client-javascript\// })
  t.equal(directSeen[2]?.headers['content-type'], 'application/merge-patch+json')
})
