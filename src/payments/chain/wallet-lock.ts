// The cross-process wallet lock of the RPC adapter on Postgres: every replica that signs with the
// settler key takes the same transaction-scoped advisory lock around "nonce → sign → send", so no
// two of them sign with one nonce. The lock lives in a transaction of its own; the locked work runs
// outside that transaction's scope, since it uses the database itself (a refund records its signed
// transaction) on other pooled connections. PGlite has one connection, and one process: not there.
import { keccak256, stringToHex } from 'viem'
import type { Db } from '../../platform/db/index.ts'
import type { WalletLock } from './rpc.ts'
import type { Address, ChainLogger } from './types.ts'

/** How long a replica waits for another's broadcast before it goes on without the lock. */
const LOCK_TIMEOUT = '30s'

/** The advisory-lock key of one wallet on one chain (advisory locks are per database). */
export function walletLockKey(chainId: number, wallet: Address): bigint {
  const digest = keccak256(stringToHex(`agent-gateway:wallet-nonce:${chainId}:${wallet.toLowerCase()}`))
  return BigInt.asIntN(64, BigInt(digest.slice(0, 18)))
}

/**
 * A WalletLock on `pg_advisory_xact_lock(key)`. When the lock cannot be taken (the database is out
 * of reach, a holder stuck past LOCK_TIMEOUT) the work runs unlocked: the adapter's nonce retry then
 * covers a conflict, and a paid request is not refused for a database hiccup.
 */
export function postgresWalletLock(db: Db, key: bigint, logger?: ChainLogger): WalletLock {
  return async <T>(fn: () => Promise<T>): Promise<T> => {
    let locked!: () => void
    const acquired = new Promise<'locked'>((resolve) => {
      locked = () => resolve('locked')
    })
    let finished!: () => void
    const done = new Promise<void>((resolve) => {
      finished = resolve
    })
    const holding = db.transaction(async (tx) => {
      await tx.query(`select set_config('lock_timeout', $1, true)`, [LOCK_TIMEOUT])
      await tx.query('select pg_advisory_xact_lock($1::bigint)', [key])
      locked()
      await done
    })
    const first = await Promise.race([
      acquired,
      holding.then(
        () => 'ended' as const,
        (err: unknown) => err,
      ),
    ])
    if (first !== 'locked') {
      logger?.warn({ err: first }, 'chain: wallet lock unavailable, broadcasting without it')
      return fn()
    }
    try {
      return await fn()
    } finally {
      finished()
      // A lost connection released the lock already; the work's own outcome stands.
      await holding.catch((err: unknown) => logger?.warn({ err }, 'chain: wallet lock transaction ended with an error'))
    }
  }
}
