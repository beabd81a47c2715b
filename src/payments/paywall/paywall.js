// The paywall page's script: pays the page's own URL with the wallet the browser injects
// (EIP-1193 `window.ethereum`). It asks the URL for a fresh 402 (as JSON, like any API client),
// has the wallet sign the x402 v2 `exact` authorization (EIP-3009 TransferWithAuthorization, EIP-712
// typed data), sends the request again with PAYMENT-SIGNATURE, and shows the answer and the
// settlement's transaction. No dependency: the wallet does the cryptography.

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

function randomNonce() {
  const bytes = crypto.getRandomValues(new Uint8Array(32))
  return `0x${Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('')}`
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

async function sign(ethereum, from, required, accepted) {
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
  // Declared extensions are echoed as the x402 client does; a payment-identifier gets this payment's id.
  if (required.extensions && typeof required.extensions === 'object') {
    const extensions = structuredClone(required.extensions)
    const identifier = extensions['payment-identifier']
    if (identifier && typeof identifier === 'object') identifier.info = { ...identifier.info, id: `pay_${randomNonce().slice(2, 34)}` }
    payment.extensions = extensions
  }
  return base64Json(payment)
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

async function pay() {
  const ethereum = window.ethereum
  payButton.disabled = true
  try {
    const init = requestInit()
    say('Asking your wallet for an account…')
    const [from] = await ethereum.request({ method: 'eth_requestAccounts' })
    if (!from) throw new Error('The wallet gave no account.')
    say('Fetching the price…')
    const challenge = await fetch(location.href, init)
    const header = challenge.headers.get('payment-required')
    if (challenge.status !== 402 || !header) {
      say(challenge.ok ? 'Done: nothing to pay.' : 'The request was refused before payment; see the answer below.')
      await show(challenge)
      return
    }
    const required = fromBase64Json(header)
    const accepted = exactRequirement(required)
    say('Sign the payment in your wallet…')
    const signature = await sign(ethereum, from, required, accepted)
    say('Paying…')
    const paid = await fetch(location.href, { ...init, headers: { ...init.headers, 'payment-signature': signature } })
    say(paid.ok ? 'Paid. The answer is below.' : 'The payment was not accepted; see the answer below.')
    await show(paid)
  } catch (error) {
    say(error instanceof Error ? error.message : String(error))
  } finally {
    payButton.disabled = false
  }
}

if (window.ethereum && typeof window.ethereum.request === 'function') {
  payButton.addEventListener('click', pay)
} else {
  payButton.hidden = true
  document.getElementById('paywall-no-wallet').hidden = false
}
