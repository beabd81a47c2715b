// The memory service's envelopes and key rings (src/memory/crypto): AES-256-GCM field ciphertexts
// bound to (owner, record, field, dek version), wrapped data keys bound to (owner, dek, kek), HKDF
// subkeys, and the ring files (validation, the embedded default's 0600 file, rotation's additions).
import { createCipheriv, randomBytes } from 'node:crypto'
import { chmod, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { inspect } from 'node:util'
import t from 'tap'
import type { Test } from 'tap'
import {
  addKeyToRingFile,
  createFieldCipher,
  deriveOwnerKeys,
  ensureEmbeddedKeyRing,
  fieldAad,
  fileKeyRing,
  MIN_FIELD_CIPHERTEXT_BYTES,
  staticKeyRing,
  unwrapDek,
  wrapDek,
} from '../../src/memory/crypto/index.ts'
import type { FieldName } from '../../src/memory/types.ts'

const OWNER = '0x00000000000000000000000000000000000000aa'
const OTHER = 'agent:other-agent'
const RECORD = '7c6f3a52-2d7e-4a4b-9d1e-8d2c5b1f0a11'
const RECORD_2 = '7c6f3a52-2d7e-4a4b-9d1e-8d2c5b1f0a12'
const SECRET_TEXT = 'my bank PIN is 4921 and the vault code is hunter2'

function throwsMessage(fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('expected a throw')
}

async function rejectsMessage(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
  } catch (err) {
    return (err as Error).message
  }
  throw new Error('expected a rejection')
}

/** Every message must leave out each secret in hex, base64 and raw text forms. */
function assertNoSecrets(t: Test, messages: string[], secrets: Buffer[], texts: string[] = []): void {
  const forms = secrets.flatMap((s) => [s.toString('hex'), s.toString('base64'), s.toString('base64url'), s.toString('hex').slice(0, 16), s.toString('base64').slice(0, 12)])
  for (const message of messages) {
    for (const form of [...forms, ...texts]) t.notOk(message.includes(form), `message leaks a secret: ${message.slice(0, 80)}`)
  }
}

async function tempDir(t: Test): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'ag-memkeys-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

t.test('field cipher: round trips, header layout, every field', async (t) => {
  const dek = randomBytes(32)
  const keys = deriveOwnerKeys(OWNER, 3, dek)
  t.equal(keys.cipher.dekVersion, 3)
  for (const field of ['content', 'context', 'tags', 'metadata', 'vector'] as FieldName[]) {
    for (const plaintext of [Buffer.alloc(0), Buffer.from(SECRET_TEXT), randomBytes(5000)]) {
      const ct = keys.cipher.encrypt(field, RECORD, plaintext)
      t.equal(ct.length, 1 + 2 + 12 + plaintext.length + 16)
      t.equal(ct[0], 1, 'version byte')
      t.equal(ct.readUInt16BE(1), 3, 'dek_version, big-endian')
      t.ok(keys.cipher.decrypt(field, RECORD, ct).equals(plaintext), `${field} round trip (${plaintext.length} bytes)`)
    }
  }
  // The same DEK derives the same keys (another process, after a restart).
  const again = deriveOwnerKeys(OWNER, 3, dek)
  const ct = keys.cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  t.equal(again.cipher.decrypt('content', RECORD, ct).toString(), SECRET_TEXT)
  t.ok(again.blindKey.equals(keys.blindKey) && again.dedupeKey.equals(keys.dedupeKey))
})

t.test('field cipher: the AAD and subkeys are as specified', async (t) => {
  t.equal(fieldAad(OWNER, RECORD, 'tags', 2).toString(), `mem|v1|owner:${OWNER}|record:${RECORD}|field:tags|dek:2`)
  const dek = randomBytes(32)
  const keys = deriveOwnerKeys(OWNER, 1, dek)
  const { hkdfSync } = await import('node:crypto')
  const sub = (info: string) => Buffer.from(hkdfSync('sha256', dek, 'agent-gateway-memory', info, 32))
  t.ok(keys.blindKey.equals(sub('blind-index')))
  t.ok(keys.dedupeKey.equals(sub('dedupe')))
  t.notOk(keys.blindKey.equals(keys.dedupeKey))
  // The cipher uses the 'content' subkey: an envelope sealed by hand with it opens.
  const nonce = randomBytes(12)
  const c = createCipheriv('aes-256-gcm', sub('content'), nonce, { authTagLength: 16 })
  c.setAAD(fieldAad(OWNER, RECORD, 'content', 1))
  const body = Buffer.concat([c.update(SECRET_TEXT), c.final()])
  const ct = Buffer.concat([Buffer.from([1, 0, 1]), nonce, body, c.getAuthTag()])
  t.equal(keys.cipher.decrypt('content', RECORD, ct).toString(), SECRET_TEXT)
})

t.test('field cipher: flipping any single byte is detected', async (t) => {
  const { cipher } = deriveOwnerKeys(OWNER, 1, randomBytes(32))
  const ct = cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  for (let i = 0; i < ct.length; i++) {
    const bad = Buffer.from(ct)
    bad[i] = (bad[i] ?? 0) ^ 0x01
    t.throws(() => cipher.decrypt('content', RECORD, bad), `byte ${i}`)
  }
  const extra = Buffer.concat([ct, Buffer.from([0])])
  t.throws(() => cipher.decrypt('content', RECORD, extra), 'an appended byte')
})

t.test('field cipher: a ciphertext moved to another record, field or owner fails', async (t) => {
  const dek = randomBytes(32)
  const { cipher } = deriveOwnerKeys(OWNER, 1, dek)
  const ct = cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  t.match(
    throwsMessage(() => cipher.decrypt('content', RECORD_2, ct)),
    /failed authentication/,
  )
  t.match(
    throwsMessage(() => cipher.decrypt('context', RECORD, ct)),
    /failed authentication/,
  )
  // Even an owner that somehow shared the same DEK cannot read it: the owner is in the AAD.
  const other = deriveOwnerKeys(OTHER, 1, dek)
  t.match(
    throwsMessage(() => other.cipher.decrypt('content', RECORD, ct)),
    /failed authentication/,
  )
  const stranger = deriveOwnerKeys(OWNER, 1, randomBytes(32))
  t.match(
    throwsMessage(() => stranger.cipher.decrypt('content', RECORD, ct)),
    /failed authentication/,
  )
})

t.test('field cipher: short and truncated tags are refused', async (t) => {
  const { cipher } = deriveOwnerKeys(OWNER, 1, randomBytes(32))
  const ct = cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  // The header, the body and only 4 bytes of the tag (Node without authTagLength accepted this).
  const fourByteTag = ct.subarray(0, ct.length - 12)
  t.throws(() => cipher.decrypt('content', RECORD, fourByteTag))
  for (const cut of [1, 8, 15, 16]) t.throws(() => cipher.decrypt('content', RECORD, ct.subarray(0, ct.length - cut)), `tag cut by ${cut}`)
  const empty = cipher.encrypt('content', RECORD, Buffer.alloc(0))
  t.equal(empty.length, MIN_FIELD_CIPHERTEXT_BYTES)
  t.match(
    throwsMessage(() => cipher.decrypt('content', RECORD, empty.subarray(0, empty.length - 4))),
    /shorter than the 31-byte minimum/,
  )
  for (const n of [0, 1, 3, 15, 30]) t.throws(() => cipher.decrypt('content', RECORD, Buffer.alloc(n)), `${n} bytes`)
})

t.test('field cipher: wrong version byte or dek_version is refused before any decryption', async (t) => {
  const dek = randomBytes(32)
  const v1 = deriveOwnerKeys(OWNER, 1, dek)
  const v2 = deriveOwnerKeys(OWNER, 2, dek)
  const ct = v1.cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  // Not an authentication failure (which a trial decryption would produce) but the header check.
  t.match(
    throwsMessage(() => v2.cipher.decrypt('content', RECORD, ct)),
    /under data key version 1, this cipher holds version 2/,
  )
  const relabelled = Buffer.from(ct)
  relabelled.writeUInt16BE(2, 1)
  t.match(
    throwsMessage(() => v1.cipher.decrypt('content', RECORD, relabelled)),
    /under data key version 2, this cipher holds version 1/,
  )
  const badVersion = Buffer.from(ct)
  badVersion[0] = 2
  t.match(
    throwsMessage(() => v1.cipher.decrypt('content', RECORD, badVersion)),
    /envelope version 2, expected 1/,
  )
})

t.test('field cipher: nonces are unique over many encryptions', async (t) => {
  const { cipher } = deriveOwnerKeys(OWNER, 1, randomBytes(32))
  const nonces = new Set<string>()
  const plaintext = Buffer.from('same text every time')
  const N = 20_000
  for (let i = 0; i < N; i++) nonces.add(cipher.encrypt('content', RECORD, plaintext).subarray(3, 15).toString('hex'))
  t.equal(nonces.size, N)
})

t.test('field cipher: bad inputs are refused', async (t) => {
  t.throws(() => createFieldCipher(OWNER, 1, randomBytes(16)), /must be 32 bytes/)
  t.throws(() => createFieldCipher(OWNER, 0, randomBytes(32)), /dek_version/)
  t.throws(() => createFieldCipher(OWNER, 65536, randomBytes(32)), /dek_version/)
  t.throws(() => createFieldCipher('a|b', 1, randomBytes(32)), /owner/)
  const { cipher } = deriveOwnerKeys(OWNER, 1, randomBytes(32))
  t.throws(() => cipher.encrypt('content', 'x|record:y', Buffer.from('x')), /record id/)
  t.throws(() => cipher.encrypt('secret' as FieldName, RECORD, Buffer.from('x')), /unknown encrypted field/)
})

t.test('wrapped data keys: round trip, and any binding mismatch fails', async (t) => {
  const kek = randomBytes(32)
  const dek = randomBytes(32)
  const binding = { owner: OWNER, dekVersion: 1, kekId: 'k1' }
  const wrapped = wrapDek(kek, dek, binding)
  t.equal(wrapped.length, 61)
  t.ok(unwrapDek(kek, wrapped, binding).equals(dek))
  t.notOk(wrapped.includes(dek), 'the data key is not in the clear')
  t.notOk(wrapDek(kek, dek, binding).equals(wrapped), 'a fresh nonce per wrapping')
  for (const other of [
    { ...binding, owner: OTHER },
    { ...binding, dekVersion: 2 },
    { ...binding, kekId: 'k2' },
  ]) {
    t.match(
      throwsMessage(() => unwrapDek(kek, wrapped, other)),
      /failed to unwrap/,
      JSON.stringify(other),
    )
  }
  t.throws(() => unwrapDek(randomBytes(32), wrapped, binding), /failed to unwrap/)
  for (let i = 0; i < wrapped.length; i++) {
    const bad = Buffer.from(wrapped)
    bad[i] = (bad[i] ?? 0) ^ 0x80
    t.throws(() => unwrapDek(kek, bad, binding), `byte ${i}`)
  }
  t.match(
    throwsMessage(() => unwrapDek(kek, wrapped.subarray(0, 60), binding)),
    /60 bytes wrapped, expected 61/,
  )
  t.throws(() => wrapDek(randomBytes(31), dek, binding), /32 bytes/)
  t.throws(() => wrapDek(kek, randomBytes(33), binding), /32 bytes/)
})

t.test('error messages and inspection never show keys or plaintext', async (t) => {
  const kek = randomBytes(32)
  const dek = randomBytes(32)
  const keys = deriveOwnerKeys(OWNER, 1, dek)
  const ct = keys.cipher.encrypt('content', RECORD, Buffer.from(SECRET_TEXT))
  const wrapped = wrapDek(kek, dek, { owner: OWNER, dekVersion: 1, kekId: 'k1' })
  const tampered = Buffer.from(ct)
  tampered[20] = (tampered[20] ?? 0) ^ 1
  const messages = [
    throwsMessage(() => keys.cipher.decrypt('content', RECORD_2, ct)),
    throwsMessage(() => keys.cipher.decrypt('content', RECORD, tampered)),
    throwsMessage(() => keys.cipher.decrypt('content', RECORD, ct.subarray(0, 20))),
    throwsMessage(() => unwrapDek(kek, wrapped, { owner: OTHER, dekVersion: 1, kekId: 'k1' })),
    throwsMessage(() => unwrapDek(randomBytes(32), wrapped, { owner: OWNER, dekVersion: 1, kekId: 'k1' })),
    inspect(keys, { depth: 5, showHidden: false }),
    JSON.stringify(keys),
  ]
  t.match(messages[5], /redacted/)
  assertNoSecrets(t, messages, [kek, dek, keys.blindKey, keys.dedupeKey], [SECRET_TEXT, 'hunter2'])
  t.ok(keys.blindKey.length === 32 && keys.dedupeKey.length === 32, 'the keys are still readable as properties')
})

t.test('file key ring: loads, validates, reloads', async (t) => {
  const dir = await tempDir(t)
  const file = path.join(dir, 'ring.json')
  const k1 = randomBytes(32)
  const k2 = randomBytes(32)
  await writeFile(file, JSON.stringify({ active: 'k1', keys: { k1: k1.toString('base64') } }))
  const ring = await fileKeyRing(file)
  t.equal(ring.activeId, 'k1')
  t.same(ring.ids(), ['k1'])
  t.ok(ring.key('k1')?.equals(k1))
  t.equal(ring.key('k2'), undefined)

  await writeFile(file, JSON.stringify({ active: 'k2', keys: { k1: k1.toString('base64'), k2: k2.toString('base64') } }))
  await ring.reload()
  t.equal(ring.activeId, 'k2')
  t.ok(ring.key('k2')?.equals(k2))

  // A broken file on reload keeps the keys held (a bad edit must not lock the data out).
  await writeFile(file, '{"active": "k2", "keys": {')
  await t.rejects(ring.reload(), /not valid JSON/)
  t.ok(ring.key('k1')?.equals(k1) && ring.activeId === 'k2')

  const bad = async (doc: unknown): Promise<string> => {
    await writeFile(file, typeof doc === 'string' ? doc : JSON.stringify(doc))
    return rejectsMessage(fileKeyRing(file))
  }
  const messages = [
    await bad({ active: 'k1', keys: { k1: randomBytes(16).toString('base64') } }),
    await bad({ active: 'k1', keys: { k1: randomBytes(33).toString('base64') } }),
    await bad({ active: 'k1', keys: { k1: `${k1.toString('base64')}!!` } }),
    await bad({ active: 'k1', keys: { k1: k1.toString('base64url') } }),
    await bad({ active: 'k1', keys: { k1: 42 } }),
    await bad({ active: 'k1', keys: { [k1.toString('base64')]: k1.toString('base64'), k1: k1.toString('base64') } }),
    await bad({ active: 'has space', keys: { k1: k1.toString('base64') } }),
    await bad({ active: 'k9', keys: { k1: k1.toString('base64') } }),
    await bad({ keys: { k1: k1.toString('base64') } }),
    await bad({ active: 'k1', keys: {} }),
    await bad({ active: 'k1', keys: [] }),
    await bad([]),
    await bad(`{"active":"k1","keys":{"k1":"${k1.toString('base64')}"`),
  ]
  t.match(messages[0], /is 16 bytes, need exactly 32/)
  t.match(messages[1], /is 33 bytes, need exactly 32/)
  t.match(messages[2], /not standard base64/)
  t.match(messages[4], /not standard base64/)
  t.match(messages[5], /key id #1 is not 1-64 characters/)
  t.match(messages[6], /"active" must be a key id/)
  t.match(messages[7], /active id "k9" is not among its keys \(k1\)/)
  t.match(messages[9], /"keys" is empty/)
  t.match(messages[12], /not valid JSON/)
  for (const m of messages) t.match(m, file, 'names the file')
  assertNoSecrets(t, messages, [k1, k2])

  await t.rejects(fileKeyRing(path.join(dir, 'missing.json')), { code: 'ENOENT' })
  t.throws(() => staticKeyRing('a', { a: randomBytes(31) }), /31 bytes/)
  t.equal(
    staticKeyRing('a', { a: k1, b: k2.toString('base64') })
      .key('b')
      ?.equals(k2),
    true,
  )
})

t.test('embedded key ring: created 0600 once, reused, tightened, extended by rotation', async (t) => {
  const dir = path.join(await tempDir(t), 'data', 'nested')
  const oldUmask = process.umask(0o000) // even with a permissive umask, never world-readable
  t.teardown(() => void process.umask(oldUmask))
  const [a, b, c] = await Promise.all([ensureEmbeddedKeyRing(dir), ensureEmbeddedKeyRing(dir), ensureEmbeddedKeyRing(dir)])
  const file = path.join(dir, 'memory-keys.json')
  t.equal((await stat(file)).mode & 0o777, 0o600)
  t.match(a.activeId, /^k-\d{8}-[0-9a-f]{6}$/)
  t.equal(b.activeId, a.activeId, 'concurrent first starts agree on one file')
  t.equal(c.activeId, a.activeId)
  t.ok(b.key(a.activeId)?.equals(a.key(a.activeId) ?? Buffer.alloc(0)))
  t.same(
    (await readdir(dir)).filter((n) => n !== 'memory-keys.json'),
    [],
    'no temp files left',
  )
  const first = a.activeId

  const again = await ensureEmbeddedKeyRing(dir)
  t.equal(again.activeId, first, 'an existing ring is kept')

  await chmod(file, 0o644)
  await ensureEmbeddedKeyRing(dir)
  t.equal((await stat(file)).mode & 0o777, 0o600, 'looser permissions are tightened')

  const added = await addKeyToRingFile(file)
  t.not(added, first)
  t.equal((await stat(file)).mode & 0o777, 0o600)
  t.equal(a.key(added), undefined, 'a running ring sees the new key only after reload')
  await a.reload()
  t.equal(a.activeId, added)
  t.ok(a.key(first), 'the old key stays (rows still wrapped under it)')

  const [x, y] = await Promise.all([addKeyToRingFile(file, { makeActive: false }), addKeyToRingFile(file, { makeActive: false })])
  await a.reload()
  t.equal(a.activeId, added, 'makeActive: false keeps the active key')
  t.same(a.ids().sort(), [first, added, x, y].sort(), 'concurrent additions both survive')
  t.same(
    (await readdir(dir)).filter((n) => n !== 'memory-keys.json'),
    [],
    'no temp or lock files left',
  )
  const text = await readFile(file, 'utf8')
  t.same(Object.keys(JSON.parse(text).keys).sort(), a.ids().sort())
})
