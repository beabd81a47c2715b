// Review keys (src/reviews/keys.ts): share capabilities round-trip and refuse anything tampered,
// truncated or minted under another key, old keys keep working during a rotation, webhook secrets
// are whsec_ secrets. The creation-time URL check (src/reviews/urls.ts): the SSRF suite — every
// spelling of loopback, private, link-local/metadata, CGNAT and IPv4-embedding IPv6 forms, DNS that
// answers a private address, non-http schemes and credentials are refused naming the field; a
// public address passes.
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import t from 'tap'
import { Webhook } from 'standardwebhooks'
import type { Db } from '../../src/platform/db/index.ts'
import { egressPolicy } from '../../src/platform/egress.ts'
import { AppError } from '../../src/platform/errors.ts'
import { createReviewKeys, reviewsMasterKeys } from '../../src/reviews/keys.ts'
import { checkPublicUrl } from '../../src/reviews/urls.ts'

const key = () => randomBytes(32)
const REVIEW = '0f8b6c2e-4d3a-4b1c-9e7f-5a6b7c8d9e0f'

/** A Db that must not be used (configured keys never touch the database). */
const noDb = new Proxy({} as Db, {
  get: () => {
    throw new Error('the database must not be used')
  },
})

t.test('configured master keys: comma-separated, each hashed, at least 32 bytes', async (t) => {
  const a = 'a'.repeat(32)
  const b = 'b'.repeat(40)
  const keys = await reviewsMasterKeys(noDb, `${a}, ${b}`)
  t.same(
    keys.map((k) => k.toString('hex')),
    [a, b].map((s) => createHash('sha256').update(s).digest('hex')),
    'active first, each sha256(secret)',
  )
  await t.rejects(reviewsMasterKeys(noDb, 'short'), /at least 32 bytes/)
  await t.rejects(reviewsMasterKeys(noDb, `${a},`), /at least 32 bytes/, 'an empty entry is refused')
  const err = await reviewsMasterKeys(noDb, `${a},tooshortsecret`).catch((e: Error) => e)
  t.notMatch((err as Error).message, /tooshortsecret/, 'the message never echoes a secret')
})

t.test('capability round-trips and is 64 url-safe characters', async (t) => {
  const keys = createReviewKeys([key()])
  for (const id of [REVIEW, randomUUID(), REVIEW.toUpperCase()]) {
    const cap = keys.capability(id)
    t.match(cap, /^[A-Za-z0-9_-]{64}$/)
    t.equal(keys.reviewIdOf(cap), id.toLowerCase())
  }
  t.equal(keys.capability(REVIEW), keys.capability(REVIEW), 'deterministic')
  t.throws(() => keys.capability('not-a-uuid'), TypeError)
})

t.test('tampered, short, garbage and foreign capabilities are refused without throwing', async (t) => {
  const keys = createReviewKeys([key()])
  const cap = keys.capability(REVIEW)
  const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1)
  const otherId = keys.capability(randomUUID())
  const cases: Record<string, unknown> = {
    'id byte changed': flip(cap, 3),
    'mac byte changed': flip(cap, 40),
    'last character changed': flip(cap, 63),
    'id of one, mac of another': cap.slice(0, 21) + otherId.slice(21),
    truncated: cap.slice(0, 63),
    'one more character': `${cap}A`,
    'padded base64': `${cap.slice(0, 62)}==`,
    'standard base64 alphabet': cap.replaceAll('-', '+').replaceAll('_', '/').replace(/^./, '+'),
    empty: '',
    garbage: '!'.repeat(64),
    'a uuid': REVIEW,
    'minted under another key': createReviewKeys([key()]).capability(REVIEW),
    'not a string': 42,
    undefined: undefined,
  }
  for (const [name, value] of Object.entries(cases)) t.equal(keys.reviewIdOf(value as string), undefined, name)
})

t.test('rotation: old capabilities stay valid, new ones come from the active key', async (t) => {
  const oldKey = key()
  const newKey = key()
  const before = createReviewKeys([oldKey])
  const during = createReviewKeys([newKey, oldKey])
  const after = createReviewKeys([newKey])
  const oldCap = before.capability(REVIEW)
  t.equal(during.reviewIdOf(oldCap), REVIEW, 'an old capability is still accepted')
  const newCap = during.capability(REVIEW)
  t.not(newCap, oldCap, 'new capabilities are minted under the active key')
  t.equal(after.reviewIdOf(newCap), REVIEW)
  t.equal(after.reviewIdOf(oldCap), undefined, 'once the old key is dropped, its capabilities stop working')
})

t.test('webhook secrets: whsec_ + base64 of 32 bytes, per review, one per key active first', async (t) => {
  const oldKey = key()
  const newKey = key()
  const keys = createReviewKeys([newKey, oldKey])
  const secret = keys.webhookSecret(REVIEW)
  t.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/)
  t.equal(Buffer.from(secret.slice(6), 'base64').length, 32)
  t.not(keys.webhookSecret(randomUUID()), secret, 'each review has its own')
  t.not(keys.webhookSecret(REVIEW), keys.capability(REVIEW), 'the secret is not the capability')
  const secrets = keys.webhookSecrets(REVIEW)
  t.equal(secrets.length, 2)
  t.equal(secrets[0], secret, 'active first')
  t.equal(secrets[1], createReviewKeys([oldKey]).webhookSecret(REVIEW), 'then the older key’s')
  // It is a secret standardwebhooks accepts.
  const body = '{"x":1}'
  const now = new Date()
  const signature = new Webhook(secret).sign('msg_1', now, body)
  t.same(new Webhook(secret).verify(body, { 'webhook-id': 'msg_1', 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': signature }), { x: 1 })
})

t.test('createReviewKeys refuses no key or a key of the wrong size', async (t) => {
  t.throws(() => createReviewKeys([]), RangeError)
  t.throws(() => createReviewKeys([randomBytes(16)]), RangeError)
})

t.test('checkPublicUrl: the SSRF suite', async (t) => {
  const names: Record<string, string[]> = {
    localhost: ['127.0.0.1', '::1'],
    'evil.test': ['127.0.0.1'],
    'metadata.test': ['169.254.169.254'],
    'mixed.test': ['10.1.2.3', 'fd00::1'],
    'public.test': ['93.184.216.34'],
  }
  const lookups: string[] = []
  const policy = egressPolicy({
    lookup: async (host) => {
      lookups.push(host)
      const found = names[host]
      if (!found) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' })
      return found.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
    },
  })

  const refused = async (raw: string, why: RegExp, field = 'body.callbackUrl') => {
    const err = await checkPublicUrl(raw, field, policy).then(
      () => undefined,
      (e: unknown) => e,
    )
    t.ok(err instanceof AppError, `${raw} is refused`)
    t.match(err, { code: 'url_not_allowed', status: 400, field }, raw)
    t.match((err as Error).message, new RegExp(`^${field.replace('.', '\\.')} `), `${raw}: the message names the field`)
    t.match((err as Error).message, why, `${raw}: the message says why`)
  }
  const privateAddress = /loopback, private, link-local and metadata addresses are not reachable/

  // Loopback in every spelling (WHATWG URL normalises the numeric IPv4 forms to 127.0.0.1).
  for (const raw of [
    'http://127.0.0.1/',
    'http://localhost/',
    'http://127.1/',
    'http://2130706433/',
    'http://0x7f000001/',
    'http://0x7f.1/',
    'http://017700000001/',
    'http://0177.0.0.1/',
    'http://%31%32%37.0.0.1/',
    'https://[::1]/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:7f00:1]/',
    'http://0.0.0.0/',
    'http://[::]/',
  ]) {
    await refused(raw, privateAddress)
  }
  for (const raw of ['http://2130706433/', 'http://0x7f.1/', 'http://017700000001/', 'http://127.1/']) {
    t.equal(new URL(raw).hostname, '127.0.0.1', `WHATWG URL parses ${raw} as 127.0.0.1`)
  }
  // Private, link-local and metadata, CGNAT, NAT64 and 6to4 embedding a loopback address.
  for (const raw of [
    'http://10.0.0.1/',
    'http://10.255.255.255/',
    'http://172.16.0.1/',
    'http://172.31.255.254/',
    'http://192.168.1.1/',
    'http://169.254.169.254/latest/meta-data/',
    'http://[fe80::1]/',
    'http://[fd00:ec2::254]/',
    'http://100.64.0.1/',
    'http://100.100.100.200/',
    'http://[64:ff9b::7f00:1]/',
    'http://[2002:7f00:1::]/',
    'http://[::ffff:a9fe:a9fe]/',
  ]) {
    await refused(raw, privateAddress, 'body.url')
  }
  // DNS answering a private address; every answer private.
  await refused('https://evil.test/hook', /evil\.test resolves to 127\.0\.0\.1/)
  await refused('https://metadata.test/', /169\.254\.169\.254/)
  await refused('https://mixed.test/', privateAddress)
  // NXDOMAIN.
  await refused('https://nowhere.test/', /cannot resolve nowhere\.test: ENOTFOUND/)
  // Schemes and credentials.
  await refused('ftp://public.test/file', /ftp: .*use http or https/)
  await refused('file:///etc/passwd', /file: .*use http or https/)
  await refused('javascript:alert(1)', /javascript: .*use http or https/)
  await refused('data:text/html,hi', /data: .*use http or https/)
  await refused('https://user:pass@public.test/', /credentials/)
  await refused('https://user@public.test/', /credentials/)
  await refused('https://:pass@public.test/', /credentials/)
  await refused('not a url', /not an absolute URL/)
  await refused('/relative/path', /not an absolute URL/)

  // A public address passes, and the host is looked up.
  lookups.length = 0
  const url = await checkPublicUrl('https://public.test/hooks/review?x=1', 'body.callbackUrl', policy)
  t.equal(url.href, 'https://public.test/hooks/review?x=1')
  t.same(lookups, ['public.test'])
  t.equal((await checkPublicUrl('http://93.184.216.34:8080/', 'body.url', policy)).port, '8080', 'a public IP literal with a port passes')
})

t.test('checkPublicUrl with the system resolver: localhost is refused', async (t) => {
  const err = await checkPublicUrl('http://localhost:8080/', 'body.url', egressPolicy()).catch((e: unknown) => e)
  t.match(err, { code: 'url_not_allowed', field: 'body.url' })
})

t.test('checkPublicUrl: an allowed host:port is exempt (tests, an operator’s own service)', async (t) => {
  const policy = egressPolicy({ allow: ['127.0.0.1:4000'] })
  t.equal((await checkPublicUrl('http://127.0.0.1:4000/hook', 'body.callbackUrl', policy)).host, '127.0.0.1:4000')
  const err = await checkPublicUrl('http://127.0.0.1:4001/hook', 'body.callbackUrl', policy).catch((e: unknown) => e)
  t.match(err, { code: 'url_not_allowed' }, 'only that exact port')
})
