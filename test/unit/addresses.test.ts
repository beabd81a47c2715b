// The address rule (src/platform/addresses.ts) sees a host as DNS does: a trailing dot (or several)
// is the root label, case does not matter, brackets are not part of an IPv6 address. So every
// private spelling with trailing dots is refused like its dotless form, by the song request's
// reference-URL rule (src/media/request-rules.ts) and by the egress rule (src/platform/egress.ts).
import t from 'tap'
import { assertPublicHttpUrl, checkSongRequest } from '../../src/media/request-rules.ts'
import { EgressRefused, egressPolicy, resolveTarget } from '../../src/platform/egress.ts'
import { isPrivateHost, normalizeHost } from '../../src/platform/addresses.ts'

const PRIVATE_HOSTS = [
  'localhost',
  'localhost.',
  'localhost..',
  'localhost...',
  'LOCALHOST.',
  'LocalHost..',
  'foo.localhost.',
  'FOO.LOCALHOST..',
  '127.0.0.1',
  '127.0.0.1.',
  '127.0.0.1..',
  '0x7f.1..',
  '2130706433..',
  '0177.0.0.1..',
  '10.0.0.1..',
  '169.254.169.254..',
  '[::1]',
  '[::ffff:127.0.0.1]',
  'metadata.google.internal',
  'metadata.google.internal.',
  'metadata.google.internal..',
  'METADATA.GOOGLE.INTERNAL.',
  'printer.local.',
  'router.home.arpa.',
  'nas.lan..',
  'intranet.',
]

t.test('reference image URLs: trailing dots and case do not make a private host public', async (t) => {
  for (const host of PRIVATE_HOSTS) {
    const url = `http://${host}/a.png`
    t.throws(() => assertPublicHttpUrl(url, 'body.referenceImageUrls.0'), { code: 'validation_error', field: 'body.referenceImageUrls.0' }, `${host} refused`)
    t.throws(() => checkSongRequest({ referenceImageUrls: [url] }), { code: 'validation_error', field: 'body.referenceImageUrls.0' }, `${host} refused by the song rules`)
  }
  for (const host of ['example.com', 'example.com.', 'EXAMPLE.COM..', 'cdn.example.org.', '93.184.216.34.']) {
    t.doesNotThrow(() => assertPublicHttpUrl(`https://${host}/a.png`, 'body.referenceImageUrls.0'), `${host} is public`)
  }
})

t.test('egress: an IP literal with trailing dots is judged as the literal, a name without them', async (t) => {
  const looked: string[] = []
  // A hostile resolver: any name it is asked for is "public". The rule must not depend on it.
  const policy = egressPolicy({
    allow: ['svc.test:8080'],
    lookup: async (host) => {
      looked.push(host)
      if (host === 'localhost') return [{ address: '127.0.0.1', family: 4 }]
      if (host === 'svc.test') return [{ address: '10.0.0.5', family: 4 }]
      return [{ address: '93.184.216.34', family: 4 }]
    },
  })
  for (const host of ['127.0.0.1.', '127.0.0.1..', '0x7f.1..', '169.254.169.254..', '[::1]', 'LOCALHOST.', 'localhost..']) {
    await t.rejects(resolveTarget(policy, host, 80), EgressRefused, `${host} refused`)
  }
  t.same(looked, ['localhost', 'localhost'], 'literals never went to the resolver; names went without their dots, in lower case')
  t.same(await resolveTarget(policy, 'SVC.TEST.', 8080), { address: '10.0.0.5', family: 4 }, 'an allowed host:port matches with a trailing dot too')
  t.same(await resolveTarget(policy, 'example.com.', 443), { address: '93.184.216.34', family: 4 })
})

t.test('normalizeHost and isPrivateHost', async (t) => {
  t.equal(normalizeHost('LOCALHOST...'), 'localhost')
  t.equal(normalizeHost('[::1]'), '::1')
  t.equal(normalizeHost('0x7f.1..'), '127.0.0.1')
  t.equal(normalizeHost('Example.COM.'), 'example.com')
  t.equal(normalizeHost(`a${'.'.repeat(100_000)}b`), `a${'.'.repeat(100_000)}b`, 'dots inside are kept (and cost linear time)')
  for (const host of PRIVATE_HOSTS) t.ok(isPrivateHost(host), `${host} is private`)
  t.notOk(isPrivateHost('example.com.'))
})
