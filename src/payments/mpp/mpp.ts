// MPP (the "Payment" HTTP authentication scheme) with Tempo `charge`, built on mppx 0.11.0.
//
//   challenge(quote) → `WWW-Authenticate: Payment …` for the 402 (mppx Challenge.fromMethod:
//                      HMAC-bound id, expiry, the route in `opaque`).
//   verify(header)   → checks the credential against ITS challenge and the quote, then runs
//                      mppx `validateCredential` (signature / tx / simulation). Consumes nothing.
//                      A $0 proof signed by a plain secp256k1 key is checked here, locally
//                      (EIP-712 `Proof` digest + ecrecover), with no RPC call.
//   settle()         → mppx `broadcastCredential`, at most once per VerifiedPayment.
//
// What is offered (offers()): $0 proofs always (they need no chain); charges only with a Tempo
// RPC (`getClient`) to simulate, broadcast and look them up. Without one a priced quote gets no
// MPP challenge, and an MPP credential for it is refused as `unsupported_scheme`.
//
// Replay protection belongs to the guard (it reserves `replayKey` in its DB before the upstream
// call). mppx also claims tx hashes / proof ids in the Store built here on the injected
// key/value port, and verify() refuses credentials already claimed there.
import type { Challenge, Credential } from 'mppx'
import type { Store } from 'mppx/server'
import { BaseError, HttpRequestError, TimeoutError, formatUnits, getAddress, hexToBytes, isHex, keccak256, type Client, type Hex } from 'viem'
import type { Transaction } from 'viem/tempo'
import type { KeyValue } from '../../platform/kv/index.ts'
import { PaymentRejected, type Address, type ChallengeParts, type PriceQuote, type RejectReason, type SettlementOutcome, type VerifiedPayment } from '../types.ts'
import { TEMPO_CHAIN_ID, type TempoClientFactory } from './tempo-rpc.ts'
import type { ChainTruthReader } from '../confirmations.ts'
import type { PendingReconciler } from '../guard.ts'
import { recoverSigner } from '../x402/recover.ts'
import { mppxRoot, mppxServer, mppxTempo, viemTempo } from './lazy.ts'

/** Tempo mainnet USDC (TIP-20, 6 decimals). */
export const TEMPO_USDC: Address = '0x20C000000000000000000000b9537d11c60E8b50'
export const MPP_METHOD = 'tempo'
export const MPP_INTENT = 'charge'
/** USDC base units are micro-dollars. */
const DECIMALS = 6
const DEFAULT_CHALLENGE_TTL_MS = 300_000
const MIN_CLAIM_TTL_MS = 1_000

/** The key/value operations the replay store needs (the platform KeyValue port fits). */
export type MppKeyValue = Pick<KeyValue, 'get' | 'set' | 'del'>

export interface MppOptions {
  /** HMAC key for challenge ids; at least 32 bytes. */
  secretKey: string
  /** Protection space, usually the public host name; also bound into the Tempo memo. */
  realm: string
  /** Tempo address that receives payments. */
  recipient: Address
  /** TIP-20 token; default Tempo USDC. */
  currency?: Address
  /** Default 4217 (Tempo mainnet). */
  chainId?: number
  /** Challenge lifetime; default 5 minutes. */
  challengeTtlMs?: number
  /**
   * The Tempo RPC port (see tempo-rpc.ts). Without it only $0 proofs are offered and accepted
   * (verified locally); charges are neither advertised nor accepted.
   */
  getClient?: TempoClientFactory | undefined
  /** Backs mppx's replay Store (claimed tx hashes and proof ids). */
  store: MppKeyValue
  /** Clock for issuing and checking challenge expiry (ms since epoch). */
  now?: () => number
}

export interface Mpp {
  readonly realm: string
  readonly chainId: number
  readonly currency: Address
  readonly recipient: Address
  /** Whether charges are offered (a Tempo RPC is configured); $0 proofs always are. */
  readonly charges: boolean
  /** Whether MPP can pay this quote here: $0 always, a priced quote only when `charges`. */
  offers(quote: PriceQuote): boolean
  /**
   * The `WWW-Authenticate: Payment …` header for this quote (body stays empty: MPP uses none);
   * no header at all when MPP cannot pay it here (see offers()).
   */
  challenge(quote: PriceQuote): ChallengeParts
  /**
   * Checks an `Authorization: Payment …` value against the challenge it answers and the quote.
   * Throws PaymentRejected for a bad credential; other errors (RPC down) are infrastructure.
   */
  verify(authorization: string, quote: PriceQuote): Promise<VerifiedPayment>
}

type ChargeRequest = {
  amount?: unknown
  currency?: unknown
  recipient?: unknown
  methodDetails?: { chainId?: unknown } | undefined
}

type PaymentPayload = { type: 'transaction'; signature: Hex } | { type: 'hash'; hash: Hex } | { type: 'proof'; signature: Hex }

export function createMpp(options: MppOptions): Mpp {
  const realm = options.realm
  const recipient = options.recipient
  const currency = options.currency ?? TEMPO_USDC
  const chainId = options.chainId ?? TEMPO_CHAIN_ID
  const ttlMs = options.challengeTtlMs ?? DEFAULT_CHALLENGE_TTL_MS
  const now = options.now ?? Date.now
  const secretKey = options.secretKey
  const network = `eip155:${chainId}`
  if (Buffer.byteLength(secretKey, 'utf8') < 32) throw new RangeError('MPP secretKey must be at least 32 bytes')
  if (!(ttlMs > 0)) throw new RangeError(`challengeTtlMs must be positive, got ${ttlMs}`)

  // Broadcasts a pending settle() is waiting on, by lower-case tx hash: lets settle() tell "the
  // node refused it" (failed) from "sent, answer lost" (pending) without guessing from errors.
  const watched = new Map<string, { sent: boolean; refused: boolean }>()
  const charges = options.getClient !== undefined
  // mppx resolves a client for every credential it looks at; without an RPC it only ever sees
  // proofs that did not verify locally, and those are refused before it is asked.
  const getClient = trackBroadcasts(options.getClient ?? noTempoRpc, watched)

  const createServer = () => {
    const { Mppx, tempo } = mppxServer()
    const store = kvStore(options.store)
    const mppx = Mppx.create({
      secretKey,
      realm,
      methods: [
        tempo.charge({
          currency,
          recipient,
          decimals: DECIMALS,
          getClient,
          store,
          // Sponsorship (fee payer) is not offered, so no sponsor budget bookkeeping either.
          sponsorBudget: false,
        }),
      ],
    })
    return { store, mppx }
  }
  let server: ReturnType<typeof createServer> | undefined
  const paymentServer = () => (server ??= createServer())

  /** The route request mppx re-derives the challenge from when validating (binding check). */
  function routeOptions(quote: PriceQuote) {
    return {
      realm,
      meta: { route: quote.route },
      request: { amount: formatUnits(quote.amountMicros, DECIMALS), chainId, currency, recipient },
    }
  }

  function offers(quote: PriceQuote): boolean {
    return quote.amountMicros === 0n || charges
  }

  function challenge(quote: PriceQuote): ChallengeParts {
    if (quote.amountMicros < 0n) throw new RangeError('amountMicros must not be negative')
    if (!offers(quote)) return { headers: {}, body: {} }
    const { Challenge } = mppxRoot()
    const issued = Challenge.fromMethod(mppxTempo().Methods.charge, {
      realm,
      secretKey,
      expires: new Date(now() + ttlMs).toISOString(),
      ...(quote.description ? { description: quote.description } : {}),
      meta: { route: quote.route },
      request: {
        amount: formatUnits(quote.amountMicros, DECIMALS),
        currency,
        decimals: DECIMALS,
        recipient,
        chainId,
      },
    })
    return { headers: { 'WWW-Authenticate': Challenge.serialize(issued) }, body: {} }
  }

  async function verify(authorization: string, quote: PriceQuote): Promise<VerifiedPayment> {
    if (!offers(quote)) {
      throw new PaymentRejected(
        'unsupported_scheme',
        'MPP charges are not offered here: this gateway has no Tempo RPC (TEMPO_RPC_URL) to verify and broadcast them, so its 402 carries no ' +
          'WWW-Authenticate: Payment challenge. Pay with x402 (PAYMENT-SIGNATURE or X-PAYMENT); MPP is accepted here for $0 wallet proofs only.',
      )
    }
    const { Challenge, Credential } = mppxRoot()
    let credential: Credential.Credential
    try {
      credential = Credential.deserialize(authorization.trim())
    } catch {
      throw new PaymentRejected('malformed', 'Authorization is not a Payment credential')
    }
    const issued = credential.challenge
    if (issued.method !== MPP_METHOD || issued.intent !== MPP_INTENT) {
      throw new PaymentRejected('unsupported_scheme', `Unsupported MPP method ${issued.method}/${issued.intent}`)
    }
    if (!Challenge.verify(issued, { secretKey })) {
      throw new PaymentRejected('challenge_forged', 'Challenge was not issued by this gateway')
    }
    if (issued.realm !== realm) throw new PaymentRejected('wrong_route', `Challenge is for realm ${issued.realm}`)
    const expiresAt = issued.expires === undefined ? Number.NaN : Date.parse(issued.expires)
    if (Number.isNaN(expiresAt)) throw new PaymentRejected('malformed', 'Challenge has no valid expiry')
    if (expiresAt <= now()) throw new PaymentRejected('challenge_expired', `Challenge expired at ${issued.expires}`)
    const route = routeOf(issued)
    if (route !== quote.route) {
      throw new PaymentRejected('wrong_route', `Challenge was issued for ${route ?? 'another route'}`)
    }
    checkRequest(issued.request as ChargeRequest, quote)

    const payload = parsePayload(credential.payload)
    const zeroValue = quote.amountMicros === 0n
    if (zeroValue !== (payload.type === 'proof')) {
      throw new PaymentRejected('wrong_amount', zeroValue ? 'A $0 challenge takes a proof' : 'A proof pays nothing')
    }
    const detail: Record<string, string> = { challengeId: issued.id, mode: modeOf(payload), route: quote.route }
    let replayKey: string
    let storeKey: string
    let txHash: string | undefined
    if (payload.type === 'proof') {
      replayKey = `mpp:proof:${issued.id}`
      storeKey = `mppx:charge:proof:${issued.id}`
    } else {
      txHash = payload.type === 'hash' ? payload.hash.toLowerCase() : await canonicalTxHash(payload.signature, detail)
      detail.txHash = txHash
      replayKey = `mpp:tx:${txHash}`
      storeKey = `mppx:charge:${txHash}`
    }
    // Already claimed by an earlier broadcast (mppx's Store key names): refuse without an RPC.
    if ((await options.store.get(storeKey)) !== null) {
      throw new PaymentRejected('nonce_already_used', 'This payment credential has already been used')
    }

    // A $0 proof of a plain key is a signature and nothing else: checked here, no RPC call.
    // Anything else (a Tempo access key, p256/WebAuthn, a contract account) needs the chain.
    const proofSigner = payload.type === 'proof' ? localProofSigner(credential, issued, payload.signature) : undefined
    let sender: Address | undefined = proofSigner
    if (sender === undefined) {
      if (!charges) {
        throw new PaymentRejected(
          'invalid_signature',
          'Proof signature does not match the source account (this gateway has no Tempo RPC, so only plain secp256k1 signatures of the source key can be verified)',
        )
      }
      const { mppx } = paymentServer()
      let validation: Awaited<ReturnType<typeof mppx.validateCredential>>
      try {
        validation = await mppx.validateCredential(credential, routeOptions(quote))
      } catch (err) {
        throw toRejection(err)
      }
      const details = (validation.details ?? {}) as { sender?: Address }
      sender = details.sender ?? sourceAddress(credential.source)
    }
    if (sender === undefined) throw new PaymentRejected('invalid_signature', 'Payer could not be determined')
    const payer = getAddress(sender)

    let settling: Promise<SettlementOutcome> | undefined
    const settleOnce = async (): Promise<SettlementOutcome> => {
      if (proofSigner !== undefined) return claimProof(issued, payer)
      const watch = txHash !== undefined && payload.type === 'transaction' ? txHash : undefined
      if (watch !== undefined) watched.set(watch, { sent: false, refused: false })
      try {
        const receipt = await paymentServer().mppx.broadcastCredential(credential, routeOptions(quote))
        return {
          status: 'settled',
          reference: receipt.reference,
          payer,
          network,
          headers: { 'Payment-Receipt': mppxRoot().Receipt.serialize(receipt) },
        }
      } catch (err) {
        const state = watch === undefined ? undefined : watched.get(watch)
        if (watch !== undefined && state?.sent === true && !state.refused && isUncertain(err)) {
          return { status: 'pending', reference: watch }
        }
        return { status: 'failed', reason: describe(err) }
      } finally {
        if (watch !== undefined) watched.delete(watch)
      }
    }

    return {
      protocol: 'mpp',
      version: 1,
      payer,
      amountMicros: quote.amountMicros,
      replayKey,
      zeroValue,
      detail,
      settle: () => (settling ??= settleOnce()),
    }
  }

  /**
   * The payer of a $0 proof whose signature is a plain 65-byte secp256k1 signature of the source
   * account over mppx's EIP-712 `Proof(account, challengeId, realm)` (domain MPP/3/chainId), or
   * undefined when it is not one (mppx then decides, if an RPC is there to ask).
   */
  function localProofSigner(credential: Credential.Credential, issued: Challenge.Challenge, signature: Hex): Address | undefined {
    const { Proof } = mppxTempo()
    const source = credential.source === undefined ? null : Proof.parseProofSource(credential.source)
    if (source === null || source.chainId !== chainId) throw new PaymentRejected('invalid_signature', 'Proof credential source is invalid')
    if (!isHex(signature) || signature.length !== 132) return undefined
    const digest = hexToBytes(Proof.hash({ account: source.address, chainId, challengeId: issued.id, realm: issued.realm }))
    const recovered = recoverSigner(digest, hexToBytes(signature))
    return recovered !== null && recovered === source.address.toLowerCase() ? getAddress(source.address) : undefined
  }

  /** settle() of a locally verified proof: claims it in the replay store as mppx would, no RPC. */
  async function claimProof(issued: Challenge.Challenge, payer: Address): Promise<SettlementOutcome> {
    const expires = issued.expires === undefined ? now() + ttlMs : Date.parse(issued.expires)
    const { Store } = mppxServer()
    if (!(await Store.tryClaim(paymentServer().store, `mppx:charge:proof:${issued.id}`, expires))) {
      return { status: 'failed', reason: 'Proof credential has already been used' }
    }
    const { Receipt } = mppxRoot()
    const receipt = Receipt.from({ method: MPP_METHOD, status: 'success', timestamp: new Date(now()).toISOString(), reference: issued.id })
    return { status: 'settled', reference: issued.id, payer, network, headers: { 'Payment-Receipt': Receipt.serialize(receipt) } }
  }

  function checkRequest(request: ChargeRequest, quote: PriceQuote): void {
    if (String(request.amount) !== quote.amountMicros.toString()) {
      throw new PaymentRejected('wrong_amount', `Challenge asks ${String(request.amount)}, route costs ${quote.amountMicros}`)
    }
    if (!sameAddress(request.currency, currency)) throw new PaymentRejected('wrong_asset', 'Challenge currency differs')
    if (!sameAddress(request.recipient, recipient)) throw new PaymentRejected('wrong_payee', 'Challenge recipient differs')
    if (request.methodDetails?.chainId !== chainId) throw new PaymentRejected('wrong_network', 'Challenge chain differs')
  }

  return { realm, chainId, currency, recipient, charges, offers, challenge, verify }
}

const noTempoRpc: TempoClientFactory = () => {
  throw new Error('TEMPO_RPC_URL is not configured: MPP tempo/charge payments cannot be verified')
}

// ---------------------------------------------------------------------------------------------

function parsePayload(payload: unknown): PaymentPayload {
  const p = payload as { type?: unknown; signature?: unknown; hash?: unknown } | null
  const isHex = (v: unknown): v is Hex => typeof v === 'string' && /^0x[0-9a-fA-F]*$/.test(v)
  if (p !== null && typeof p === 'object') {
    if ((p.type === 'transaction' || p.type === 'proof') && isHex(p.signature)) {
      return { type: p.type, signature: p.signature }
    }
    if (p.type === 'hash' && isHex(p.hash) && p.hash.length === 66) return { type: 'hash', hash: p.hash }
  }
  throw new PaymentRejected('malformed', 'Unknown MPP credential payload')
}

/** The route bound in the challenge's `opaque` (HMAC-covered, so trusted once the id checks). */
function routeOf(challenge: Challenge.Challenge): string | undefined {
  let meta: Record<string, unknown> | undefined = challenge.meta
  if (meta === undefined && challenge.opaque !== undefined) {
    try {
      meta = mppxRoot().PaymentRequest.deserialize(challenge.opaque)
    } catch {
      throw new PaymentRejected('malformed', 'Challenge opaque cannot be decoded')
    }
  }
  const route = meta?.route
  return typeof route === 'string' ? route : undefined
}

function modeOf(payload: PaymentPayload): string {
  return payload.type === 'transaction' ? 'pull' : payload.type === 'hash' ? 'push' : 'proof'
}

/**
 * The hash the transaction will have on chain: mppx broadcasts the re-serialized (canonical)
 * envelope, so hash that, as mppx does for its own replay claim.
 */
async function canonicalTxHash(serialized: Hex, detail: Record<string, string>): Promise<string> {
  try {
    const { Transaction } = viemTempo()
    const tx = Transaction.deserialize(serialized as Transaction.TransactionSerializedTempo)
    const validBefore = (tx as { validBefore?: number | bigint }).validBefore
    if (validBefore !== undefined) detail.validBefore = String(validBefore)
    return keccak256(await Transaction.serialize(tx)).toLowerCase()
  } catch {
    throw new PaymentRejected('malformed', 'Payment transaction cannot be decoded')
  }
}

function sourceAddress(source: string | undefined): Address | undefined {
  const match = source?.match(/^did:pkh:eip155:\d+:(0x[0-9a-fA-F]{40})$/)
  return match?.[1] as Address | undefined
}

function sameAddress(a: unknown, b: string): boolean {
  return typeof a === 'string' && a.toLowerCase() === b.toLowerCase()
}

function describe(err: unknown): string {
  if (err instanceof BaseError) return err.shortMessage
  return err instanceof Error ? err.message : String(err)
}

/** Timeouts and transport failures: the node may or may not have taken the transaction. */
function isUncertain(err: unknown): boolean {
  if (!(err instanceof BaseError)) return false
  return err.walk((e) => e instanceof TimeoutError || e instanceof HttpRequestError) !== null
}

function isRevert(err: unknown): boolean {
  if (!(err instanceof BaseError)) return false
  return err.walk((e) => (e as { name?: string }).name === 'ExecutionRevertedError' || /revert/i.test((e as Error).message)) !== null
}

/** mppx / viem errors from validateCredential → PaymentRejected (infrastructure errors pass through). */
function toRejection(err: unknown): unknown {
  const { Errors } = mppxRoot()
  if (err instanceof PaymentRejected) return err
  if (err instanceof Errors.PaymentExpiredError) return new PaymentRejected('challenge_expired', err.message)
  if (err instanceof Errors.InvalidPayloadError || err instanceof Errors.MalformedCredentialError) {
    return new PaymentRejected('malformed', err.message)
  }
  if (err instanceof Errors.InvalidChallengeError) {
    const reason: RejectReason = /does not match/.test(err.message) ? 'wrong_route' : 'challenge_forged'
    return new PaymentRejected(reason, err.message)
  }
  if (err instanceof Errors.PaymentError) {
    const message = err.message
    const reason: RejectReason = /already been used/i.test(message)
      ? 'nonce_already_used'
      : /no matching (payment call|transfer)|Zero-amount|only valid for zero-amount/i.test(message)
        ? 'wrong_amount'
        : /memo is not bound/i.test(message)
          ? 'challenge_forged'
          : /not supported for this challenge/i.test(message)
            ? 'unsupported_scheme'
            : /Only Tempo/i.test(message)
              ? 'malformed'
              : 'invalid_signature'
    return new PaymentRejected(reason, message)
  }
  // The pre-broadcast simulation reverted: the payer cannot cover the transfer (or fees).
  if (isRevert(err) && !isUncertain(err)) return new PaymentRejected('insufficient_funds', describe(err))
  return err
}

/** mppx Store over the KeyValue port. Only `tryClaim` (SET NX PX) is needed on the charge path. */
function kvStore(kv: MppKeyValue): Store.AtomicStore {
  return mppxServer().Store.from({
    async get(key: string) {
      const raw = await kv.get(key)
      return raw === null ? null : (JSON.parse(raw) as unknown)
    },
    async put(key: string, value: unknown) {
      await kv.set(key, JSON.stringify(value))
    },
    async delete(key: string) {
      await kv.del(key)
    },
    async update(): Promise<never> {
      // A generic read-modify-write needs compare-and-set, which the KeyValue port lacks.
      // mppx charge uses it only for fee-payer sponsor budgets, which are disabled here.
      throw new Error('atomic update is not supported by the MPP KeyValue store')
    },
    async tryClaim(key: string, expires: number) {
      const ttlMs = Math.max(MIN_CLAIM_TTL_MS, expires - Date.now())
      return kv.set(key, JSON.stringify({ expires, type: 'mppx:replay' }), { ttlMs, onlyIfAbsent: true })
    },
  })
}

/** Wraps the RPC port so settle() can see whether its raw transaction reached the node. */
function trackBroadcasts(factory: TempoClientFactory, watched: Map<string, { sent: boolean; refused: boolean }>): TempoClientFactory {
  return async (parameters) => {
    const client = await factory(parameters)
    const request = client.request.bind(client)
    const tracked = (async (args: { method: string; params?: unknown }, opts?: unknown) => {
      const isBroadcast = args.method === 'eth_sendRawTransactionSync' || args.method === 'eth_sendRawTransaction'
      const raw = isBroadcast && Array.isArray(args.params) ? (args.params[0] as Hex | undefined) : undefined
      const state = raw === undefined ? undefined : watched.get(keccak256(raw).toLowerCase())
      if (state !== undefined) state.sent = true
      try {
        return await (request as (a: unknown, o?: unknown) => Promise<unknown>)(args, opts)
      } catch (err) {
        // A JSON-RPC error answer means the node looked at it and said no.
        if (state !== undefined && !isUncertain(err)) state.refused = true
        throw err
      }
    }) as Client['request']
    return Object.assign({}, client, { request: tracked }) as Client
  }
}

/** How long an MPP charge transaction that no node knows may still appear (its validity is far shorter). */
const MPP_UNSEEN_GIVE_UP_MS = 15 * 60_000

/**
 * Decides an MPP charge whose outcome is unknown, from its transaction's receipt on Tempo: mined
 * and successful = settled, reverted = failed; unseen for much longer than a charge transaction
 * stays valid = failed (it can never be mined); otherwise pending.
 */
export function mppReconciler(getClient: TempoClientFactory, now: () => number = Date.now): PendingReconciler {
  return async ({ reference, detail, since }) => {
    const hash = (reference || (detail.txHash as string | undefined)) as Hex | undefined
    if (!hash) return { status: 'failed', reason: 'no transaction to look up' }
    const client = await getClient({ chainId: TEMPO_CHAIN_ID })
    let receipt: { status: string } | null = null
    try {
      receipt = (await client.request({ method: 'eth_getTransactionReceipt', params: [hash] } as never)) as { status: string } | null
    } catch (err) {
      if (isUncertain(err)) return { status: 'pending' }
      throw err
    }
    if (receipt) return receipt.status === '0x1' ? { status: 'settled', reference: hash } : { status: 'failed', reason: 'the charge transaction reverted' }
    return now() - since.getTime() > MPP_UNSEEN_GIVE_UP_MS ? { status: 'failed', reason: 'the charge transaction was never mined' } : { status: 'pending' }
  }
}

/**
 * What Tempo says about a recorded MPP charge (confirmations.ts). Tempo finalizes a block when it
 * is produced, so a successful receipt is final. A receipt that is not there (a lagging or failed-
 * over RPC node) is held as not confirmed, never reversed by us: the charge was the buyer's own
 * signed transaction, broadcast once, and only its receipt can tell; refunds drawing on it wait.
 */
export function mppChainTruth(getClient: TempoClientFactory): ChainTruthReader {
  return async ({ reference, detail }) => {
    const hash = (reference || (detail.txHash as string | undefined)) as Hex | undefined
    if (!hash) return { status: 'unknown' }
    const client = await getClient({ chainId: TEMPO_CHAIN_ID })
    let receipt: { status: string; blockNumber?: string } | null
    try {
      receipt = (await client.request({ method: 'eth_getTransactionReceipt', params: [hash] } as never)) as { status: string; blockNumber?: string } | null
    } catch (err) {
      if (isUncertain(err)) return { status: 'unknown' }
      throw err
    }
    if (receipt === null || receipt.status !== '0x1') return { status: 'missing' }
    return { status: 'confirmed', reference: hash, blockNumber: receipt.blockNumber ? BigInt(receipt.blockNumber) : null }
  }
}
