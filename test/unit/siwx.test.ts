// Wallet proof (CAIP-122 Sign-In-With-X) against the REAL client functions of
// @x402/extensions/sign-in-with-x (createSIWxPayload + encodeSIWxHeader) and viem EOA keys. Offline.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { createSIWxPayload, encodeSIWxHeader, parseSIWxHeader } from '@x402/extensions/sign-in-with-x'
import type { SIWxPayload } from '@x402/extensions/sign-in-with-x'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import type { PrivateKeyAccount } from 'viem/accounts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import type { KeyValue } from '../../src/platform/kv/index.ts'
import { SIWX_EXTENSION_KEY, SIWX_HEADER, WalletProofRejected, createSiwxVerifier } from '../../src/payments/siwx.ts'
import type { SiwxChallenge, SiwxVerifier, WalletProofRejectReason } from '../../src/payments/siwx.ts'

const DOMAIN = 'gw.example'
const TASK = 'https://gw.example/v1/tasks/t_123'
const OTHER_TASK = 'https://gw.example/v1/tasks/t_456'
const TTL = 5 * 60_000

const account = privateKeyToAccount(generatePrivateKey())
const intruder = privateKeyToAccount(generatePrivateKey())

interface Setup {
  verifier: SiwxVerifier
  kv: KeyValue
  clock: { now: number }
}

async function setup(options: { supportedChains?: string[]; domain?: string; kv?: KeyValue; clock?: { now: number } } = {}): Promise<Setup> {
  const clock = options.clock ?? { now: Date.now() }
  const kv = options.kv ?? (await openKeyValue({ kind: 'memory' }, () => clock.now))
  const verifier = createSiwxVerifier({
    domain: options.domain ?? DOMAIN,
    store: kv,
    now: () => clock.now,
    ...(options.supportedChains === undefined ? {} : { supportedChains: options.supportedChains }),
  })
  return { verifier, kv, clock }
}

/** What an agent does with the 401 body: pick a supported chain, sign with the package, encode. */
async function sign(challenge: SiwxChallenge, signer: PrivateKeyAccount, requestUrl: string, chainIndex = 0): Promise<SIWxPayload> {
  const chain = challenge.supportedChains[chainIndex]
  if (chain === undefined) throw new Error('no such chain')
  return createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, signer, requestUrl)
}

async function prove(challenge: SiwxChallenge, signer: PrivateKeyAccount = account, requestUrl = challenge.info.uri): Promise<string> {
  return encodeSIWxHeader(await sign(challenge, signer, requestUrl))
}

async function rejection(t: Test, promise: Promise<unknown>, reason: WalletProofRejectReason, message?: RegExp): Promise<void> {
  try {
    await promise
    t.fail(`expected ${reason}, got success`)
  } catch (err) {
    t.ok(err instanceof WalletProofRejected, 'a WalletProofRejected')
    t.equal((err as WalletProofRejected).reason, reason, `reason ${reason}: ${(err as Error).message}`)
    if (message) t.match((err as Error).message, message)
  }
}

t.test('challenge: the sign-in-with-x extension object, nonce remembered with TTL = expiry', async (t) => {
  const { verifier, kv, clock } = await setup()
  const ch = await verifier.challenge(TASK)
  const json = JSON.parse(JSON.stringify(ch)) as Record<string, unknown>
  t.same(Object.keys(json).sort(), ['info', 'schema', 'supportedChains'], 'no internal _options leaks')
  t.equal(ch.info.domain, DOMAIN)
  t.equal(ch.info.uri, TASK)
  t.equal(ch.info.version, '1')
  t.match(ch.info.nonce, /^[0-9a-f]{32}$/)
  t.equal(ch.info.issuedAt, new Date(clock.now).toISOString())
  t.equal(ch.info.expirationTime, new Date(clock.now + TTL).toISOString())
  t.same(ch.info.resources, [TASK])
  t.same(ch.supportedChains, [{ chainId: 'eip155:8453', type: 'eip191' }])
  t.equal(ch.schema.type, 'object')
  t.ok(ch.schema.required.includes('signature'))
  t.equal(SIWX_EXTENSION_KEY, 'sign-in-with-x')
  t.equal(SIWX_HEADER, 'SIGN-IN-WITH-X')

  const other = await verifier.challenge(TASK)
  t.not(other.info.nonce, ch.info.nonce, 'fresh nonce per challenge')
  t.ok(await kv.get(`siwx:nonce:${ch.info.nonce}`), 'nonce stored')
  clock.now += TTL
  t.equal(await kv.get(`siwx:nonce:${ch.info.nonce}`), null, 'nonce record expires with the challenge')
})

t.test('a valid proof verifies once and yields the checksummed signer', async (t) => {
  const { verifier, kv } = await setup()
  const ch = await verifier.challenge(TASK)
  const header = await prove(ch)
  const result = await verifier.verify(header, TASK)
  t.same(result, { address: account.address, chainId: 'eip155:8453' })
  t.match(result.address, /^0x[0-9a-fA-F]{40}$/)
  t.equal(await kv.get(`siwx:nonce:${ch.info.nonce}`), null, 'issued record dropped')
  t.equal(await kv.get(`siwx:used:${ch.info.nonce}`), account.address, 'used marker set')

  await rejection(t, verifier.verify(header, TASK), 'nonce_used')
})

t.test('the statement is carried and must be signed as issued', async (t) => {
  const kv = await openKeyValue({ kind: 'memory' })
  const verifier = createSiwxVerifier({ domain: DOMAIN, store: kv, statement: 'Prove you own this task' })
  const ch = await verifier.challenge(TASK)
  t.equal(ch.info.statement, 'Prove you own this task')
  t.same((await verifier.verify(await prove(ch), TASK)).address, account.address)

  const ch2 = await verifier.challenge(TASK)
  const forged = await createSIWxPayload({ ...ch2.info, statement: 'something else', chainId: 'eip155:8453', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(forged), TASK), 'unknown_nonce', /statement/)
})

t.test('a nonce we did not issue → unknown_nonce', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge(TASK)
  const madeUp: SiwxChallenge = { ...ch, info: { ...ch.info, nonce: 'abcdef0123456789abcdef0123456789' } }
  await rejection(t, verifier.verify(await prove(madeUp), TASK), 'unknown_nonce')

  // Issued by another instance with its own store (same domain): still not ours.
  const stranger = await setup()
  const foreign = await stranger.verifier.challenge(TASK)
  await rejection(t, verifier.verify(await prove(foreign), TASK), 'unknown_nonce')

  // Extending our own challenge's expiry and re-signing does not help.
  const ch2 = await verifier.challenge(TASK)
  const later = new Date(Date.parse(ch2.info.expirationTime ?? '') + 3_600_000).toISOString()
  const stretched: SiwxChallenge = { ...ch2, info: { ...ch2.info, expirationTime: later } }
  await rejection(t, verifier.verify(await prove(stretched), TASK), 'unknown_nonce', /expirationTime/)
  t.same((await verifier.verify(await prove(ch2), TASK)).address, account.address, 'the genuine proof still works')
})

t.test('expiry and not-before (injected clock)', async (t) => {
  const { verifier, clock } = await setup()
  const ch = await verifier.challenge(TASK)
  const header = await prove(ch)
  clock.now += TTL
  await rejection(t, verifier.verify(header, TASK), 'expired')
  clock.now += 3_600_000
  await rejection(t, verifier.verify(header, TASK), 'expired', /expired/)

  const early = await setup()
  const ch2 = await early.verifier.challenge(TASK)
  const header2 = await prove(ch2)
  early.clock.now -= 60_000
  await rejection(t, early.verifier.verify(header2, TASK), 'not_yet_valid')
  early.clock.now += 59_000 // 1 s of skew is tolerated
  t.same((await early.verifier.verify(header2, TASK)).address, account.address)
})

t.test('another domain / another uri', async (t) => {
  const clock = { now: Date.now() }
  const kv = await openKeyValue({ kind: 'memory' }, () => clock.now)
  const ours = await setup({ kv, clock })
  const evil = await setup({ kv, clock, domain: 'evil.example' })
  const evilCh = await evil.verifier.challenge('https://evil.example/v1/tasks/t_123')
  await rejection(t, ours.verifier.verify(await prove(evilCh), TASK), 'wrong_domain')

  const ch = await ours.verifier.challenge(TASK)
  await rejection(t, ours.verifier.verify(await prove(ch), OTHER_TASK), 'wrong_uri')
  // Re-signing our nonce for the other task: the nonce is bound to the URL it was issued for.
  const moved: SiwxChallenge = { ...ch, info: { ...ch.info, uri: OTHER_TASK } }
  await rejection(t, ours.verifier.verify(await prove(moved), OTHER_TASK), 'wrong_uri', /issued for/)
  // A wrong-uri attempt does not burn the nonce.
  t.same((await ours.verifier.verify(await prove(ch), TASK)).address, account.address)
})

t.test('signature by another key / tampered message → invalid_signature', async (t) => {
  const { verifier } = await setup({ supportedChains: ['eip155:8453', 'eip155:84532'] })
  const ch = await verifier.challenge(TASK)

  const byIntruder = await sign(ch, intruder, TASK)
  const claimed: SIWxPayload = { ...byIntruder, address: account.address }
  await rejection(t, verifier.verify(encodeSIWxHeader(claimed), TASK), 'invalid_signature', /ERC-1271/)

  const genuine = await sign(ch, account, TASK)
  const otherChain: SIWxPayload = { ...genuine, chainId: 'eip155:84532' }
  await rejection(t, verifier.verify(encodeSIWxHeader(otherChain), TASK), 'invalid_signature')

  // Flip one byte of r: still a well-formed 65-byte signature, recovers to someone else.
  const byte = genuine.signature.slice(10, 12)
  const flipped = `${genuine.signature.slice(0, 10)}${byte === 'ab' ? 'cd' : 'ab'}${genuine.signature.slice(12)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: flipped }), TASK), 'invalid_signature')

  // Smart-wallet signatures are refused with a clear error (they would need an RPC).
  const erc6492 = `0x${'00'.repeat(96)}${'6492'.repeat(16)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: erc6492 }), TASK), 'invalid_signature', /ERC-6492.*RPC/)
  const erc1271 = `${genuine.signature}${'11'.repeat(40)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: erc1271 }), TASK), 'invalid_signature', /65-byte.*ERC-1271/)
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signatureScheme: 'eip1271' }), TASK), 'invalid_signature', /eip1271/)

  // None of the failures above consumed the nonce.
  t.same(await verifier.verify(encodeSIWxHeader(genuine), TASK), { address: account.address, chainId: 'eip155:8453' })
})

t.test('unsupported chain', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge(TASK)
  const payload = await createSIWxPayload({ ...ch.info, chainId: 'eip155:1', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(payload), TASK), 'unsupported_chain')
  const solana = { ...payload, chainId: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp', type: 'ed25519' as const }
  await rejection(t, verifier.verify(encodeSIWxHeader(solana), TASK), 'unsupported_chain')
})

t.test('garbage → malformed', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge(TASK)
  const genuine = await sign(ch, account, TASK)
  const b64 = (s: string) => Buffer.from(s).toString('base64')
  for (const [label, header] of [
    ['empty', ''],
    ['not base64', 'not base64 at all!!'],
    ['base64 of non-JSON', b64('hello')],
    ['JSON missing fields', b64(JSON.stringify({ domain: DOMAIN }))],
    ['JSON array', b64('[]')],
    ['huge', 'A'.repeat(20_000)],
    ['bad issuedAt', encodeSIWxHeader({ ...genuine, issuedAt: 'yesterday' })],
    ['no expirationTime', encodeSIWxHeader({ ...genuine, expirationTime: undefined })],
    ['bad address', encodeSIWxHeader({ ...genuine, address: '0x1234' })],
  ] as const) {
    await rejection(t, verifier.verify(header, TASK), 'malformed').then(() => t.pass(label))
  }
  t.same((await verifier.verify(encodeSIWxHeader(genuine), TASK)).address, account.address, 'the genuine one still works')
})

t.test('20 concurrent verifications of one proof → exactly one success', async (t) => {
  // A store that yields between every call, so the verifications really interleave.
  const inner = await openKeyValue({ kind: 'memory' })
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve))
  const slow = {
    get: async (key: string) => (await tick(), inner.get(key)),
    set: async (key: string, value: string, options?: { ttlMs?: number; onlyIfAbsent?: boolean }) => (await tick(), inner.set(key, value, options)),
    del: async (key: string) => (await tick(), inner.del(key)),
  }
  for (const store of [inner, slow]) {
    const verifier = createSiwxVerifier({ domain: DOMAIN, store })
    const header = await prove(await verifier.challenge(TASK))
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => verifier.verify(header, TASK)))
    const ok = results.filter((r) => r.status === 'fulfilled')
    const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    t.equal(ok.length, 1, 'one success')
    t.same(ok[0]?.value.address, account.address)
    t.equal(failed.length, 19)
    t.ok(failed.every((r) => r.reason instanceof WalletProofRejected && r.reason.reason === 'nonce_used'), 'the rest: nonce_used')
  }
})

t.test('configuration is checked', async (t) => {
  const kv = await openKeyValue({ kind: 'memory' })
  t.throws(() => createSiwxVerifier({ domain: 'https://gw.example', store: kv }), TypeError)
  t.throws(() => createSiwxVerifier({ domain: 'gw.example:443', store: kv }), TypeError, 'default port must be omitted')
  t.throws(() => createSiwxVerifier({ domain: 'GW.example', store: kv }), TypeError)
  t.throws(() => createSiwxVerifier({ domain: DOMAIN, store: kv, supportedChains: ['solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp'] }), TypeError)
  t.throws(() => createSiwxVerifier({ domain: DOMAIN, store: kv, supportedChains: [] }), TypeError)
  t.throws(() => createSiwxVerifier({ domain: DOMAIN, store: kv, ttlMs: 0 }), RangeError)
  const verifier = createSiwxVerifier({ domain: 'localhost:8080', store: kv })
  await t.rejects(verifier.challenge('https://gw.example/v1/tasks/t_1'), /does not match/)
  await t.rejects(verifier.challenge('/v1/tasks/t_1'), TypeError)
  t.equal((await verifier.challenge('http://localhost:8080/v1/tasks/t_1')).info.domain, 'localhost:8080')
})

t.test('the recipe over HTTP: 401 with the challenge → sign → retry with SIGN-IN-WITH-X', async (t) => {
  const kv = await openKeyValue({ kind: 'memory' })
  let verifier: SiwxVerifier | undefined
  let origin = ''
  const server = createServer((req, res) => {
    void (async () => {
      const url = `${origin}${req.url ?? '/'}`
      const header = req.headers['sign-in-with-x']
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(JSON.stringify(body))
      }
      if (verifier === undefined) return send(500, {})
      if (typeof header !== 'string') {
        return send(401, { code: 'wallet_proof_required', extensions: { [SIWX_EXTENSION_KEY]: await verifier.challenge(url) } })
      }
      try {
        const who = await verifier.verify(header, url)
        send(200, { owner: who.address, chainId: who.chainId })
      } catch (err) {
        const reason = err instanceof WalletProofRejected ? err.reason : 'internal'
        send(401, { code: reason, extensions: { [SIWX_EXTENSION_KEY]: await verifier.challenge(url) } })
      }
    })()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const { port } = server.address() as AddressInfo
  origin = `http://127.0.0.1:${port}`
  verifier = createSiwxVerifier({ domain: `127.0.0.1:${port}`, store: kv })

  const url = `${origin}/v1/tasks/t_123/pause`
  const first = await fetch(url, { method: 'POST' })
  t.equal(first.status, 401)
  const body = (await first.json()) as { extensions: Record<string, SiwxChallenge> }
  const challenge = body.extensions['sign-in-with-x']
  if (challenge === undefined) throw new Error('no challenge')
  const chain = challenge.supportedChains[0]
  if (chain === undefined) throw new Error('no chain')
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, first.url)
  const header = encodeSIWxHeader(payload)
  t.same(parseSIWxHeader(header).nonce, challenge.info.nonce)

  const second = await fetch(url, { method: 'POST', headers: { [SIWX_HEADER]: header } })
  t.equal(second.status, 200)
  t.same(await second.json(), { owner: account.address, chainId: 'eip155:8453' })

  const replay = await fetch(url, { method: 'POST', headers: { [SIWX_HEADER]: header } })
  t.equal(replay.status, 401)
  const replayBody = (await replay.json()) as { code: string; extensions: Record<string, SiwxChallenge> }
  t.equal(replayBody.code, 'nonce_used')
  t.not(replayBody.extensions['sign-in-with-x']?.info.nonce, challenge.info.nonce, 'a fresh challenge comes with the refusal')
})
