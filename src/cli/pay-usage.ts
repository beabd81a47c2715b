// The help of `agent-gateway pay` (src/cli/pay.ts): a module of its own, so `--help` answers
// without loading the x402 client and viem.

/** What `pay` spends at most unless --max-usd says otherwise: the faucet's test USDC, never real money. */
export const DEFAULT_MAX_USD = 10

export const PAY_USAGE = `agent-gateway pay: pay one request with x402 from a throwaway wallet the dev faucet funds

Usage:
  agent-gateway pay URL [-X METHOD] [-d JSON] [-H 'Name: value']... [--gateway URL] [--max-usd N]

Sends the request. If it answers 402, a new wallet gets exactly the price the challenge asks from
the embedded default's faucet (POST /dev/faucet on the gateway), and the x402 client (@x402/fetch,
scheme exact) signs the payment and sends the request again. Prints what the 402 asked, the wallet
and its funding, the answer (status and body) and the payment receipt (PAYMENT-RESPONSE, with the
settlement transaction). Exit 0 when the answer is 2xx, 1 otherwise, 2 for bad arguments. Needs the
local dev chain (a server started without CHAIN_RPC_URL): a real chain has no faucet.

Options:
  -X, --method METHOD   HTTP method (default GET, or POST with --data)
  -d, --data JSON       JSON request body, sent as application/json
  -H, --header 'N: v'   a request header (repeatable), e.g. "Svc-Agent-Authorization: Bearer $TOKEN"
  --gateway URL         the gateway whose /dev/faucet funds the wallet (default: URL's own server
                        when it has one, else PUBLIC_BASE_URL, i.e. http://HOST:GATEWAY_PORT)
  --max-usd N           pay at most N USD (default ${DEFAULT_MAX_USD}); a dearer 402 is refused before any funding
  -h, --help            this text

Example (GW as the README sets it):
  agent-gateway pay "$GW/plans/scheduler-credit-5/purchase" -X POST -H "Svc-Agent-Authorization: Bearer $TOKEN"
`
