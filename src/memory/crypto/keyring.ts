// Key rings of key-encryption keys (KEKs). A ring file is JSON:
//   {"active":"<id>","keys":{"<id>":"<base64 of 32 bytes>"}}
// mounted from a Secret in the chart (read-only), or created 0600 in the data directory by the
// embedded default. Keys live in closures only: nothing here logs, prints or serialises them, and
// errors name ids, paths and lengths, never a key (nor a JSON parser's excerpt of the file).
import { randomBytes } from 'node:crypto'
import { chmod, link, mkdir, open, readFile, rename, rm, stat } from 'node:fs/promises'
import path from 'node:path'
import type { KeyRing } from '../types.ts'
import { KEY_BYTES } from './envelope.ts'

export const KEK_ID_RE = /^[A-Za-z0-9_.-]{1,64}$/
export const EMBEDDED_RING_FILE = 'memory-keys.json'
const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/

interface RingState {
  active: string
  keys: Map<string, Buffer>
}

function decodeKey(value: unknown, label: string, source: string): Buffer {
  // Buffer.from(s, 'base64') silently skips bad characters: check the alphabet and padding first.
  if (typeof value !== 'string' || !BASE64_RE.test(value) || value.length % 4 !== 0) {
    throw new Error(`memory key ring ${source}: ${label} is not standard base64`)
  }
  const key = Buffer.from(value, 'base64')
  if (key.length !== KEY_BYTES) throw new Error(`memory key ring ${source}: ${label} is ${key.length} bytes, need exactly ${KEY_BYTES} (base64 of ${KEY_BYTES} random bytes)`)
  return key
}

function parseRing(text: string, source: string): RingState {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch {
    throw new Error(`memory key ring ${source}: not valid JSON`) // the parser's message may quote the file
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new Error(`memory key ring ${source}: expected {"active": "<id>", "keys": {"<id>": "<base64>"}}`)
  const { active, keys } = doc as { active?: unknown; keys?: unknown }
  if (typeof keys !== 'object' || keys === null || Array.isArray(keys)) throw new Error(`memory key ring ${source}: "keys" must be an object of id → base64 key`)
  const entries = Object.entries(keys)
  if (entries.length === 0) throw new Error(`memory key ring ${source}: "keys" is empty`)
  const map = new Map<string, Buffer>()
  entries.forEach(([id, value], index) => {
    // An invalid id is not echoed: it could be a key pasted in the wrong place.
    if (!KEK_ID_RE.test(id)) throw new Error(`memory key ring ${source}: key id #${index + 1} is not 1-64 characters of [A-Za-z0-9_.-]`)
    map.set(id, decodeKey(value, `key "${id}"`, source))
  })
  if (typeof active !== 'string' || !KEK_ID_RE.test(active)) throw new Error(`memory key ring ${source}: "active" must be a key id (1-64 characters of [A-Za-z0-9_.-])`)
  if (!map.has(active)) throw new Error(`memory key ring ${source}: the active id "${active}" is not among its keys (${[...map.keys()].join(', ')})`)
  return { active, keys: map }
}

function ringOf(load: () => Promise<RingState>, initial: RingState): KeyRing {
  let state = initial
  return {
    get activeId() {
      return state.active
    },
    ids: () => [...state.keys.keys()],
    key: (id) => state.keys.get(id),
    // A failed reload keeps the keys already held: a bad edit of the file must not lock data out.
    reload: async () => {
      state = await load()
    },
  }
}

/** A ring held in memory (tests, or keys taken from the environment); reload() changes nothing. */
export function staticKeyRing(active: string, keys: Record<string, string | Uint8Array>): KeyRing {
  const map: Record<string, string> = {}
  for (const [id, key] of Object.entries(keys)) map[id] = typeof key === 'string' ? key : Buffer.from(key).toString('base64')
  const state = parseRing(JSON.stringify({ active, keys: map }), '(in memory)')
  return ringOf(async () => state, state)
}

/** The ring in a JSON file; reload() re-reads it (a rotated Secret, or a key added by rotation). */
export async function fileKeyRing(file: string): Promise<KeyRing> {
  const load = async (): Promise<RingState> => parseRing(await readFile(file, 'utf8'), file)
  return ringOf(load, await load())
}

/** k-<yyyymmdd>-<6 hex>, UTC. */
export function newKekId(now: Date = new Date()): string {
  const day = now.toISOString().slice(0, 10).replaceAll('-', '')
  return `k-${day}-${randomBytes(3).toString('hex')}`
}

function serialise(state: RingState): string {
  const keys: Record<string, string> = {}
  for (const [id, key] of state.keys) keys[id] = key.toString('base64')
  return `${JSON.stringify({ active: state.active, keys }, null, 2)}\n`
}

async function syncDir(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r')
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
  } catch {
    // Some platforms cannot fsync a directory; the file itself was synced.
  }
}

/** Writes a 0600 temp file beside `file` (never readable by others, not even briefly); returns its path. */
async function writeTemp(file: string, text: string): Promise<string> {
  const temp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`
  const handle = await open(temp, 'wx', 0o600)
  try {
    await handle.chmod(0o600) // exact mode whatever the umask
    await handle.writeFile(text, 'utf8')
    await handle.sync() // a key must be on disk before it can wrap a data key
  } catch (err) {
    await handle.close()
    await rm(temp, { force: true })
    throw err
  }
  await handle.close()
  return temp
}

/**
 * The embedded default's ring: `<dataDir>/memory-keys.json`, created with one random key when
 * missing (mode 0600, atomically, and never replacing a file another process created first),
 * tightened to 0600 when it exists with looser permissions.
 */
export async function ensureEmbeddedKeyRing(dataDir: string): Promise<KeyRing> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  const file = path.join(dataDir, EMBEDDED_RING_FILE)
  const existing = await stat(file).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined
    throw err
  })
  if (existing) {
    if ((existing.mode & 0o077) !== 0) await chmod(file, 0o600)
    return fileKeyRing(file)
  }
  const id = newKekId()
  const temp = await writeTemp(file, serialise({ active: id, keys: new Map([[id, randomBytes(KEY_BYTES)]]) }))
  try {
    // link() fails if the file appeared meanwhile: two first starts agree on the first file, where
    // rename() would let the second replace a key the first may already have used.
    await link(temp, file)
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'EEXIST') {
      if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'ENOSYS') throw err
      if (!(await stat(file).catch(() => undefined))) await rename(temp, file) // no hard links here
    }
  } finally {
    await rm(temp, { force: true })
  }
  await syncDir(dataDir)
  return fileKeyRing(file)
}

/** Holds `<file>.lock` (exclusive create) while fn runs; a lock older than a minute is stale. */
async function withFileLock<T>(file: string, fn: () => Promise<T>): Promise<T> {
  const lock = `${file}.lock`
  const deadline = Date.now() + 10_000
  for (;;) {
    try {
      await (await open(lock, 'wx', 0o600)).close()
      break
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const held = await stat(lock).catch(() => undefined)
      if (held && Date.now() - held.mtimeMs > 60_000) await rm(lock, { force: true })
      else if (Date.now() > deadline) throw new Error(`memory key ring ${file}: locked by another process (${lock}); retry, or remove the lock if no rotation is running`)
      else await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
  try {
    return await fn()
  } finally {
    await rm(lock, { force: true })
  }
}

/**
 * Adds a fresh random key to a writable ring file (the embedded default's rotation), active unless
 * makeActive is false; rewrites the file atomically (0600, under a lock file so two concurrent
 * additions both survive). Returns the new id. Running processes see it on their ring's reload().
 */
export async function addKeyToRingFile(file: string, options: { makeActive?: boolean } = {}): Promise<string> {
  return withFileLock(file, async () => {
    const state = parseRing(await readFile(file, 'utf8'), file)
    let id = newKekId()
    while (state.keys.has(id)) id = newKekId()
    state.keys.set(id, randomBytes(KEY_BYTES))
    if (options.makeActive ?? true) state.active = id
    const temp = await writeTemp(file, serialise(state))
    try {
      await rename(temp, file)
    } catch (err) {
      await rm(temp, { force: true })
      throw err
    }
    await syncDir(path.dirname(file))
    return id
  })
}
