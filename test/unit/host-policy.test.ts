// The Host/Origin guard of every listener (src/platform/host-policy.ts): a rebinding domain's Host
// and a cross-site page's Origin are refused, our own names, loopback names and IP literals are not;
// the guard is on for loopback binds and with ALLOWED_HOSTS, off with `*`.
import t from 'tap'
import { createHostPolicy } from '../../src/platform/host-policy.ts'

const local = createHostPolicy({
  bindHost: '127.0.0.1',
  urls: ['http://127.0.0.1:4020', 'http://127.0.0.1:4021', 'https://gw.example.com', undefined],
  allowedHosts: undefined,
})

t.test('loopback bind: rebinding hosts refused, ours admitted', async (t) => {
  if (!local) throw new Error('the guard must be on for a loopback bind')
  t.match(local.check('evil.example.com', undefined, 'POST'), { code: 'host_not_allowed' })
  t.match(local.check('evil.example.com:4020', undefined, 'GET'), { code: 'host_not_allowed' }, 'GET too: a rebinding page reads answers')
  t.match(local.check('7f000001.c0a80001.rbndr.us:4020', undefined, 'GET'), { code: 'host_not_allowed' })
  t.match(local.check('localhost.evil.example', undefined, 'GET'), { code: 'host_not_allowed' })
  for (const host of ['127.0.0.1:4020', 'localhost:4020', 'LOCALHOST.:4020', '[::1]:4020', 'site.localhost:4025', 'gw.example.com', 'GW.EXAMPLE.COM.', '10.1.2.3:8080']) {
    t.equal(local.check(host, undefined, 'POST'), undefined, `${host} admitted`)
  }
  t.equal(local.check(undefined, undefined, 'GET'), undefined, 'HTTP/1.0 without Host')
  t.match(local.check('', undefined, 'GET'), { code: 'host_not_allowed' }, 'an empty Host is no host of ours')
})

t.test('loopback bind: state-changing requests from other origins refused', async (t) => {
  if (!local) throw new Error('the guard must be on for a loopback bind')
  t.match(local.check('127.0.0.1:4020', 'http://evil.example.com', 'POST'), { code: 'origin_not_allowed' })
  t.match(local.check('127.0.0.1:4020', 'null', 'POST'), { code: 'origin_not_allowed' }, 'a sandboxed frame or file: page')
  t.match(local.check('127.0.0.1:4020', 'http://127.0.0.1:9999', 'DELETE'), { code: 'origin_not_allowed' }, 'another local app')
  t.match(local.check('127.0.0.1:4020', 'not a url', 'PUT'), { code: 'origin_not_allowed' })
  t.equal(local.check('127.0.0.1:4020', 'http://evil.example.com', 'GET'), undefined, 'reads are the host check’s (CORS keeps answers from other origins)')
  t.equal(local.check('127.0.0.1:4020', 'http://127.0.0.1:4020', 'POST'), undefined, 'same-origin page')
  t.equal(local.check('127.0.0.1:4021', 'http://127.0.0.1:4020', 'POST'), undefined, 'a sibling role of ours (the gateway’s pages)')
  t.equal(local.check('gw.example.com', 'https://gw.example.com', 'POST'), undefined)
  t.equal(local.check('127.0.0.1:4020', undefined, 'POST'), undefined, 'no Origin: not a browser page')
})

t.test('other binds: off unless ALLOWED_HOSTS is set; * turns it off', async (t) => {
  t.equal(createHostPolicy({ bindHost: '0.0.0.0', urls: ['https://gw.example.com'], allowedHosts: undefined }), undefined)
  t.equal(createHostPolicy({ bindHost: '127.0.0.1', urls: [], allowedHosts: ['*'] }), undefined)
  const listed = createHostPolicy({ bindHost: '0.0.0.0', urls: ['https://gw.example.com'], allowedHosts: ['agent-gateway.default.svc', '*.internal.example'] })
  if (!listed) throw new Error('ALLOWED_HOSTS turns the guard on')
  t.equal(listed.check('agent-gateway.default.svc:8080', undefined, 'POST'), undefined)
  t.equal(listed.check('a.b.internal.example', 'https://x.internal.example', 'POST'), undefined)
  t.match(listed.check('internal.example', undefined, 'GET'), { code: 'host_not_allowed' }, '*.suffix names subdomains only')
  t.match(listed.check('evil.example.com', undefined, 'GET'), { code: 'host_not_allowed' })
  t.equal(listed.check('10.0.0.7:8080', undefined, 'GET'), undefined, 'kubelet probes by pod IP')
})

t.test('hostile Host values never throw and are refused', async (t) => {
  if (!local) throw new Error('the guard must be on for a loopback bind')
  for (const host of ['\u0000', 'a'.repeat(100_000), '[::1', '127.0.0.1\u200b', 'ｌｏｃａｌｈｏｓｔ', ':::', '[]:80']) {
    const refusal = local.check(host, undefined, 'GET')
    t.ok(refusal === undefined || refusal.code === 'host_not_allowed', JSON.stringify(host.slice(0, 20)))
    if (refusal) t.ok(refusal.detail.length < 300, 'the detail is bounded')
  }
  t.match(local.check('ｌｏｃａｌｈｏｓｔ', undefined, 'GET'), { code: 'host_not_allowed' }, 'full-width letters are not localhost')
})
