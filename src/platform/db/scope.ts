// Guards against the classic deadlock: calling `db.query` / `db.transaction` from inside a
// `db.transaction` callback instead of using `tx`. On PGlite that waits forever for the transaction
// it is part of; on a pg Pool it silently runs outside the transaction. Both adapters reject it.

import { AsyncLocalStorage } from 'node:async_hooks'

interface TxScope {
  readonly owner: object
  open: boolean
}

const storage = new AsyncLocalStorage<TxScope>()

export function runInTxScope<T>(owner: object, fn: () => Promise<T>): Promise<T> {
  const scope: TxScope = { owner, open: true }
  return storage.run(scope, async () => {
    try {
      return await fn()
    } finally {
      // Work spawned inside the callback that outlives it may use the db again.
      scope.open = false
    }
  })
}

export function assertOutsideTx(owner: object, what: 'query' | 'exec' | 'transaction'): void {
  const scope = storage.getStore()
  if (scope?.open && scope.owner === owner) {
    throw new Error(
      what === 'transaction'
        ? 'Nested db.transaction() calls are not supported; use the tx you were given'
        : `db.${what}() called inside a db.transaction() callback; use the tx argument instead`,
    )
  }
}
