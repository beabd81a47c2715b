// The Kubernetes client plumbing of controllers/kubernetes/store.ts: one dispatcher per cluster and
// TLS material however often client-node asks (shareConnections), and resource calls sent straight
// to it (directHttpLibrary) carrying what client-node's fetch path sends, with the same answers.
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { CustomObjectsApi, KubeConfig, PatchStrategy, setHeaderOptions, Watch } from '@kubernetes/client-node'
import { apiStatus, DirectWatch, makeCustomObjectsApi, shareConnections } from '../../controllers/kubernetes/store.ts'

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

interface WatchOutcome {
  events: [string, unknown][]
  end: string
  request: Seen | undefined
}

t.test("DirectWatch hands on what client-node's Watch hands on, and ends the same ways", async (t) => {
  const seen: Seen[] = []
  const events = [
    { type: 'ADDED', object: { kind: 'Run', metadata: { name: 'ünïcödé-😀', resourceVersion: '5' } } },
    { type: 'MODIFIED', object: { kind: 'Run', metadata: { name: 'b', resourceVersion: '6' }, status: { phase: 'Running' } } },
    { type: 'BOOKMARK', object: { kind: 'Run', metadata: { resourceVersion: '9' } } },
    { type: 'ERROR', object: { kind: 'Status', code: 410, message: 'too old resource version' } },
  ]
  const stream = Buffer.from(`${events.map((e) => JSON.stringify(e)).join('\n')}\nnot json\n\n${JSON.stringify(events[0])}`) // the last line unterminated
  const server = createServer((req, res) => {
    // The User-Agent differs: fetch sends its own ("undici"), the direct path none.
    seen.push({ method: req.method, url: req.url, headers: { authorization: req.headers.authorization, accept: req.headers.accept }, body: '' })
    if (req.url?.includes('resourceVersion=gone')) {
      res.writeHead(410, { 'content-type': 'application/json' })
      return res.end(JSON.stringify({ kind: 'Status', code: 410 }))
    }
    if (req.url?.includes('resourceVersion=silent')) return void res.writeHead(200, { 'content-type': 'application/json' }).flushHeaders()
    res.writeHead(200, { 'content-type': 'application/json' })
    // Chunks of 7 bytes: lines, and the multi-byte characters, split across chunks.
    let at = 0
    const next = () => {
      if (at >= stream.length) return void res.end()
      res.write(stream.subarray(at, (at += 7)), () => setImmediate(next))
    }
    next()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  type AnyWatch = { requestTimeoutMs: number; watch: DirectWatch['watch'] }
  const watchWith = (watch: AnyWatch, resourceVersion: string) =>
    new Promise<WatchOutcome>((resolve) => {
      const got: [string, unknown][] = []
      seen.splice(0)
      void watch.watch(
        '/apis/jobs.agent-gateway.dev/v1alpha1/namespaces/ns/runs',
        { resourceVersion, allowWatchBookmarks: true },
        (type, object) => void got.push([type, object]),
        (err) => {
          const e = err as { name?: string; statusCode?: number } | null
          resolve({ events: got, end: e === null ? 'closed' : `${e.name ?? ''} ${e.statusCode ?? ''}`.trim(), request: seen[0] })
        },
      )
    })
  for (const resourceVersion of ['1', 'gone', 'silent']) {
    const shipped = new Watch(kubeConfig(base)) as unknown as AnyWatch
    const direct = new DirectWatch(kubeConfig(base))
    shipped.requestTimeoutMs = direct.requestTimeoutMs = 300
    const want = await watchWith(shipped, resourceVersion)
    const got = await watchWith(direct, resourceVersion)
    t.same(got, want, `resourceVersion=${resourceVersion}: the same events, end and request`)
    if (resourceVersion === '1')
      t.same(
        got.events.map(([type]) => type),
        ['ADDED', 'MODIFIED', 'BOOKMARK', 'ERROR', 'ADDED'],
        'every line, the unterminated last one too',
      )
    if (resourceVersion === 'gone') t.equal(got.end, 'Error 410')
    if (resourceVersion === 'silent') t.equal(got.end, 'TimeoutError', 'no byte for requestTimeoutMs: a TimeoutError')
  }
  t.match(seen[0]?.headers, { authorization: 'Bearer secret-token' })
})
