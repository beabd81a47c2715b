// The topology drill's front (an Ingress double) keeps its own connections. With the replica's
// `Keep-Alive: timeout=72` passed through, clients kept sockets for 70 s that the front closed
// after 5 s idle, and a call sent as the front closed one failed without an answer (the drill
// counted it as cut off). The front now says its own keep-alive, so clients drop idle sockets first.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { startFront } from '../helpers/topology-front.ts'

t.test("the front answers with its own connection headers and the replica's body, streamed", async (t) => {
  const replica = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    res.write('data: one\n\n')
    setTimeout(() => res.end('data: two\n\n'), 50)
  })
  replica.keepAliveTimeout = 72_000 // fastify's default
  await new Promise<void>((resolve) => replica.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    replica.closeAllConnections()
    replica.close()
  })
  const front = await startFront('test', [{ prefix: '/', backends: [{ name: 'replica', port: (replica.address() as AddressInfo).port }] }])
  t.teardown(() => front.close())
  for (const method of ['GET', 'POST']) {
    const answer = await fetch(`${front.url}/x`, { method, ...(method === 'POST' ? { body: '{}' } : {}) })
    t.equal(answer.headers.get('keep-alive'), 'timeout=5', `${method}: the front's own keep-alive, not the replica's`)
    t.equal(await answer.text(), 'data: one\n\ndata: two\n\n')
  }
})
