// The dev chain of a running gateway on the embedded default, through its dev-only routes: the
// faucet that mints test USDC and the balance of an address on the local chain.

/** Mints `amountMicros` test USDC to `address`; its new balance. Throws unless the faucet answers 200. */
export async function faucet(gatewayUrl: string, address: string, amountMicros: bigint): Promise<bigint> {
  const response = await fetch(`${gatewayUrl}/dev/faucet`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ address, amountMicros: amountMicros.toString() }),
  })
  if (response.status !== 200) throw new Error(`faucet answered ${response.status}: ${await response.text()}`)
  return BigInt(((await response.json()) as { balanceMicros: string }).balanceMicros)
}

/** The USDC balance of `address` on the dev chain, in micros. */
export async function balanceOf(gatewayUrl: string, address: string): Promise<bigint> {
  const response = await fetch(`${gatewayUrl}/dev/balances/${address}`)
  if (response.status !== 200) throw new Error(`balance answered ${response.status}: ${await response.text()}`)
  return BigInt(((await response.json()) as { balanceMicros: string }).balanceMicros)
}
