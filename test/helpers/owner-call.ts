// An owner call as a wallet makes it: the request, and on a 401 its SIGN-IN-WITH-X challenge
// answered once with a proof for this method and URL (the real @x402/extensions client).
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import type { PrivateKeyAccount } from 'viem/accounts'

export async function ownerCall(account: PrivateKeyAccount, url: string, init: RequestInit = {}): Promise<Response> {
  const first = await fetch(url, init)
  if (first.status !== 401) return first
  const body = (await first.json().catch(() => ({}))) as { extensions?: Record<string, any> }
  const challenge = body.extensions?.['sign-in-with-x']
  if (!challenge) throw new Error(`401 without a SIWX challenge at ${url}`)
  const chain = challenge.supportedChains[0]
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, account, url)
  const headers = new Headers(init.headers)
  headers.set('sign-in-with-x', encodeSIWxHeader(payload))
  return fetch(url, { ...init, headers })
}
