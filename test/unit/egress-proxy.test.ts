// The egress proxy (src/platform/egress-proxy.ts) applies the one egress rule of src/platform/egress.ts:
// hosts compared as DNS sees them (no trailing dots, any case, IPv6 allow entries in brackets),
// IP literals never handed to the resolver, an unresolvable host 502 and a refused address 403.
// The sandbox's use of it, through bubblewrap: test/integration/sandbox.test.ts.
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import t from 'tap'
import { createEgressProxy, type EgressLogEntry } from '../../src/platform/egress-proxy.ts'

const answers: Record<string, string[]> = {
  localhost: ['127.0.0.1'],
  'svc.test': ['10.0.0.5'],
  'public.test': ['93.184.215.14'],
}

function resolver(looked: string[]) {
  return async (host: string) => {
    looked.push(host)
    const found = answers[host]
    if (found === undefined) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
    return found.map((address) => ({ address, family: net.isIP(address) }))
  }
}

t.test('check: the rule of egress.ts, hosts compared as DNS sees them', async (t) => {
  const looked: string[] = []
  const proxy = createEgressProxy({ lookup: resolver(looked), allow: ['SVC.test:8080', '[::1]:8443'], denyAddresses: [] })
  t.match(await proxy.check('svc.test.', 8080), { ok: true, address: '10.0.0.5' }, 'an allowed host:port matches with a trailing dot')
  t.match(await proxy.check('SVC.TEST', 8080), { ok: true, address: '10.0.0.5' }, 'and in any case')
  t.match(await proxy.check('::1', 8443), { ok: true, address: '::1' }, 'an IPv6 allow entry is written in brackets, as the client names it')
  t.match(await proxy.check('[::1]', 8443), { ok: true, address: '::1' })
  t.match(await proxy.check('::1', 8444), { ok: false, status: 403 }, 'only that port')
  looked.length = 0
  for (const literal of ['127.0.0.1.', '127.0.0.1..', '0x7f.1..', '169.254.169.254.']) {
    t.match(await proxy.check(literal, 80), { ok: false, status: 403 }, `${literal} is judged as the address it spells`)
  }
  t.same(looked, [], 'IP literals with trailing dots never went to the resolver')
  t.match(await proxy.check('LOCALHOST.', 80), { ok: false, status: 403, address: '127.0.0.1', reason: /localhost resolves to 127\.0\.0\.1: loopback/ })
  t.same(looked, ['localhost'], 'a name is looked up without its dots, in lower case')
  t.match(await proxy.check('nowhere.test', 443), { ok: false, status: 502, reason: /cannot resolve nowhere\.test: ENOTFOUND/ }, 'unresolvable: 502, not 403')
  t.match(await proxy.check('public.test', 443), { ok: true, address: '93.184.215.14' })
})

t.test('denyAddresses: a public address of this host is refused, and revokeAllow ends the exemptions', async (t) => {
  const proxy = createEgressProxy({ lookup: resolver([]), allow: ['svc.test:8080'], denyAddresses: ['93.184.215.14'] })
  t.match(await proxy.check('public.test', 443), { ok: false, status: 403, reason: /nor are this host's own addresses/ })
  t.match(await proxy.check('svc.test', 8080), { ok: true })
  proxy.revokeAllow()
  t.match(await proxy.check('svc.test', 8080), { ok: false, status: 403 }, 'exemption revoked')
})

/** One CONNECT through the proxy, then a GET inside the tunnel; the proxy's status line and the tunnelled answer. */
function connectThrough(proxyPort: number, authority: string): Promise<{ status: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(proxyPort, '127.0.0.1')
    let text = ''
    socket.on('error', reject)
    socket.on('data', (chunk) => {
      text += chunk.toString()
      if (/^HTTP\/1\.1 200/.test(text) && text.includes('\r\n\r\n') && !text.includes('tunnel-ok')) {
        socket.write(`GET / HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`)
      }
    })
    socket.on('end', () => resolve({ status: text.split('\r\n')[0] ?? '', body: text }))
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
  })
}

t.test('CONNECT: an allowed host:port named with a trailing dot and in capitals is tunnelled; others refused', async (t) => {
  const upstream = http.createServer((_request, response) => response.end('tunnel-ok'))
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const upstreamPort = (upstream.address() as AddressInfo).port
  const log: EgressLogEntry[] = []
  const proxy = createEgressProxy({ lookup: resolver([]), allow: [`localhost:${upstreamPort}`], denyAddresses: [], onLog: (entry) => log.push(entry) })
  await proxy.listen(0)
  t.teardown(async () => {
    await proxy.close()
    upstream.close()
  })
  const proxyPort = (proxy.address() as AddressInfo).port

  const allowed = await connectThrough(proxyPort, `LOCALHOST.:${upstreamPort}`)
  t.match(allowed.status, /^HTTP\/1\.1 200/)
  t.match(allowed.body, /tunnel-ok/, 'the tunnel reaches the allowed service')
  const refused = await connectThrough(proxyPort, `localhost.:${upstreamPort + 1}`)
  t.match(refused.status, /^HTTP\/1\.1 403/, 'another port of the same host is refused')
  t.match(refused.body, /localhost resolves to 127\.0\.0\.1/)
  t.match(log, [
    { kind: 'connect', host: `localhost.`, port: upstreamPort, address: '127.0.0.1', decision: 'allowed' },
    { kind: 'connect', host: 'localhost.', port: upstreamPort + 1, decision: 'refused', status: 403 },
  ])
})
