// A process that can be killed at any step, in-process. To the rest of the world a process is its
// connections: what it wrote to the database and sent to the chain (or an x402 facilitator) before
// it died is there, and nothing after. So a "process" here is a set of components built over a
// ProcessLife that wraps the shared database, chain port and facilitator: every statement,
// transaction, chain call and facilitator call is one step;
// `kill` (armed at a step, before or after it runs) makes that step and every later one throw.
// An open transaction then rolls back, exactly as a killed connection's would, and the zombie's
// catch blocks and timers can reach nothing. A fresh ProcessLife over the same database and chain
// is the restarted process.
import type { Db, Queryable } from '../../src/platform/db/index.ts'
import type { ChainPort } from '../../src/payments/chain/types.ts'
import type { X402Facilitator } from '../../src/payments/x402/facilitator.ts'

export class Killed extends Error {
  constructor(step: string) {
    super(`the process was killed (${step})`)
    this.name = 'Killed'
  }
}

export interface KillPoint {
  /** 1-based index of the step. */
  step: number
  /** before: the step never runs; after: it runs (a statement commits, a tx is mined), its answer is lost. */
  when: 'before' | 'after'
}

export class ProcessLife {
  steps = 0
  killed = false
  /** Labels of the steps taken, for failure messages. */
  readonly trace: string[] = []
  killAt: KillPoint | undefined
  /** Steps are only counted (and kill points only apply) while armed. */
  armed = false

  kill(): void {
    this.killed = true
  }

  async step<T>(label: string, fn: () => Promise<T>): Promise<T> {
    if (this.killed) throw new Killed(label)
    let mine = 0
    if (this.armed) {
      mine = ++this.steps
      this.trace.push(label)
      if (this.killAt?.step === mine && this.killAt.when === 'before') {
        this.kill()
        throw new Killed(`before ${label}`)
      }
    }
    const result = await fn()
    if (this.killed) throw new Killed(`during ${label}`)
    if (this.armed && this.killAt?.step === mine && this.killAt.when === 'after') {
      this.kill()
      throw new Killed(`after ${label}`)
    }
    return result
  }
}

function label(sql: string): string {
  return sql.replace(/\s+/g, ' ').trim().slice(0, 60)
}

function queryable(inner: Queryable, life: ProcessLife, prefix: string): Queryable {
  return {
    query: (sql, params) => life.step(`${prefix}${label(sql)}`, () => inner.query(sql, params)),
    exec: (sql) => life.step(`${prefix}exec`, () => inner.exec(sql)),
  }
}

export function crashableDb(db: Db, life: ProcessLife): Db {
  const outer = queryable(db, life, '')
  return {
    kind: db.kind,
    query: outer.query,
    exec: outer.exec,
    transaction: (fn) => life.step('transaction (commit)', () => db.transaction((tx) => fn(queryable(tx, life, 'tx: ')))),
    ping: () => (life.killed ? Promise.resolve(false) : db.ping()),
    // The shared database outlives every process.
    close: async () => {},
  }
}

export function crashableChain(chain: ChainPort, life: ProcessLife): ChainPort {
  return {
    kind: chain.kind,
    chainId: chain.chainId,
    usdc: chain.usdc,
    serviceAddress: chain.serviceAddress,
    confirmations: chain.confirmations,
    inclusion: (hash, expected) => life.step('chain: inclusion', () => chain.inclusion(hash, expected)),
    authorizationFate: (from, nonce, validBefore) => life.step('chain: authorizationFate', () => chain.authorizationFate(from, nonce, validBefore)),
    settleAuthorization: (auth, signature, options) => life.step('chain: settleAuthorization', () => chain.settleAuthorization(auth, signature, options)),
    settlementStatus: (hash) => life.step('chain: settlementStatus', () => chain.settlementStatus(hash)),
    transactionKnown: (hash) => life.step('chain: transactionKnown', () => chain.transactionKnown(hash)),
    isAuthorizationUsed: (from, nonce) => life.step('chain: isAuthorizationUsed', () => chain.isAuthorizationUsed(from, nonce)),
    findAuthorizationTx: (from, nonce) => life.step('chain: findAuthorizationTx', () => chain.findAuthorizationTx(from, nonce)),
    transfer: (to, amount, options) =>
      life.step('chain: transfer', () =>
        chain.transfer(to, amount, {
          ...options,
          ...(options?.onSigned ? { onSigned: (tx) => life.step('chain: transfer signed', () => (options.onSigned as NonNullable<typeof options.onSigned>)(tx)) } : {}),
        }),
      ),
    resend: (tx, expected, options) => life.step('chain: resend', () => chain.resend(tx, expected, options)),
    balanceOf: (address) => life.step('chain: balanceOf', () => chain.balanceOf(address)),
    close: () => chain.close(),
  }
}

/**
 * Every /verify and /settle is a step: killed before, the request is never sent; killed after, the
 * facilitator answered (a settle: it settled) and the process never heard it. A refusal is an
 * answer too, so it is carried out of the step as a value (a throwing step could not be killed after).
 */
export function crashableFacilitator(facilitator: X402Facilitator, life: ProcessLife): X402Facilitator {
  const call = async <T>(label: string, fn: () => Promise<T>): Promise<T> => {
    const answer = await life.step(label, () =>
      fn().then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      ),
    )
    if ('error' in answer) throw answer.error
    return answer.value
  }
  return {
    url: facilitator.url,
    verify: (request) => call('facilitator: /verify', () => facilitator.verify(request)),
    settle: (request) => call('facilitator: /settle', () => facilitator.settle(request)),
    // Asked once in the background at start, outside any paid request.
    missingKinds: () => facilitator.missingKinds(),
  }
}
