// The "Redis features" port: a tiny key/value API (strings, TTLs, SET NX, counters) with an
// in-process substitute for single-instance deployments and a Redis adapter for replicas.
// Keys are used verbatim: callers prefix them.

import type { RedisClientType } from 'redis'

export interface KeyValue {
  readonly kind: 'memory' | 'redis'
  get(key: string): Promise<string | null>
  /** Returns false when onlyIfAbsent is set and the key exists (SET NX). ttlMs sets PX. */
  set(key: string, value: string, options?: { ttlMs?: number; onlyIfAbsent?: boolean }): Promise<boolean>
  del(key: string): Promise<number>
  /** INCRBY; when ttlMs is given and the key is new, sets its expiry (fixed-window counters). */
  incr(key: string, by?: number, ttlMs?: number): Promise<number>
  ping(): Promise<boolean>
  close(): Promise<void>
}

export type KeyValueOptions = { kind: 'memory' } | { kind: 'redis'; url: string }

export async function openKeyValue(options: KeyValueOptions, clock: () => number = Date.now): Promise<KeyValue> {
  switch (options.kind) {
    case 'memory':
      return new MemoryKeyValue(clock)
    case 'redis':
      return openRedis(options.url)
    default: {
      const unknownKind: never = options
      throw new Error(`Unknown key/value kind: ${String((unknownKind as { kind?: unknown }).kind)}`)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// shared argument checks (same errors from both backends)

/** Redis PX takes whole positive milliseconds. */
function checkTtl(ttlMs: number | undefined): number | undefined {
  if (ttlMs === undefined) return undefined
  if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new RangeError(`ttlMs must be a positive number, got ${ttlMs}`)
  return Math.ceil(ttlMs)
}

function checkIncrement(by: number): number {
  if (!Number.isSafeInteger(by)) throw new RangeError(`incr amount must be a safe integer, got ${by}`)
  return by
}

const NOT_AN_INTEGER = 'ERR value is not an integer or out of range'

// ---------------------------------------------------------------------------------------------
// in-process

interface Entry {
  value: string
  /** clock() value at which the key disappears; undefined = no expiry. */
  expiresAt: number | undefined
}

const SWEEP_EVERY_MS = 60_000

/**
 * Map-backed KeyValue. Expiry is lazy (checked on access against the injected clock, plus an
 * occasional sweep during writes), so no timer keeps the process alive.
 */
class MemoryKeyValue implements KeyValue {
  readonly kind = 'memory' as const
  readonly #clock: () => number
  readonly #entries = new Map<string, Entry>()
  #nextSweep: number
  #closed = false

  constructor(clock: () => number) {
    this.#clock = clock
    this.#nextSweep = clock() + SWEEP_EVERY_MS
  }

  #checkOpen(): void {
    if (this.#closed) throw new Error('KeyValue is closed')
  }

  #live(key: string, now: number): Entry | undefined {
    const entry = this.#entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt !== undefined && entry.expiresAt <= now) {
      this.#entries.delete(key)
      return undefined
    }
    return entry
  }

  #sweep(now: number): void {
    if (now < this.#nextSweep) return
    this.#nextSweep = now + SWEEP_EVERY_MS
    for (const [key, entry] of this.#entries) {
      if (entry.expiresAt !== undefined && entry.expiresAt <= now) this.#entries.delete(key)
    }
  }

  async get(key: string): Promise<string | null> {
    this.#checkOpen()
    return this.#live(key, this.#clock())?.value ?? null
  }

  async set(key: string, value: string, options: { ttlMs?: number; onlyIfAbsent?: boolean } = {}): Promise<boolean> {
    this.#checkOpen()
    const ttl = checkTtl(options.ttlMs)
    const now = this.#clock()
    this.#sweep(now)
    if (options.onlyIfAbsent === true && this.#live(key, now) !== undefined) return false
    // Like Redis SET: a plain SET drops any previous TTL.
    this.#entries.set(key, { value, expiresAt: ttl === undefined ? undefined : now + ttl })
    return true
  }

  async del(key: string): Promise<number> {
    this.#checkOpen()
    const existed = this.#live(key, this.#clock()) !== undefined
    this.#entries.delete(key)
    return existed ? 1 : 0
  }

  async incr(key: string, by = 1, ttlMs?: number): Promise<number> {
    this.#checkOpen()
    checkIncrement(by)
    const ttl = checkTtl(ttlMs)
    const now = this.#clock()
    this.#sweep(now)
    const entry = this.#live(key, now)
    if (entry === undefined) {
      this.#entries.set(key, { value: String(by), expiresAt: ttl === undefined ? undefined : now + ttl })
      return by
    }
    if (!/^-?\d+$/.test(entry.value)) throw new Error(NOT_AN_INTEGER)
    const next = Number(entry.value) + by
    if (!Number.isSafeInteger(next)) throw new Error(NOT_AN_INTEGER)
    entry.value = String(next) // keeps its TTL, like INCRBY
    return next
  }

  async ping(): Promise<boolean> {
    return !this.#closed
  }

  async close(): Promise<void> {
    this.#closed = true
    this.#entries.clear()
  }
}

// ---------------------------------------------------------------------------------------------
// Redis (node-redis)

// INCRBY, and PEXPIRE only when this call created the key: the window is fixed at the first hit.
const INCR_WITH_TTL = `
local existed = redis.call('EXISTS', KEYS[1])
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if existed == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return value
`

const CONNECT_TIMEOUT_MS = 5_000
const PING_TIMEOUT_MS = 2_000

async function openRedis(url: string): Promise<KeyValue> {
  const { createClient } = await import('redis')
  let connected = false
  const client = createClient({
    url,
    socket: {
      connectTimeout: CONNECT_TIMEOUT_MS,
      // Fail fast on start-up (so a wrong URL is reported), back off and retry forever afterwards.
      reconnectStrategy: (retries: number, cause: Error) => (connected ? Math.min(100 * 2 ** retries, 3_000) : cause),
    },
  }) as RedisClientType
  // Without a listener a connection error would be thrown as an uncaught 'error' event.
  client.on('error', () => {})
  try {
    await client.connect()
  } catch (err) {
    client.destroy()
    throw err
  }
  connected = true
  return new RedisKeyValue(client)
}

class RedisKeyValue implements KeyValue {
  readonly kind = 'redis' as const
  readonly #client: RedisClientType

  constructor(client: RedisClientType) {
    this.#client = client
  }

  async get(key: string): Promise<string | null> {
    const value = await this.#client.get(key)
    return value === null ? null : String(value)
  }

  async set(key: string, value: string, options: { ttlMs?: number; onlyIfAbsent?: boolean } = {}): Promise<boolean> {
    const ttl = checkTtl(options.ttlMs)
    const reply = await this.#client.set(key, value, {
      ...(ttl === undefined ? {} : { expiration: { type: 'PX' as const, value: ttl } }),
      ...(options.onlyIfAbsent === true ? { condition: 'NX' as const } : {}),
    })
    return reply !== null
  }

  async del(key: string): Promise<number> {
    return Number(await this.#client.del(key))
  }

  async incr(key: string, by = 1, ttlMs?: number): Promise<number> {
    checkIncrement(by)
    const ttl = checkTtl(ttlMs)
    if (ttl === undefined) return Number(await this.#client.incrBy(key, by))
    const reply = await this.#client.eval(INCR_WITH_TTL, { keys: [key], arguments: [String(by), String(ttl)] })
    return Number(reply)
  }

  async ping(): Promise<boolean> {
    if (!this.#client.isOpen) return false
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), PING_TIMEOUT_MS)
      timer.unref()
    })
    const pong = this.#client.ping().then(
      () => true,
      () => false,
    )
    try {
      return await Promise.race([pong, timeout])
    } finally {
      clearTimeout(timer)
    }
  }

  async close(): Promise<void> {
    if (!this.#client.isOpen) return
    try {
      await this.#client.close()
    } catch {
      this.#client.destroy()
    }
  }
}
