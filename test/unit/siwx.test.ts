// Wallet proof (CAIP-122 Sign-In-With-X) against the REAL client functions of
// @x402/extensions/sign-in-with-x (createSIWxPayload + encodeSIWxHeader) and viem EOA keys. Offline.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { createSIWxMessage, createSIWxPayload, encodeSIWxHeader, parseSIWxHeader } from '@x402/extensions/sign-in-with-x'
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
  const ch = await verifier.challenge('GET', TASK)
  const json = JSON.parse(JSON.stringify(ch)) as Record<string, unknown>
  t.same(Object.keys(json).sort(), ['info', 'schema', 'supportedChains'], 'no internal _options leaks')
  t.equal(ch.info.domain, DOMAIN)
  t.equal(ch.info.uri, TASK)
  t.equal(ch.info.version, '1')
  t.match(ch.info.nonce, /^[0-9a-f]{32}$/)
  t.equal(ch.info.issuedAt, new Date(clock.now).toISOString())
  t.equal(ch.info.expirationTime, new Date(clock.now + TTL).toISOString())
  t.same(ch.info.resources, [TASK])
  t.equal(ch.info.statement, 'Authorize one GET request to the URI below.', 'the method is in the signed statement')
  t.same(ch.supportedChains, [{ chainId: 'eip155:8453', type: 'eip191' }])
  t.equal(ch.schema.type, 'object')
  t.ok(ch.schema.required.includes('signature'))
  t.equal(SIWX_EXTENSION_KEY, 'sign-in-with-x')
  t.equal(SIWX_HEADER, 'SIGN-IN-WITH-X')

  const other = await verifier.challenge('GET', TASK)
  t.not(other.info.nonce, ch.info.nonce, 'fresh nonce per challenge')
  t.match(JSON.parse((await kv.get(`siwx:nonce:${ch.info.nonce}`)) ?? 'null'), { method: 'GET', uri: TASK, domain: DOMAIN }, 'nonce stored with the request it is for')
  clock.now += TTL
  t.equal(await kv.get(`siwx:nonce:${ch.info.nonce}`), null, 'nonce record expires with the challenge')
})

t.test('a valid proof verifies once and yields the checksummed signer', async (t) => {
  const { verifier, kv } = await setup()
  const ch = await verifier.challenge('GET', TASK)
  const header = await prove(ch)
  const result = await verifier.verify(header, 'GET', TASK)
  t.same(result, { address: account.address, chainId: 'eip155:8453' })
  t.match(result.address, /^0x[0-9a-fA-F]{40}$/)
  t.equal(await kv.get(`siwx:nonce:${ch.info.nonce}`), null, 'issued record dropped')
  t.equal(await kv.get(`siwx:used:${ch.info.nonce}`), account.address, 'used marker set')

  await rejection(t, verifier.verify(header, 'GET', TASK), 'nonce_used')
})

t.test('the statement is carried and must be signed as issued', async (t) => {
  const kv = await openKeyValue({ kind: 'memory' })
  const verifier = createSiwxVerifier({ domain: DOMAIN, store: kv, statement: 'Prove you own this task' })
  const ch = await verifier.challenge('GET', TASK)
  t.equal(ch.info.statement, 'Prove you own this task. Authorize one GET request to the URI below.', 'configured sentence, then the request')
  t.same((await verifier.verify(await prove(ch), 'GET', TASK)).address, account.address)
  const dotted = createSiwxVerifier({ domain: DOMAIN, store: kv, statement: 'Prove you own this task.' })
  t.equal((await dotted.challenge('POST', TASK)).info.statement, 'Prove you own this task. Authorize one POST request to the URI below.', 'no double full stop')

  const ch2 = await verifier.challenge('GET', TASK)
  const forged = await createSIWxPayload({ ...ch2.info, statement: 'something else', chainId: 'eip155:8453', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(forged), 'GET', TASK), 'unknown_nonce', /statement/)
})

t.test('a nonce we did not issue → unknown_nonce', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge('GET', TASK)
  const madeUp: SiwxChallenge = { ...ch, info: { ...ch.info, nonce: 'abcdef0123456789abcdef0123456789' } }
  await rejection(t, verifier.verify(await prove(madeUp), 'GET', TASK), 'unknown_nonce')

  // Issued by another instance with its own store (same domain): still not ours.
  const stranger = await setup()
  const foreign = await stranger.verifier.challenge('GET', TASK)
  await rejection(t, verifier.verify(await prove(foreign), 'GET', TASK), 'unknown_nonce')

  // Extending our own challenge's expiry and re-signing does not help.
  const ch2 = await verifier.challenge('GET', TASK)
  const later = new Date(Date.parse(ch2.info.expirationTime ?? '') + 3_600_000).toISOString()
  const stretched: SiwxChallenge = { ...ch2, info: { ...ch2.info, expirationTime: later } }
  await rejection(t, verifier.verify(await prove(stretched), 'GET', TASK), 'unknown_nonce', /expirationTime/)
  t.same((await verifier.verify(await prove(ch2), 'GET', TASK)).address, account.address, 'the genuine proof still works')
})

t.test('expiry and not-before (injected clock)', async (t) => {
  const { verifier, clock } = await setup()
  const ch = await verifier.challenge('GET', TASK)
  const header = await prove(ch)
  clock.now += TTL
  await rejection(t, verifier.verify(header, 'GET', TASK), 'expired')
  clock.now += 3_600_000
  await rejection(t, verifier.verify(header, 'GET', TASK), 'expired', /expired/)

  const early = await setup()
  const ch2 = await early.verifier.challenge('GET', TASK)
  const header2 = await prove(ch2)
  early.clock.now -= 60_000
  await rejection(t, early.verifier.verify(header2, 'GET', TASK), 'not_yet_valid')
  early.clock.now += 59_000 // 1 s of skew is tolerated
  t.same((await early.verifier.verify(header2, 'GET', TASK)).address, account.address)
})

t.test('another domain / another uri', async (t) => {
  const clock = { now: Date.now() }
  const kv = await openKeyValue({ kind: 'memory' }, () => clock.now)
  const ours = await setup({ kv, clock })
  const evil = await setup({ kv, clock, domain: 'evil.example' })
  const evilCh = await evil.verifier.challenge('GET', 'https://evil.example/v1/tasks/t_123')
  await rejection(t, ours.verifier.verify(await prove(evilCh), 'GET', TASK), 'wrong_domain')

  const ch = await ours.verifier.challenge('GET', TASK)
  await rejection(t, ours.verifier.verify(await prove(ch), 'GET', OTHER_TASK), 'wrong_uri')
  // Re-signing our nonce for the other task: the nonce is bound to the URL it was issued for.
  const moved: SiwxChallenge = { ...ch, info: { ...ch.info, uri: OTHER_TASK } }
  await rejection(t, ours.verifier.verify(await prove(moved), 'GET', OTHER_TASK), 'wrong_uri', /issued for/)
  // A wrong-uri attempt does not burn the nonce.
  t.same((await ours.verifier.verify(await prove(ch), 'GET', TASK)).address, account.address)
})

t.test('a proof is bound to the HTTP method: GET does not open DELETE', async (t) => {
  const { verifier, kv } = await setup()
  const forGet = await verifier.challenge('GET', TASK)
  const getProof = await prove(forGet)

  // The message the wallet signs names the method: the package's client signs the statement verbatim.
  const signed = createSIWxMessage({ ...forGet.info, chainId: 'eip155:8453', type: 'eip191' }, account.address)
  t.match(signed, /\nAuthorize one GET request to the URI below\.\n\nURI: https:\/\/gw\.example\/v1\/tasks\/t_123\n/)

  await rejection(t, verifier.verify(getProof, 'DELETE', TASK), 'wrong_method', /authorizes GET, this request is DELETE/)
  await rejection(t, verifier.verify(getProof, 'POST', TASK), 'wrong_method')
  await rejection(t, verifier.verify(getProof, 'DELETE', OTHER_TASK), 'wrong_uri', undefined)
  await rejection(t, verifier.verify(getProof, 'GET', OTHER_TASK), 'wrong_uri')
  t.ok(await kv.get(`siwx:nonce:${forGet.info.nonce}`), 'the refusals consumed nothing')
  t.equal(await kv.get(`siwx:used:${forGet.info.nonce}`), null)
  t.same((await verifier.verify(getProof, 'GET', TASK)).address, account.address, 'the proof still opens what it was made for')
  await rejection(t, verifier.verify(getProof, 'DELETE', TASK), 'wrong_method', undefined)
  await rejection(t, verifier.verify(getProof, 'GET', TASK), 'nonce_used')

  // A proof made for DELETE opens DELETE (method names are compared case-insensitively).
  const forDelete = await verifier.challenge('delete', TASK)
  t.equal(forDelete.info.statement, 'Authorize one DELETE request to the URI below.')
  const deleteProof = await prove(forDelete)
  await rejection(t, verifier.verify(deleteProof, 'GET', TASK), 'wrong_method', /authorizes DELETE, this request is GET/)
  t.same((await verifier.verify(deleteProof, 'DELETE', TASK)).address, account.address)

  // The nonce record remembers the method too: a GET nonce re-signed with DELETE's statement, or
  // with no statement at all, is refused (the nonce was issued for GET).
  const ch = await verifier.challenge('GET', TASK)
  const relabelled = await createSIWxPayload({ ...ch.info, statement: 'Authorize one DELETE request to the URI below.', chainId: 'eip155:8453', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(relabelled), 'DELETE', TASK), 'wrong_method', /Nonce was issued for GET/)
  const bare = await createSIWxPayload({ ...ch.info, statement: undefined, chainId: 'eip155:8453', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(bare), 'DELETE', TASK), 'wrong_method', /Nonce was issued for GET/)
  // ... and the signed statement binds without the record: a GET proof whose record is gone is
  // still refused for DELETE as wrong_method (and for GET, its nonce is unknown).
  const lost = await verifier.challenge('GET', TASK)
  const lostProof = await prove(lost)
  await kv.del(`siwx:nonce:${lost.info.nonce}`)
  await rejection(t, verifier.verify(lostProof, 'DELETE', TASK), 'wrong_method')
  await rejection(t, verifier.verify(lostProof, 'GET', TASK), 'unknown_nonce')

  // Every method the challenge can name is signable by the real client and verifies.
  for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const header = await prove(await verifier.challenge(method, TASK))
    t.same((await verifier.verify(header, method, TASK)).address, account.address, method)
  }
})

t.test('signature by another key / tampered message → invalid_signature', async (t) => {
  const { verifier } = await setup({ supportedChains: ['eip155:8453', 'eip155:84532'] })
  const ch = await verifier.challenge('GET', TASK)

  const byIntruder = await sign(ch, intruder, TASK)
  const claimed: SIWxPayload = { ...byIntruder, address: account.address }
  await rejection(t, verifier.verify(encodeSIWxHeader(claimed), 'GET', TASK), 'invalid_signature', /ERC-1271/)

  const genuine = await sign(ch, account, TASK)
  const otherChain: SIWxPayload = { ...genuine, chainId: 'eip155:84532' }
  await rejection(t, verifier.verify(encodeSIWxHeader(otherChain), 'GET', TASK), 'invalid_signature')

  // Flip one byte of r: still a well-formed 65-byte signature, recovers to someone else.
  const byte = genuine.signature.slice(10, 12)
  const flipped = `${genuine.signature.slice(0, 10)}${byte === 'ab' ? 'cd' : 'ab'}${genuine.signature.slice(12)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: flipped }), 'GET', TASK), 'invalid_signature')

  // Smart-wallet signatures are refused with a clear error (they would need an RPC).
  const erc6492 = `0x${'00'.repeat(96)}${'6492'.repeat(16)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: erc6492 }), 'GET', TASK), 'invalid_signature', /ERC-6492.*RPC/)
  const erc1271 = `${genuine.signature}${'11'.repeat(40)}`
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signature: erc1271 }), 'GET', TASK), 'invalid_signature', /65-byte.*ERC-1271/)
  await rejection(t, verifier.verify(encodeSIWxHeader({ ...genuine, signatureScheme: 'eip1271' }), 'GET', TASK), 'invalid_signature', /eip1271/)

  // None of the failures above consumed the nonce.
  t.same(await verifier.verify(encodeSIWxHeader(genuine), 'GET', TASK), { address: account.address, chainId: 'eip155:8453' })
})

t.test('unsupported chain', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge('GET', TASK)
  const payload = await createSIWxPayload({ ...ch.info, chainId: 'eip155:1', type: 'eip191' }, account, TASK)
  await rejection(t, verifier.verify(encodeSIWxHeader(payload), 'GET', TASK), 'unsupported_chain')
  const solana = { ...payload, chainId: 'solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp', type: 'ed25519' as const }
  await rejection(t, verifier.verify(encodeSIWxHeader(solana), 'GET', TASK), 'unsupported_chain')
})

t.test('garbage → malformed', async (t) => {
  const { verifier } = await setup()
  const ch = await verifier.challenge('GET', TASK)
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
    await rejection(t, verifier.verify(header, 'GET', TASK), 'malformed').then(() => t.pass(label))
  }
  t.same((await verifier.verify(encodeSIWxHeader(genuine), 'GET', TASK)).address, account.address, 'the genuine one still works')
})

t.test('20 concurrent verifications of one proof → exactly one success', async (t) => {
  // A store that yields between every call, so the verifications really interleave.
  const inner = await openKeyValue({ kind: 'memory' })
  const tick = () => new Promise<void>((resolve) => setImmediate(resolve))
  const slow = {
    get: async (key: string) => {
      await tick()
      return inner.get(key)
    },
    set: async (key: string, value: string, options?: { ttlMs?: number; onlyIfAbsent?: boolean }) => {
      await tick()
      return inner.set(key, value, options)
    },
    del: async (key: string) => {
      await tick()
      return inner.del(key)
    },
  }
  for (const store of [inner, slow]) {
    const verifier = createSiwxVerifier({ domain: DOMAIN, store })
    const header = await prove(await verifier.challenge('GET', TASK))
    const results = await Promise.allSettled(Array.from({ length: 20 }, () => verifier.verify(header, 'GET', TASK)))
    const ok = results.filter((r) => r.status === 'fulfilled')
    const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    t.equal(ok.length, 1, 'one success')
    t.same(ok[0]?.value.address, account.address)
    t.equal(failed.length, 19)
    t.ok(
      failed.every((r) => r.reason instanceof WalletProofRejected && r.reason.reason === 'nonce_used'),
      'the rest: nonce_used',
    )
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
  // The statement is signed as an EIP-4361 statement: characters the message grammar refuses
  // would make every challenge unsignable, so they are refused up front.
  for (const statement of ['two\nlines', 'say "hi"', 'caf\u00e9', '100% owner']) {
    t.throws(() => createSiwxVerifier({ domain: DOMAIN, store: kv, statement }), TypeError, JSON.stringify(statement))
  }
  t.doesNotThrow(() => createSiwxVerifier({ domain: DOMAIN, store: kv, statement: "Sign in (owner's tasks): read/write, #1 @gw; a+b=c!" }))
  const verifier = createSiwxVerifier({ domain: 'localhost:8080', store: kv })
  await t.rejects(verifier.challenge('GET', 'https://gw.example/v1/tasks/t_1'), /does not match/)
  await t.rejects(verifier.challenge('GET', '/v1/tasks/t_1'), TypeError)
  t.equal((await verifier.challenge('GET', 'http://localhost:8080/v1/tasks/t_1')).info.domain, 'localhost:8080')
  // The method is a method token; swapped arguments or an empty method are programming errors.
  await t.rejects(verifier.challenge('', 'http://localhost:8080/v1/tasks/t_1'), TypeError)
  await t.rejects(verifier.challenge('http://localhost:8080/v1/tasks/t_1', 'GET'), TypeError)
  await t.rejects(verifier.challenge('GET /x', 'http://localhost:8080/v1/tasks/t_1'), TypeError)
  await t.rejects(verifier.verify('x', 'http://localhost:8080/v1/tasks/t_1', 'GET'), TypeError)
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
        return send(401, { code: 'wallet_proof_required', extensions: { [SIWX_EXTENSION_KEY]: await verifier.challenge(req.method ?? 'GET', url) } })
      }
      try {
        const who = await verifier.verify(header, req.method ?? 'GET', url)
        send(200, { owner: who.address, chainId: who.chainId })
      } catch (err) {
        const reason = err instanceof WalletProofRejected ? err.reason : 'internal'
        send(401, { code: reason, extensions: { [SIWX_EXTENSION_KEY]: await verifier.challenge(req.method ?? 'GET', url) } })
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

  // The proof answers the POST's challenge: the same URL with another method refuses it.
  const otherMethod = await fetch(url, { method: 'DELETE', headers: { [SIWX_HEADER]: header } })
  t.equal(otherMethod.status, 401)
  const otherBody = (await otherMethod.json()) as { code: string; extensions: Record<string, SiwxChallenge> }
  t.equal(otherBody.code, 'wrong_method')
  t.match(otherBody.extensions['sign-in-with-x']?.info.statement, /Authorize one DELETE request/, 'the fresh challenge is for the DELETE')

  const second = await fetch(url, { method: 'POST', headers: { [SIWX_HEADER]: header } })
  t.equal(second.status, 200)
  t.same(await second.json(), { owner: account.address, chainId: 'eip155:8453' })

  const replay = await fetch(url, { method: 'POST', headers: { [SIWX_HEADER]: header } })
  t.equal(replay.status, 401)
  const replayBody = (await replay.json()) as { code: string; extensions: Record<string, SiwxChallenge> }
  t.equal(replayBody.code, 'nonce_used')
  t.not(replayBody.extensions['sign-in-with-x']?.info.nonce, challenge.info.nonce, 'a fresh challenge comes with the refusal')
})
