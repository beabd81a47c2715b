// Payments, assembled: chain port (dev chain or RPC), x402 and MPP methods, the guard, agents and
// plans, access control, and the reconciler of settlements whose outcome was unknown. With an x402
// facilitator (X402_FACILITATOR_URL), x402 proofs are verified and settled by it and the chain is
// read, not written, unless a refund wallet is configured.
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import type { Db } from '../platform/db/index.ts'
import type { KeyValue } from '../platform/kv/index.ts'
import type { Logger } from '../platform/logger.ts'
import type { Clock } from '../platform/clock.ts'
import type { Registry } from '../catalog/types.ts'
import { generatePrivateKey } from 'viem/accounts'
import { createRpcChain, postgresWalletLock, walletLockKey, type ChainPort, type DevChain } from './chain/index.ts'
import { startDevChain } from './chain/dev.ts'
import { createMpp, mppChainTruth, mppReconciler, tempoClientFromUrl } from './mpp/index.ts'
import { broadcastAgain, settleAgainVia, x402ChainTruth, x402Method, x402Reconciler } from './x402/method.ts'
import { createFacilitator, type X402Facilitator } from './x402/facilitator.ts'
import { readOnlyChain } from './x402/read-only-chain.ts'
import { createSettlementConfirmations, type SettlementConfirmations } from './confirmations.ts'
import { BASE_CHAIN_ID, defaultConfirmations } from './networks.ts'
import { createPaymentGuard, type PaymentGuard, type PaymentMethod, type ReconcileOptions } from './guard.ts'
import { createAgentStore, PLAN_PURCHASE_EFFECT, type AgentStore } from './agents.ts'
import { createPaymentOutcomes, type PaymentOutcomes } from './outcomes.ts'
import { createAccessControl, type AccessControl } from './access.ts'
import { createPaywall, type Paywall } from './paywall/index.ts'
import type { Address, Hex } from './types.ts'
import { createOfferReceiptSigner, offerReceiptKeys, type OfferReceiptSigner } from './x402/offer-receipt.ts'
import { createPaymentIdentifiers, type PaymentIdentifiers } from './x402/payment-identifier.ts'
import { generatedOnce } from '../platform/db/service-meta.ts'
import { addressOfPrivateKey } from './x402/recover.ts'

export interface PaymentsOptions {
  db: Db
  kv: KeyValue
  logger: Logger
  clock: Clock
  registry: Registry
  dataDir: string
  payTo: Address
  gatewayUrl: string
  chainRpcUrl?: string | undefined
  settlerPrivateKey?: string | undefined
  /** CHAIN_CONFIRMATIONS with CHAIN_RPC_URL; default per network (networks.ts). */
  chainConfirmations?: number | undefined
  tempoRpcUrl?: string | undefined
  mppSecretKey?: string | undefined
  /** How often pending settlements are reconciled (0 = never; tests call reconcile themselves). */
  reconcileEveryMs?: number
  /** How often settlements not confirmed yet are checked against the chain (default 5 s, 0 with reconcileEveryMs 0; 0 = only on reconcile and on demand). */
  confirmEveryMs?: number
  /** A chain port to use instead of opening one (tests, benchmarks); the caller keeps ownership. */
  chain?: ChainPort
  /** How long an x402 settlement waits for its receipt before it is recorded as pending. */
  settleTimeoutMs?: number
  /** OFFER_RECEIPT_SIGNING_KEY ring (first signs); unset = generated once, kept in service_meta. */
  offerReceiptSigningKeys?: Hex[] | undefined
  /** How long a completed x402 payment identifier is remembered (default 24 h). */
  paymentIdentifierTtlMs?: number
  /** X402_FACILITATOR_URL: x402 proofs are verified and settled by this facilitator, not by our wallet. */
  facilitatorUrl?: string | undefined
  /** X402_FACILITATOR_HEADERS: sent with every facilitator call (a hosted facilitator's API key). */
  facilitatorHeaders?: Record<string, string> | undefined
  /** X402_FACILITATOR_TIMEOUT_MS: per facilitator call (default 30 s); a /settle that times out is left pending. */
  facilitatorTimeoutMs?: number | undefined
  /** A facilitator to use instead of the HTTP one of facilitatorUrl (tests). */
  facilitator?: X402Facilitator
}

export interface Payments {
  chain: ChainPort
  /** Set when the embedded dev chain runs (mint = the dev faucet). */
  devChain: DevChain | undefined
  guard: PaymentGuard
  /** Where each domain registers the handler that activates or reverses the work it sells. */
  outcomes: PaymentOutcomes
  /** Checks recorded settlements against the chain (refunds ask it about the payments they return). */
  confirmations: SettlementConfirmations
  agents: AgentStore
  access: AccessControl
  /** Signs x402 offer-receipt offers and receipts; `signerAddresses` is what verifiers accept. */
  offerReceipt: OfferReceiptSigner
  /** x402 payment-identifier claims (idempotent paid requests). */
  identifiers: PaymentIdentifiers
  /** The page a person's browser gets instead of a 402's JSON (mounted by createServiceApp). */
  paywall: Paywall
  /**
   * Whether MPP charges are offered (a Tempo RPC is configured). $0 MPP proofs always are. The
   * catalog's `mppCharges` option takes this, so discovery lists MPP only where it is offered.
   */
  mppCharges: boolean
  /** The facilitator x402 settles through (facilitator mode); undefined = our own wallet settles. */
  facilitator: X402Facilitator | undefined
  /** Decides open settlements (of the effects registered in this process) from the chain, then runs the confirmation sweep; returns how many open settlements it decided. */
  reconcile(options?: ReconcileOptions): Promise<number>
  close(): Promise<void>
}

/** The MPP HMAC key: configured, or generated once and shared through the database. */
async function mppSecret(db: Db, configured: string | undefined): Promise<string> {
  if (configured) return configured
  return generatedOnce(db, 'mpp_secret_key', () => randomBytes(32).toString('base64url'))
}

export async function openPayments(options: PaymentsOptions): Promise<Payments> {
  const { db, logger, clock } = options
  let devChain: DevChain | undefined
  let chain: ChainPort
  const ownsChain = options.chain === undefined
  const facilitator =
    options.facilitator ??
    (options.facilitatorUrl ? createFacilitator({ url: options.facilitatorUrl, headers: options.facilitatorHeaders, timeoutMs: options.facilitatorTimeoutMs }) : undefined)
  if (options.chain) {
    chain = options.chain
  } else if (options.chainRpcUrl) {
    // Facilitator mode without a refund wallet: the adapter's key is a throwaway it never signs with.
    const readOnly = facilitator !== undefined && options.settlerPrivateKey === undefined
    const privateKey = readOnly ? generatePrivateKey() : (options.settlerPrivateKey as `0x${string}`)
    const rpc = createRpcChain({
      rpcUrl: options.chainRpcUrl,
      privateKey,
      confirmations: options.chainConfirmations ?? defaultConfirmations(BASE_CHAIN_ID),
      logger,
      // Replicas on one Postgres share the settler key: its nonces are allocated under one lock.
      ...(db.kind === 'postgres' && !readOnly ? { walletLock: postgresWalletLock(db, walletLockKey(BASE_CHAIN_ID, addressOfPrivateKey(privateKey)), logger) } : {}),
    })
    chain = readOnly ? readOnlyChain(rpc) : rpc
    if (readOnly) logger.warn({ facilitator: facilitator.url }, 'x402 settles through the facilitator; no SETTLER_PRIVATE_KEY, so refunds and withdrawals wait until one is set')
  } else {
    devChain = await startDevChain({ dataDir: path.join(options.dataDir, 'chain'), logger })
    chain = devChain
  }
  try {
    const now = () => clock.nowMs()
    const secretKey = await mppSecret(db, options.mppSecretKey)
    const offerReceipt = createOfferReceiptSigner(await offerReceiptKeys(db, options.offerReceiptSigningKeys), { now, offerValiditySeconds: 300 })
    // Stored paid answers are sealed under a key derived from the MPP secret (shared by replicas).
    const identifiers = createPaymentIdentifiers({ db, secret: secretKey, ...(options.paymentIdentifierTtlMs ? { ttlMs: options.paymentIdentifierTtlMs } : {}) })
    const mpp = createMpp({
      secretKey,
      realm: new URL(options.gatewayUrl).host,
      recipient: options.payTo,
      // Without a Tempo RPC, MPP is offered for $0 proofs only (verified locally): priced 402s carry
      // no WWW-Authenticate: Payment and an MPP charge credential is refused as not offered.
      ...(options.tempoRpcUrl ? { getClient: tempoClientFromUrl(options.tempoRpcUrl) } : {}),
      store: options.kv,
      now,
    })
    const mppMethod: PaymentMethod = { protocol: 'mpp', challenge: (quote) => mpp.challenge(quote), verify: (credential, quote) => mpp.verify(credential, quote) }
    // Bound below: a new settlement is checked against the chain as soon as it is recorded. A
    // caller that runs reconciliation itself (reconcileEveryMs 0) runs these checks itself too.
    let confirmations: SettlementConfirmations | undefined
    const checksInBackground = options.reconcileEveryMs !== 0
    const outcomes = createPaymentOutcomes({
      db,
      logger,
      ...(checksInBackground
        ? {
            onSettled: (replayKey: string) => confirmations?.soon(replayKey),
          }
        : {}),
    })
    const guard = createPaymentGuard({
      db,
      methods: { x402: x402Method({ chain, now, settleTimeoutMs: options.settleTimeoutMs, offerReceipt, facilitator }), mpp: mppMethod },
      outcomes,
      logger,
    })
    const agents = createAgentStore(
      db,
      clock,
      options.registry.services.flatMap((service) => service.plans),
    )
    outcomes.register(PLAN_PURCHASE_EFFECT, agents.purchaseOutcomes)
    const access = createAccessControl({ guard, agents, registry: options.registry, payTo: options.payTo, gatewayUrl: options.gatewayUrl, logger, identifiers })
    // Facilitator mode never broadcasts an authorization itself: it asks the facilitator again, or the chain decides.
    const resettle = facilitator ? settleAgainVia(facilitator) : broadcastAgain(chain)
    const reconcilers = { x402: x402Reconciler(chain, now, resettle), ...(options.tempoRpcUrl ? { mpp: mppReconciler(tempoClientFromUrl(options.tempoRpcUrl), now) } : {}) }
    const sweeper = createSettlementConfirmations({
      db,
      outcomes,
      logger,
      readers: { x402: x402ChainTruth(chain, resettle), ...(options.tempoRpcUrl ? { mpp: mppChainTruth(tempoClientFromUrl(options.tempoRpcUrl)) } : {}) },
    })
    confirmations = sweeper
    const reconcile = async (reconcileOptions?: ReconcileOptions) => {
      // Expired payment identifiers go on the same loop (claims also take over expired rows).
      await identifiers.sweep({ orphanedBefore: reconcileOptions?.orphanedBefore }).catch((error: unknown) => logger.warn({ err: error }, 'payment identifier sweep failed'))
      const decided = await guard.reconcile(reconcilers, reconcileOptions)
      // Then the chain-truth sweep: what was recorded as settled is confirmed, re-landed or reversed.
      await sweeper.sweep()
      return decided
    }
    const timers: NodeJS.Timeout[] = []
    const every = (ms: number, what: string, run: () => Promise<unknown>) => {
      if (ms <= 0) return
      const timer = setInterval(() => {
        run().catch((error: unknown) => logger.error({ err: error }, what))
      }, ms)
      timer.unref()
      timers.push(timer)
    }
    if (facilitator) {
      // Asked once, in the background: a facilitator down at start must not keep the gateway down.
      facilitator.missingKinds().then(
        (missing) => {
          if (missing.length > 0) logger.warn({ facilitator: facilitator.url, missing }, 'the x402 facilitator does not list every payment kind the 402 offers; it may refuse them')
        },
        (error: unknown) =>
          logger.warn({ err: error, facilitator: facilitator.url }, 'the x402 facilitator did not answer /supported; payments are verified and settled through it anyway'),
      )
    }
    every(options.reconcileEveryMs ?? 30_000, 'settlement reconciliation failed', () => reconcile())
    every(options.confirmEveryMs ?? (checksInBackground ? 5_000 : 0), 'settlement confirmation sweep failed', () => sweeper.sweep())
    return {
      chain,
      devChain,
      guard,
      outcomes,
      confirmations: sweeper,
      agents,
      access,
      offerReceipt,
      identifiers,
      paywall: createPaywall({ registry: options.registry, gatewayUrl: options.gatewayUrl, payTo: options.payTo }),
      mppCharges: mpp.charges,
      facilitator,
      reconcile,
      async close() {
        for (const timer of timers) clearInterval(timer)
        if (ownsChain) await chain.close()
      },
    }
  } catch (error) {
    if (ownsChain) await chain.close()
    throw error
  }
}

export type { PaymentContext, QuoteFunction } from './access.ts'
