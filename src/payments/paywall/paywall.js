// The paywall page's script: pays the page's own URL with the wallet the browser injects
// (EIP-1193 `window.ethereum`). It asks the URL for a fresh 402 (as JSON, like any API client),
// has the wallet sign the x402 v2 `exact` authorization (EIP-3009 TransferWithAuthorization, EIP-712
// typed data), sends the request again with PAYMENT-SIGNATURE, and shows the answer and the
// settlement's transaction. No dependency: the wallet does the cryptography.
//
// Never twice: once a purchase is answered the button stays disabled (and a forced click does
// nothing). Until then one purchase attempt (this account, this body, this amount) keeps one
// x402 `payment-identifier` id, sent whenever the 402 declares the extension, so a retry after a
// lost answer gets the server's replay of the first answer instead of a second charge; after a
// failed connection the same signed payment is even sent again as it was (same EIP-3009 nonce).

const main = document.getElementById('paywall')
const payButton = document.getElementById('paywall-pay')
const statusLine = document.getElementById('paywall-status')

const TRANSFER_WITH_AUTHORIZATION = [
  { name: 'from', type: 'address' },
  { name: 'to', type: 'address' },
  { name: 'value', type: 'uint256' },
  { name: 'validAfter', type: 'uint256' },
  { name: 'validBefore', type: 'uint256' },
  { name: 'nonce', type: 'bytes32' },
]
const EIP712_DOMAIN = [
  { name: 'name', type: 'string' },
  { name: 'version', type: 'string' },
  { name: 'chainId', type: 'uint256' },
  { name: 'verifyingContract', type: 'address' },
]

function say(text) {
  statusLine.textContent = text
}

function base64Json(value) {
  const bytes = new TextEncoder().encode(JSON.stringify(value))
  let binary = ''
  for (const byte of bytes) binary += String.fromCharCode(byte)
  return btoa(binary)
}

function fromBase64Json(text) {
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0))
  return JSON.parse(new TextDecoder().decode(bytes))
}

function hex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('')
}

function randomNonce() {
  return `0x${hex(crypto.getRandomValues(new Uint8Array(32)))}`
}

/** A payment-identifier id (16-128 of A-Za-z0-9_-): `pay_` and 128 random bits, as the extension's generatePaymentId. */
function newPaymentId() {
  return `pay_${hex(crypto.getRandomValues(new Uint8Array(16)))}`
}

/** A signed payment is sent again only while this many seconds of its authorization remain. */
const RESEND_MARGIN_SECONDS = 30

/**
 * The purchase attempt under way: `key` names what is bought (account, body, amount), `id` is its
 * payment-identifier, `payment` the signed PAYMENT-SIGNATURE not yet answered by the server.
 * Replaced when the request changes or the server says the id belongs to another request.
 */
let attempt
/** True while a click is being handled. */
let busy = false
/** True once a purchase was answered: the page buys nothing more. */
let finished = false

function attemptKey(from, init) {
  const amountHeader = main.dataset.amountHeader
  return JSON.stringify([from.toLowerCase(), init.method, init.body ?? null, amountHeader ? (init.headers[amountHeader] ?? null) : null])
}

/** The request this page pays for: its method, body and amount header, as the form holds them. */
function requestInit() {
  const method = main.dataset.method
  const headers = { accept: 'application/json' }
  const init = { method, headers }
  const bodyField = document.getElementById('paywall-body')
  if (bodyField) {
    try {
      JSON.parse(bodyField.value)
    } catch {
      throw new Error('The request body is not valid JSON.')
    }
    headers['content-type'] = 'application/json'
    init.body = bodyField.value
  }
  const amountField = document.getElementById('paywall-amount')
  if (amountField && main.dataset.amountHeader) {
    if (!/^[0-9]+$/.test(amountField.value)) throw new Error('The amount must be a whole number of micro-USD.')
    headers[main.dataset.amountHeader] = amountField.value
  }
  return init
}

/** The first EVM `exact` entry of the 402; other schemes and any extensions are left alone. */
function exactRequirement(required) {
  const accepted = (required.accepts ?? []).find((entry) => entry.scheme === 'exact' && /^eip155:\d+$/.test(entry.network))
  if (!accepted) throw new Error('This 402 offers no EVM payment a browser wallet can sign.')
  if (!accepted.extra?.name || !accepted.extra?.version) throw new Error('The 402 does not name the token’s EIP-712 domain.')
  return accepted
}

async function useChain(ethereum, chainId) {
  const current = Number.parseInt(await ethereum.request({ method: 'eth_chainId' }), 16)
  if (current === chainId) return
  try {
    await ethereum.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: `0x${chainId.toString(16)}` }] })
  } catch {
    throw new Error(`Switch your wallet to chain ${chainId} and try again.`)
  }
}

async function sign(ethereum, from, required, accepted, id) {
  const chainId = Number(accepted.network.split(':')[1])
  await useChain(ethereum, chainId)
  const now = Math.floor(Date.now() / 1000)
  const authorization = {
    from,
    to: accepted.payTo,
    value: accepted.amount,
    validAfter: String(now - 600),
    validBefore: String(now + accepted.maxTimeoutSeconds),
    nonce: randomNonce(),
  }
  const typedData = {
    types: { EIP712Domain: EIP712_DOMAIN, TransferWithAuthorization: TRANSFER_WITH_AUTHORIZATION },
    primaryType: 'TransferWithAuthorization',
    domain: { name: accepted.extra.name, version: accepted.extra.version, chainId, verifyingContract: accepted.asset },
    message: authorization,
  }
  const signature = await ethereum.request({ method: 'eth_signTypedData_v4', params: [from, JSON.stringify(typedData)] })
  const payment = { x402Version: 2, resource: required.resource, accepted, payload: { authorization, signature } }
  // Declared extensions are echoed as the x402 client does; a declared payment-identifier gets the
  // attempt's id (the same on every retry of the attempt), an undeclared one is never invented.
  let identified = false
  if (required.extensions && typeof required.extensions === 'object') {
    const extensions = structuredClone(required.extensions)
    const identifier = extensions['payment-identifier']
    if (identifier && typeof identifier === 'object' && identifier.info && typeof identifier.info === 'object') {
      identifier.info = { ...identifier.info, id }
      identified = true
    }
    payment.extensions = extensions
  }
  return { header: base64Json(payment), validBefore: Number(authorization.validBefore), identified }
}

async function show(response) {
  const text = await response.text()
  let shown = text
  try {
    shown = JSON.stringify(JSON.parse(text), null, 2)
  } catch {
    // not JSON: shown as it came
  }
  document.getElementById('paywall-result-status').textContent = `${response.status} ${response.statusText}`.trim()
  const receipt = response.headers.get('payment-response')
  let transaction = 'none'
  if (receipt) {
    try {
      const settled = fromBase64Json(receipt)
      transaction = `${settled.transaction} (${settled.network}, payer ${settled.payer})`
    } catch {
      transaction = 'unreadable PAYMENT-RESPONSE header'
    }
  } else if (response.headers.get('x-payment-status') === 'pending') {
    transaction = `pending ${response.headers.get('x-payment-reference') ?? ''}`.trim()
  }
  document.getElementById('paywall-transaction').textContent = transaction
  document.getElementById('paywall-response').textContent = shown
  document.getElementById('paywall-result').hidden = false
}

/** The purchase is answered: the button stays disabled and says so, the page buys nothing more. */
function finish(label) {
  finished = true
  attempt = undefined
  payButton.disabled = true
  payButton.textContent = label
}

/** The `code` of a problem+json answer, if it is one. */
async function problemCode(response) {
  try {
    const body = await response.clone().json()
    return typeof body?.code === 'string' ? body.code : undefined
  } catch {
    return undefined
  }
}

async function pay() {
  // A click on a button re-enabled from outside (devtools, an extension) buys nothing.
  if (finished || busy) {
    payButton.disabled = true
    return
  }
  busy = true
  payButton.disabled = true
  const ethereum = window.ethereum
  try {
    const init = requestInit()
    say('Asking your wallet for an account…')
    const [from] = await ethereum.request({ method: 'eth_requestAccounts' })
    if (!from) throw new Error('The wallet gave no account.')
    const key = attemptKey(from, init)
    if (attempt?.key !== key) attempt = { key, id: newPaymentId(), payment: undefined }
    const current = attempt
    if (current.payment && current.payment.validBefore - RESEND_MARGIN_SECONDS > Date.now() / 1000) {
      say('Sending your signed payment again…')
    } else {
      current.payment = undefined
      say('Fetching the price…')
      const challenge = await fetch(location.href, init)
      const header = challenge.headers.get('payment-required')
      if (challenge.status !== 402 || !header) {
        say(challenge.ok ? 'Done: nothing to pay.' : 'The request was refused before payment; see the answer below.')
        if (challenge.ok) finish('Done')
        await show(challenge)
        return
      }
      const required = fromBase64Json(header)
      const accepted = exactRequirement(required)
      say('Sign the payment in your wallet…')
      current.payment = await sign(ethereum, from, required, accepted, current.id)
      say('Paying…')
    }
    let paid
    try {
      paid = await fetch(location.href, { ...init, headers: { ...init.headers, 'payment-signature': current.payment.header } })
    } catch {
      // The payment may have been made and only its answer lost: the attempt (its id, its signed
      // payment) is kept, so the next click asks for the same purchase again.
      say(
        current.payment.identified
          ? 'The connection failed before the answer arrived. Click Pay again: the same payment is sent again, and if it already went through you get its answer without being charged twice.'
          : 'The connection failed before the answer arrived. Click Pay again to send the same signed payment again.',
      )
      return
    }
    // Answered: a signature is not sent again past an answer (the id is, until the request changes).
    current.payment = undefined
    if (paid.ok) {
      finish('Paid')
      say(
        paid.headers.get('x-payment-identifier-replay') === 'true'
          ? 'Paid. Your payment had already gone through: this is its answer again, and you were not charged again.'
          : 'Paid. The answer is below.',
      )
    } else {
      // The server frees the id of a purchase that bought nothing; one it calls another request's is dropped.
      const code = await problemCode(paid)
      if (code === 'payment_identifier_conflict') attempt = undefined
      say(
        code === 'payment_in_progress'
          ? 'Your payment is still being processed. Click Pay again in a few seconds to get its answer; you are not charged twice.'
          : 'The payment was not accepted; see the answer below.',
      )
    }
    await show(paid)
  } catch (error) {
    say(error instanceof Error ? error.message : String(error))
  } finally {
    busy = false
    if (!finished) payButton.disabled = false
  }
}

if (window.ethereum && typeof window.ethereum.request === 'function') {
  payButton.addEventListener('click', pay)
} else {
  payButton.hidden = true
  document.getElementById('paywall-no-wallet').hidden = false
}
