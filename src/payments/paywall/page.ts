// The paywall page a person's browser gets instead of a 402's JSON: what the operation is, its
// price, and how to pay (a browser wallet through paywall.js, an agent, a plan). Pure: a view in,
// HTML out. Every text is escaped, the page runs no inline script (paywall.js reads the data-*
// attributes of <main>) and loads only its own script and style sheet.
import { escapeHtml } from '../../platform/html.ts'

/** Where the page's script and style sheet are served, on every listener that can answer a 402. */
export const PAYWALL_ASSET_PREFIX = '/paywall/'

/** A plan that covers the operation, with its purchase URL on the gateway. */
export interface PaywallPlan {
  id: string
  title: string
  priceUsd: string
  purchaseUrl: string
}

export interface PaywallView {
  operation: { operationId: string; summary: string; description: string; method: string; path: string }
  /** Absolute URL an agent calls (the 402's resource.url when there is one). */
  resourceUrl: string
  /** Price in USD (`0.001000`); undefined when the caller names the amount (`amountHeader`). */
  priceUsd: string | undefined
  /** The header in which the caller names the amount in micros (scheduler escrow, memory deposits). */
  amountHeader: string | undefined
  /** x402 v2 terms: CAIP-2 network, token contract, payee. */
  network: string
  asset: string
  assetName: string
  payTo: string
  /** A JSON body to start from, when the operation takes one. */
  exampleBody: string | undefined
  service: { title: string; url: string }
  plans: PaywallPlan[]
  gatewayUrl: string
}

/** The Content-Security-Policy of the page: its own script and styles, requests to its own origin only. */
export const PAYWALL_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

function agentSnippet(view: PaywallView): string {
  const init: string[] = [`method: '${view.operation.method}'`]
  const headers: string[] = []
  if (view.exampleBody !== undefined) headers.push(`'content-type': 'application/json'`)
  if (view.amountHeader !== undefined) headers.push(`'${view.amountHeader}': '1000000'`)
  if (headers.length > 0) init.push(`headers: { ${headers.join(', ')} }`)
  if (view.exampleBody !== undefined) init.push(`body: JSON.stringify(${compactJson(view.exampleBody)})`)
  return [
    "import { x402Client } from '@x402/core/client'",
    "import { ExactEvmScheme } from '@x402/evm/exact/client'",
    "import { wrapFetchWithPayment } from '@x402/fetch'",
    "import { privateKeyToAccount } from 'viem/accounts'",
    '',
    'const wallet = privateKeyToAccount(process.env.PRIVATE_KEY)',
    `const payingFetch = wrapFetchWithPayment(fetch, new x402Client().register('${view.network}', new ExactEvmScheme(wallet)))`,
    `const response = await payingFetch('${view.resourceUrl}', { ${init.join(', ')} })`,
    'console.log(response.status, await response.json())',
  ].join('\n')
}

function curlSnippet(view: PaywallView): string {
  const parts = [`curl -i -X ${view.operation.method} '${view.resourceUrl}'`]
  if (view.amountHeader !== undefined) parts.push(`-H '${view.amountHeader}: 1000000'`)
  if (view.exampleBody !== undefined) parts.push(`-H 'content-type: application/json' -d '${compactJson(view.exampleBody)}'`)
  return `${parts.join(' \\\n     ')}   # the 402 to answer`
}

function compactJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text))
  } catch {
    return text
  }
}

function priceText(view: PaywallView): string {
  if (view.priceUsd !== undefined) return `${view.priceUsd} USD`
  return `the amount you choose, in micro-USD, in the ${view.amountHeader ?? 'amount'} header`
}

function walletForm(view: PaywallView): string {
  const fields: string[] = []
  if (view.exampleBody !== undefined) {
    fields.push(
      `<label for="paywall-body">Request body (JSON) sent with ${escapeHtml(view.operation.method)}</label>`,
      `<textarea id="paywall-body" rows="8" spellcheck="false">${escapeHtml(view.exampleBody)}</textarea>`,
    )
  }
  if (view.amountHeader !== undefined) {
    fields.push(
      `<label for="paywall-amount">Amount in micro-USD (${escapeHtml(view.amountHeader)}; 1000000 = 1 USD)</label>`,
      '<input id="paywall-amount" type="text" inputmode="numeric" pattern="[0-9]+" value="1000000">',
    )
  }
  return [
    '<section aria-labelledby="paywall-wallet-heading">',
    '<h2 id="paywall-wallet-heading">Pay with a browser wallet</h2>',
    `<p>Your wallet signs a USDC transfer authorization (EIP-3009) for exactly the price; the page sends the ${escapeHtml(view.operation.method)} request again with it and shows the answer. Nothing moves until the work is done.</p>`,
    ...fields,
    '<button type="button" id="paywall-pay">Pay with a browser wallet</button>',
    '<p id="paywall-no-wallet" hidden>No browser wallet was found (an EIP-1193 provider such as MetaMask or Coinbase Wallet). Pay from an agent instead, below.</p>',
    '<p id="paywall-status" role="status" aria-live="polite"></p>',
    '<div id="paywall-result" hidden>',
    '<h3>Result</h3>',
    '<dl><dt>Status</dt><dd id="paywall-result-status"></dd><dt>Transaction</dt><dd><code id="paywall-transaction">none</code></dd></dl>',
    '<pre id="paywall-response" tabindex="0"></pre>',
    '</div>',
    '</section>',
  ].join('\n')
}

function plansSection(view: PaywallView): string {
  if (view.plans.length === 0) return ''
  const items = view.plans.map(
    (plan) =>
      `<li>${escapeHtml(plan.title)} (<code>${escapeHtml(plan.id)}</code>): ${escapeHtml(plan.priceUsd)} USD, bought at <code>POST ${escapeHtml(plan.purchaseUrl)}</code></li>`,
  )
  return [
    '<section aria-labelledby="paywall-plans-heading">',
    '<h2 id="paywall-plans-heading">Or buy a plan</h2>',
    `<p>A plan pays for calls with a bearer token instead of a payment per call. Register at <code>POST ${escapeHtml(view.gatewayUrl)}/auth/register</code>, buy a plan with x402, then call with <code>Authorization: Bearer &lt;accessToken&gt;</code> (<a href="${escapeHtml(view.gatewayUrl)}/auth.md">auth.md</a>).</p>`,
    `<ul>${items.join('')}</ul>`,
    '</section>',
  ].join('\n')
}

/** The whole page. */
export function renderPaywallPage(view: PaywallView): string {
  const { operation } = view
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Payment required: ${escapeHtml(operation.summary)}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${PAYWALL_ASSET_PREFIX}paywall.css">
<script type="module" src="${PAYWALL_ASSET_PREFIX}paywall.js"></script>
</head>
<body>
<main id="paywall" data-method="${escapeHtml(operation.method)}"${view.amountHeader === undefined ? '' : ` data-amount-header="${escapeHtml(view.amountHeader)}"`}>
<h1>Payment required</h1>
<p class="paywall-summary">${escapeHtml(operation.summary)}</p>
<p><code>${escapeHtml(operation.method)} ${escapeHtml(operation.path)}</code> (<code>${escapeHtml(operation.operationId)}</code>)</p>
<section aria-labelledby="paywall-price-heading">
<h2 id="paywall-price-heading">Price</h2>
<dl>
<dt>Price</dt><dd id="paywall-price">${escapeHtml(priceText(view))}</dd>
<dt>Network</dt><dd><code>${escapeHtml(view.network)}</code></dd>
<dt>Asset</dt><dd>${escapeHtml(view.assetName)} <code>${escapeHtml(view.asset)}</code></dd>
<dt>Pay to</dt><dd><code>${escapeHtml(view.payTo)}</code></dd>
</dl>
<p>Service: <a href="${escapeHtml(view.service.url)}">${escapeHtml(view.service.title)}</a></p>
<details>
<summary>About this operation</summary>
<p>${escapeHtml(operation.description)}</p>
</details>
</section>
${walletForm(view)}
<section aria-labelledby="paywall-agent-heading">
<h2 id="paywall-agent-heading">Pay from an agent</h2>
<p>Any x402 client pays the 402 by itself, for example <code>@x402/fetch</code>:</p>
<pre tabindex="0"><code>${escapeHtml(agentSnippet(view))}</code></pre>
<p>The challenge by hand:</p>
<pre tabindex="0"><code>${escapeHtml(curlSnippet(view))}</code></pre>
<p>MCP clients call <code>${escapeHtml(operation.operationId)}</code> as a tool at <code>${escapeHtml(view.gatewayUrl)}/mcp</code> (Streamable HTTP) and pay in <code>_meta["x402/payment"]</code>. Everything an agent needs: <a href="${escapeHtml(view.gatewayUrl)}/llms.txt">llms.txt</a>.</p>
</section>
${plansSection(view)}
</main>
</body>
</html>
`
}

/** A starting body from a JSON schema: its required properties, each with a plain value of its type. */
export function exampleOf(schema: unknown, depth = 0): unknown {
  if (schema === null || typeof schema !== 'object' || depth > 4) return null
  const s = schema as Record<string, unknown>
  if (Array.isArray(s.examples) && s.examples.length > 0) return s.examples[0]
  if (s.default !== undefined) return s.default
  if (s.const !== undefined) return s.const
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0]
  if (Array.isArray(s.anyOf) && s.anyOf.length > 0) return exampleOf(s.anyOf[0], depth + 1)
  switch (s.type) {
    case 'object': {
      const properties = (s.properties ?? {}) as Record<string, unknown>
      const required = Array.isArray(s.required) ? (s.required as string[]) : []
      return Object.fromEntries(required.map((name) => [name, exampleOf(properties[name], depth + 1)]))
    }
    case 'string':
      return typeof s.minLength === 'number' && s.minLength > 1 ? 'x'.repeat(s.minLength) : 'text'
    case 'integer':
    case 'number':
      return typeof s.minimum === 'number' ? s.minimum : 1
    case 'boolean':
      return false
    case 'array':
      return []
    default:
      return null
  }
}
