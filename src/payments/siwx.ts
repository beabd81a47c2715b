// Wallet proof for owner endpoints (the scheduler's today, any service's: the API is method +
// URL): CAIP-122 Sign-In-With-X exactly as `@x402/extensions/sign-in-with-x` builds it (client:
// createSIWxPayload + encodeSIWxHeader, header SIGN-IN-WITH-X), bound to a nonce we issued, to
// one HTTP request (method + absolute URL), usable once, before its expiry.
//
// The binding to the request: the URL is the message's `uri` (and its only `resources` entry);
// the method is written into the signed `statement` ("… Authorize one DELETE request to the URI
// below."), which the package's client signs verbatim, so the signature itself says which method
// it allows; and the nonce record we keep remembers both, so a proof answered to the challenge of
// `GET /tasks/t_1` is refused for `DELETE /tasks/t_1` (wrong_method) and for `/tasks/t_2`
// (wrong_uri). EIP-4361 has no method field, and `resources` must be URIs, hence the statement.
//
// What comes from the package: the challenge skeleton (declareSIWxExtension: version,
// supportedChains, schema), header parsing (parseSIWxHeader: base64 JSON + zod schema) and the
// signature check (verifySIWxSignature: rebuilds the EIP-4361 message with the siwe library and
// recovers the EOA signer with viem, no RPC). What is ours: the nonce bookkeeping (KeyValue) and
// the field checks. The package's validateSIWxMessage is deliberately not used: it reads
// Date.now() directly (no injectable clock), compares only the uri's origin (we bind the exact
// resource URL), and knows nothing of which nonces we issued.
//
// Smart-contract wallets: ERC-1271 (deployed) and ERC-6492 (counterfactual) signatures can only
// be checked with an eth_call against the chain, i.e. an RPC. This verifier is offline and
// EOA-only; such signatures are refused as invalid_signature with a message that says why.

import { randomBytes } from 'node:crypto'
import { SIGN_IN_WITH_X, declareSIWxExtension, parseSIWxHeader, verifySIWxSignature } from '@x402/extensions/sign-in-with-x'
import type { SIWxExtensionInfo, SIWxExtensionSchema, SIWxPayload, SupportedChain } from '@x402/extensions/sign-in-with-x'
import { getAddress, isAddress } from 'viem'
import type { KeyValue } from '../platform/kv/index.ts'

/** The request header carrying the proof (base64 JSON of the SIWxPayload); read by credentials.ts. */
export { SIWX_HEADER } from './credentials.ts'
/** The key of the challenge in the 401 body's (and x402 PAYMENT-REQUIRED's) `extensions`. */
export const SIWX_EXTENSION_KEY = SIGN_IN_WITH_X

export type WalletProofRejectReason =
  | 'malformed'
  | 'wrong_domain'
  | 'wrong_uri'
  | 'wrong_method'
  | 'expired'
  | 'not_yet_valid'
  | 'unknown_nonce'
  | 'nonce_used'
  | 'invalid_signature'
  | 'unsupported_chain'

/** Why a SIGN-IN-WITH-X header was refused. The HTTP layer maps it (401 + a fresh challenge). */
export class WalletProofRejected extends Error {
  readonly reason: WalletProofRejectReason
  constructor(reason: WalletProofRejectReason, message: string) {
    super(message)
    this.name = 'WalletProofRejected'
    this.reason = reason
  }
}

/** The object placed at `extensions["sign-in-with-x"]` (same shape x402 v2 puts in PAYMENT-REQUIRED). */
export type SiwxChallenge = {
  info: SIWxExtensionInfo
  supportedChains: SupportedChain[]
  schema: SIWxExtensionSchema
}

export interface SiwxVerifier {
  /**
   * The challenge for one request, `method` on `resourceUrl` (fresh nonce, issuedAt now,
   * expirationTime now+ttl, the method in the statement), as the 401 body's
   * extensions["sign-in-with-x"]. Nonces are remembered with the method and URL they were issued
   * for (KeyValue, TTL = expiry) so only ours are accepted, and only for that request.
   */
  challenge(method: string, resourceUrl: string): Promise<SiwxChallenge>
  /**
   * Verifies the SIGN-IN-WITH-X header of a `method` request to `resourceUrl` and consumes its
   * nonce; throws WalletProofRejected (a refusal consumes nothing).
   */
  verify(header: string, method: string, resourceUrl: string): Promise<{ address: `0x${string}`; chainId: string }>
}

export interface SiwxVerifierOptions {
  /** RFC 3986 authority the proofs are bound to: the public host[:port] (no scheme), e.g. `api.example.com`. Must equal `new URL(resourceUrl).host`. */
  domain: string
  store: Pick<KeyValue, 'get' | 'set' | 'del'>
  now?: () => number
  /** Challenge lifetime (default 5 min). */
  ttlMs?: number
  /** CAIP-2 EVM chains accepted (default ['eip155:8453']). Only `eip155:<n>`: the result is a 0x address. */
  supportedChains?: string[]
  /**
   * Opening sentence of the signed statement (one line, EIP-4361 statement characters only:
   * ASCII letters, digits, spaces and `-._~:/?#[]@!$&'()*+,;=`). The verifier appends the
   * request it authorizes: `<statement>. Authorize one <METHOD> request to the URI below.`
   */
  statement?: string
  /** Clock skew allowed between replicas for the not-before checks (default 5 s). Expiry is never stretched. */
  clockToleranceMs?: number
  /** Prefix of the KeyValue keys (default `siwx:`). */
  keyPrefix?: string
}

/** What we remember per issued nonce: the request it is for and the fields the signed message must repeat verbatim. */
interface IssuedChallenge {
  /** The HTTP method the nonce was issued for (upper case). */
  method: string
  domain: string
  uri: string
  version: string
  issuedAt: string
  expirationTime: string
  statement?: string
  resources: string[]
}

const DEFAULT_TTL_MS = 5 * 60_000
const DEFAULT_TOLERANCE_MS = 5_000
const MAX_HEADER_CHARS = 16_384
// SIWE nonces are alphanumeric, >= 8 chars; ours are 32 hex chars. Anything else was not issued here.
const NONCE_SHAPE = /^[A-Za-z0-9]{8,64}$/
const EVM_CHAIN = /^eip155:[1-9]\d*$/
const EOA_SIGNATURE = /^0x[0-9a-fA-F]{130}$/
const HEX = /^0x[0-9a-fA-F]*$/
// An HTTP method token as this API takes it (RFC 9110 methods are upper-case letters, some with '-').
const METHOD_SHAPE = /^[A-Z][A-Z-]{0,31}$/
// EIP-4361: statement = *( reserved / unreserved / " " ) — what the siwe message parser accepts.
const STATEMENT_SHAPE = /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;= ]*$/
// The clause the verifier appends to the statement; the method is read back from it.
const methodClause = (method: string) => `Authorize one ${method} request to the URI below.`
const METHOD_CLAUSE = /(?:^|\. )Authorize one ([A-Z][A-Z-]*) request to the URI below\.$/
// ERC-6492 wrapped signatures end with this magic suffix.
const ERC6492_MAGIC = '6492649264926492649264926492649264926492649264926492649264926492'
const SMART_WALLET_NOTE = 'smart-contract wallet signatures (ERC-1271 / ERC-6492) need an RPC to verify and are not accepted; sign with an EOA key'

function normalizeUrl(url: string): string | undefined {
  try {
    return new URL(url).href
  } catch {
    return undefined
  }
}

/** The method as the verifier compares it (upper case); a TypeError for anything that is not a method token. */
function normalizeMethod(method: string): string {
  const upper = typeof method === 'string' ? method.toUpperCase() : ''
  if (!METHOD_SHAPE.test(upper)) throw new TypeError(`Not an HTTP method: ${JSON.stringify(method)}`)
  return upper
}

/** The method a signed statement authorizes, if it carries our clause. */
function methodOfStatement(statement: string | undefined): string | undefined {
  return statement === undefined ? undefined : METHOD_CLAUSE.exec(statement)?.[1]
}

function sameList(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  const x = a ?? []
  const y = b ?? []
  return x.length === y.length && x.every((v, i) => v === y[i])
}

function parseIssued(raw: string): IssuedChallenge | undefined {
  try {
    const value = JSON.parse(raw) as Partial<IssuedChallenge> | null
    if (value === null || typeof value !== 'object') return undefined
    // A record without a method (none are written so) is not trusted for any method.
    if (typeof value.method !== 'string' || typeof value.uri !== 'string' || typeof value.issuedAt !== 'string' || typeof value.expirationTime !== 'string') return undefined
    return value as IssuedChallenge
  } catch {
    return undefined
  }
}

export function createSiwxVerifier(options: SiwxVerifierOptions): SiwxVerifier {
  const { domain, store } = options
  const now = options.now ?? Date.now
  const ttlMs = options.ttlMs ?? DEFAULT_TTL_MS
  const tolerance = options.clockToleranceMs ?? DEFAULT_TOLERANCE_MS
  const chains = options.supportedChains ?? ['eip155:8453']
  const prefix = options.keyPrefix ?? 'siwx:'
  const statement = options.statement

  let authority: string
  try {
    authority = new URL(`https://${domain}`).host
  } catch {
    authority = ''
  }
  if (domain === '' || authority !== domain) {
    throw new TypeError(`SIWX domain must be a lowercase host[:port] without scheme or default port, got ${JSON.stringify(domain)}`)
  }
  if (!Number.isFinite(ttlMs) || ttlMs < 1_000) throw new RangeError(`ttlMs must be >= 1000, got ${ttlMs}`)
  if (!Number.isFinite(tolerance) || tolerance < 0) throw new RangeError(`clockToleranceMs must be >= 0, got ${tolerance}`)
  if (chains.length === 0) throw new TypeError('supportedChains must not be empty')
  for (const chain of chains) {
    if (!EVM_CHAIN.test(chain)) throw new TypeError(`Only EVM chains (eip155:<id>) are supported, got ${JSON.stringify(chain)}`)
  }
  if (statement !== undefined && /[\r\n]/.test(statement)) throw new TypeError('statement must be a single line (EIP-4361)')
  if (statement !== undefined && !STATEMENT_SHAPE.test(statement)) {
    throw new TypeError(`statement may hold only EIP-4361 statement characters (ASCII letters, digits, spaces, -._~:/?#[]@!$&'()*+,;=), got ${JSON.stringify(statement)}`)
  }
  // The signed statement of a challenge for `method`: the configured sentence, then the request.
  const opening = statement === undefined || statement.trim() === '' ? '' : `${statement.trim().replace(/\.+$/, '')}. `
  const statementFor = (method: string) => `${opening}${methodClause(method)}`

  const issuedKey = (nonce: string) => `${prefix}nonce:${nonce}`
  const usedKey = (nonce: string) => `${prefix}used:${nonce}`

  // The package's own skeleton: version, supportedChains ({chainId, type: 'eip191'}), schema.
  const declaration = declareSIWxExtension({
    network: chains,
    expirationSeconds: ttlMs / 1000,
  })[SIGN_IN_WITH_X]
  if (declaration === undefined) throw new Error('declareSIWxExtension returned no sign-in-with-x declaration')
  const version = declaration.info.version
  const declaredChains = declaration.supportedChains
  const schema = declaration.schema

  async function challenge(method: string, resourceUrl: string): Promise<SiwxChallenge> {
    const httpMethod = normalizeMethod(method)
    const uri = normalizeUrl(resourceUrl)
    if (uri === undefined) throw new TypeError(`Not an absolute URL: ${resourceUrl}`)
    const host = new URL(uri).host
    // createSIWxPayload refuses a challenge whose domain/uri origin differ from the URL it called.
    if (host !== domain) throw new Error(`Resource URL host ${host} does not match the SIWX domain ${domain}`)

    const nonce = randomBytes(16).toString('hex')
    const issuedAtMs = now()
    const issued: IssuedChallenge = {
      method: httpMethod,
      domain,
      uri,
      version,
      issuedAt: new Date(issuedAtMs).toISOString(),
      expirationTime: new Date(issuedAtMs + ttlMs).toISOString(),
      statement: statementFor(httpMethod),
      resources: [uri],
    }
    const stored = await store.set(issuedKey(nonce), JSON.stringify(issued), { ttlMs, onlyIfAbsent: true })
    if (!stored) throw new Error('SIWX nonce collision') // 128 random bits: not expected to happen

    const info: SIWxExtensionInfo = {
      domain,
      uri,
      version,
      nonce,
      issuedAt: issued.issuedAt,
      resources: [uri],
      expirationTime: issued.expirationTime,
      statement: issued.statement as string,
    }
    return {
      info,
      supportedChains: declaredChains.map((c) => ({ ...c })),
      schema,
    }
  }

  async function verify(header: string, method: string, resourceUrl: string): Promise<{ address: `0x${string}`; chainId: string }> {
    const httpMethod = normalizeMethod(method)
    const expectedUri = normalizeUrl(resourceUrl)
    if (expectedUri === undefined) throw new TypeError(`Not an absolute URL: ${resourceUrl}`)

    // 1. parse
    if (typeof header !== 'string' || header.length === 0 || header.length > MAX_HEADER_CHARS) {
      throw new WalletProofRejected('malformed', 'SIGN-IN-WITH-X header is empty or too large')
    }
    let payload: SIWxPayload
    try {
      payload = parseSIWxHeader(header.trim())
    } catch (err) {
      throw new WalletProofRejected('malformed', err instanceof Error ? err.message : 'Invalid SIWX header')
    }

    // 2. chain, domain, uri, method (as signed: the statement's clause)
    if (!chains.includes(payload.chainId)) {
      throw new WalletProofRejected('unsupported_chain', `Chain ${payload.chainId} is not accepted; supported: ${chains.join(', ')}`)
    }
    if (payload.type !== 'eip191') {
      throw new WalletProofRejected('malformed', `Signature type ${payload.type} does not fit ${payload.chainId} (expected eip191)`)
    }
    if (payload.domain !== domain) {
      throw new WalletProofRejected('wrong_domain', `Domain mismatch: expected "${domain}", got "${payload.domain}"`)
    }
    if (normalizeUrl(payload.uri) !== expectedUri) {
      throw new WalletProofRejected('wrong_uri', `URI mismatch: expected "${expectedUri}", got "${payload.uri}"`)
    }
    const signedFor = methodOfStatement(payload.statement)
    if (signedFor !== undefined && signedFor !== httpMethod) {
      throw new WalletProofRejected('wrong_method', `Method mismatch: the proof authorizes ${signedFor}, this request is ${httpMethod}`)
    }

    // 3. time
    const t = now()
    const issuedAtMs = Date.parse(payload.issuedAt)
    if (Number.isNaN(issuedAtMs)) throw new WalletProofRejected('malformed', 'Invalid issuedAt timestamp')
    if (payload.expirationTime === undefined) {
      throw new WalletProofRejected('malformed', 'expirationTime missing (challenges from this server always carry one)')
    }
    const expiresAtMs = Date.parse(payload.expirationTime)
    if (Number.isNaN(expiresAtMs)) throw new WalletProofRejected('malformed', 'Invalid expirationTime timestamp')
    if (t >= expiresAtMs) throw new WalletProofRejected('expired', `Proof expired at ${payload.expirationTime}`)
    if (t + tolerance < issuedAtMs) throw new WalletProofRejected('not_yet_valid', `issuedAt ${payload.issuedAt} is in the future`)
    if (payload.notBefore !== undefined) {
      const notBeforeMs = Date.parse(payload.notBefore)
      if (Number.isNaN(notBeforeMs)) throw new WalletProofRejected('malformed', 'Invalid notBefore timestamp')
      if (t + tolerance < notBeforeMs) throw new WalletProofRejected('not_yet_valid', `Not valid before ${payload.notBefore}`)
    }

    // 4. nonce: ours, unused, and issued for exactly this message
    const nonce = payload.nonce
    if (!NONCE_SHAPE.test(nonce)) throw new WalletProofRejected('unknown_nonce', 'Nonce was not issued by this server')
    if ((await store.get(usedKey(nonce))) !== null) throw new WalletProofRejected('nonce_used', 'Nonce already used')
    const raw = await store.get(issuedKey(nonce))
    if (raw === null) {
      // Consumed between the two reads (the winner deletes the issued key) or never ours / expired.
      if ((await store.get(usedKey(nonce))) !== null) throw new WalletProofRejected('nonce_used', 'Nonce already used')
      throw new WalletProofRejected('unknown_nonce', 'Nonce was not issued by this server or has expired')
    }
    const issued = parseIssued(raw)
    if (issued === undefined) throw new WalletProofRejected('unknown_nonce', 'Nonce record unreadable')
    if (issued.domain !== payload.domain) throw new WalletProofRejected('wrong_domain', 'Nonce was issued for another domain')
    if (issued.uri !== expectedUri) throw new WalletProofRejected('wrong_uri', `Nonce was issued for ${issued.uri}`)
    if (issued.method !== httpMethod) throw new WalletProofRejected('wrong_method', `Nonce was issued for ${issued.method}, this request is ${httpMethod}`)
    const differs = (
      [
        ['version', issued.version === payload.version],
        ['issuedAt', issued.issuedAt === payload.issuedAt],
        ['expirationTime', issued.expirationTime === payload.expirationTime],
        ['notBefore', payload.notBefore === undefined],
        ['requestId', payload.requestId === undefined],
        ['statement', (issued.statement ?? undefined) === (payload.statement ?? undefined)],
        ['resources', sameList(issued.resources, payload.resources)],
      ] as const
    )
      .filter(([, same]) => !same)
      .map(([field]) => field)
    if (differs.length > 0) {
      throw new WalletProofRejected('unknown_nonce', `Nonce was issued for a different challenge (${differs.join(', ')} ${differs.length === 1 ? 'differs' : 'differ'})`)
    }
    if (t >= Date.parse(issued.expirationTime)) throw new WalletProofRejected('expired', 'Challenge expired')

    // 5. signature (EOA only, offline)
    if (!isAddress(payload.address, { strict: false })) throw new WalletProofRejected('malformed', 'address is not an EVM address')
    const signature = payload.signature
    if (payload.signatureScheme === 'eip1271' || payload.signatureScheme === 'eip6492') {
      throw new WalletProofRejected('invalid_signature', `signatureScheme ${payload.signatureScheme}: ${SMART_WALLET_NOTE}`)
    }
    if (!HEX.test(signature)) throw new WalletProofRejected('invalid_signature', 'signature is not 0x-prefixed hex')
    if (signature.toLowerCase().endsWith(ERC6492_MAGIC)) {
      throw new WalletProofRejected('invalid_signature', `ERC-6492 signature: ${SMART_WALLET_NOTE}`)
    }
    if (!EOA_SIGNATURE.test(signature)) {
      throw new WalletProofRejected('invalid_signature', `not a 65-byte ECDSA signature: ${SMART_WALLET_NOTE}`)
    }
    let verified: Awaited<ReturnType<typeof verifySIWxSignature>>
    try {
      verified = await verifySIWxSignature(payload) // no evmVerifier: EOA recovery, no RPC
    } catch (err) {
      // The siwe library refuses fields it cannot put in an EIP-4361 message.
      throw new WalletProofRejected('malformed', `Cannot rebuild the signed message: ${err instanceof Error ? err.message : String(err)}`)
    }
    if (!verified.isValid) {
      throw new WalletProofRejected('invalid_signature', `${verified.invalidMessage} (the signature does not recover to ${payload.address}; ${SMART_WALLET_NOTE})`)
    }
    const address = getAddress(payload.address)

    // 6. consume exactly once (SET NX). The key outlives the proof a little, for replicas' clocks.
    const consumed = await store.set(usedKey(nonce), address, { ttlMs: Math.max(1, expiresAtMs - t) + tolerance, onlyIfAbsent: true })
    if (!consumed) throw new WalletProofRejected('nonce_used', 'Nonce already used')
    await store.del(issuedKey(nonce)).catch(() => 0) // cleanup only; the TTL would drop it anyway

    return { address, chainId: payload.chainId }
  }

  return { challenge, verify }
}
