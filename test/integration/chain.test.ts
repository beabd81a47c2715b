// The chain port against a REAL local EVM: anvil (chain id 8453) with TestUSDC at the canonical
// Base USDC address, payments signed by the real x402 client SDK (@x402/evm ExactEvmScheme).
import { spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { authorizationTypes } from '@x402/evm'
import type { ExactEIP3009Payload } from '@x402/evm'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { ExactEvmSchemeV1 } from '@x402/evm/exact/v1/client'
import type { PaymentRequirements } from '@x402/core/types'
import t from 'tap'
import type { Test } from 'tap'
import { createPublicClient, domainSeparator, encodeAbiParameters, http, keccak256 } from 'viem'
import type { Abi, Address, Hex, LocalAccount } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import artifact from '../../src/payments/chain/contracts/TestUSDC.json' with { type: 'json' }
import { BASE_USDC, createRpcChain, startDevChain } from '../../src/payments/chain/index.ts'
import type { ChainPort, SettlementResult, TransferAuthorization } from '../../src/payments/chain/index.ts'

const CONTRACTS_DIR = fileURLToPath(new URL('../../src/payments/chain/contracts/', import.meta.url))
const DEV_MODULE = pathToFileURL(fileURLToPath(new URL('../../src/payments/chain/dev.ts', import.meta.url))).href
const ANVIL_ACCOUNT_1_KEY: Hex = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'
const PRICE = 10_000n // $0.01 in micros

// ---------- helpers (kept in this file on purpose) ----------

const newAccount = (): LocalAccount => privateKeyToAccount(generatePrivateKey())

async function rpc<T = unknown>(url: string, method: string, params: unknown[] = []): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { result?: T; error?: { message: string } }
  if (body.error) throw new Error(`${method}: ${body.error.message}`)
  return body.result as T
}

/** Service-wallet nonce + head block: unchanged = nothing was broadcast or mined. */
async function chainMark(url: string, wallet: Address): Promise<string> {
  const [nonce, block] = await Promise.all([rpc<Hex>(url, 'eth_getTransactionCount', [wallet, 'pending']), rpc<Hex>(url, 'eth_blockNumber')])
  return `nonce ${BigInt(nonce)} block ${BigInt(block)}`
}

function requirementsV2(asset: Address, payTo: Address, amount: bigint, maxTimeoutSeconds = 300): PaymentRequirements {
  return {
    scheme: 'exact',
    network: 'eip155:8453',
    amount: amount.toString(),
    asset,
    payTo,
    maxTimeoutSeconds,
    extra: { name: 'USD Coin', version: '2' },
  }
}

function toAuthorization(payload: ExactEIP3009Payload): { auth: TransferAuthorization; signature: Hex } {
  const a = payload.authorization
  if (!payload.signature) throw new Error('x402 payload has no signature')
  return {
    auth: {
      from: a.from,
      to: a.to,
      value: BigInt(a.value),
      validAfter: BigInt(a.validAfter),
      validBefore: BigInt(a.validBefore),
      nonce: a.nonce,
    },
    signature: payload.signature,
  }
}

/** What a real x402 v2 client (`@x402/evm` ExactEvmScheme) puts in PAYMENT-SIGNATURE. */
async function payX402(buyer: LocalAccount, asset: Address, payTo: Address, amount = PRICE) {
  const result = await new ExactEvmScheme(buyer).createPaymentPayload(2, requirementsV2(asset, payTo, amount))
  return toAuthorization(result.payload as ExactEIP3009Payload)
}

/** Hand-signed EIP-712 TransferWithAuthorization (for validity windows x402 clients never produce). */
async function signAuthorization(
  signer: LocalAccount,
  asset: Address,
  auth: Omit<TransferAuthorization, 'nonce'> & { nonce?: Hex },
): Promise<{ auth: TransferAuthorization; signature: Hex }> {
  const full: TransferAuthorization = { ...auth, nonce: auth.nonce ?? generatePrivateKey() }
  const signature = await signer.signTypedData({
    domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: asset },
    types: authorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message: full,
  })
  return { auth: full, signature }
}

const nowSeconds = (): bigint => BigInt(Math.floor(Date.now() / 1000))

function assertFailedBeforeBroadcast(tt: Test, result: SettlementResult, reason: RegExp): void {
  tt.equal(result.status, 'failed')
  if (result.status !== 'failed') return
  tt.match(result.reason, reason)
  tt.equal(result.txHash, undefined, 'nothing broadcast')
}

function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch {
    return true
  }
  // Reparented to a PID 1 that does not reap: a zombie is dead too.
  try {
    return /^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return true
  }
}

async function waitGone(pid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (processGone(pid)) return true
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return processGone(pid)
}

async function balances(chain: ChainPort, ...who: Address[]): Promise<bigint[]> {
  return Promise.all(who.map((a) => chain.balanceOf(a)))
}

// ---------- the shared dev chain ----------

const bootStarted = performance.now()
const chain = await startDevChain()
t.comment(`anvil dev chain up in ${Math.round(performance.now() - bootStarted)} ms (pid ${chain.pid})`)
t.teardown(() => chain.close())
const url = chain.rpcUrl

t.test('TestUSDC: artifact in sync with its source, USDC metadata and call-time EIP-712 domain', async (t) => {
  const source = readFileSync(path.join(CONTRACTS_DIR, 'TestUSDC.sol'))
  t.equal(artifact.sourceSha256, createHash('sha256').update(source).digest('hex'), 'TestUSDC.json is stale: run `npm run build:contracts`')
  t.equal(chain.usdc, BASE_USDC)
  t.equal(chain.chainId, 8453)
  const client = createPublicClient({ transport: http(url) })
  const abi = artifact.abi as Abi
  const read = (functionName: string) => client.readContract({ address: BASE_USDC, abi, functionName })
  t.same(await Promise.all([read('name'), read('symbol'), read('version'), read('decimals'), read('totalSupply')]), ['USD Coin', 'USDC', '2', 6, 0n])
  t.equal(await read('DOMAIN_SEPARATOR'), domainSeparator({ domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: BASE_USDC } }))
})

t.test('settles a real x402 v2 payment: exact amounts move, buyer needs no ETH, wallet no USDC', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, 1_000_000n)
  t.equal(BigInt(await rpc<Hex>(url, 'eth_getBalance', [buyer.address, 'latest'])), 0n, 'buyer has no ETH')
  t.equal(await chain.balanceOf(chain.serviceAddress), 0n, 'service wallet holds no USDC')

  const { auth, signature } = await payX402(buyer, chain.usdc, payTo)
  t.equal(auth.validAfter, 0n, 'x402 v2 client signs validAfter 0')
  t.equal(await chain.isAuthorizationUsed(buyer.address, auth.nonce), false)

  const started = performance.now()
  const result = await chain.settleAuthorization(auth, signature)
  t.comment(`settle latency (simulate + broadcast + receipt): ${Math.round(performance.now() - started)} ms`)
  t.equal(result.status, 'confirmed')
  if (result.status !== 'confirmed') return
  t.match(result.txHash, /^0x[0-9a-f]{64}$/)
  t.ok(result.blockNumber > 0n)
  t.same(await balances(chain, buyer.address, payTo, chain.serviceAddress), [1_000_000n - PRICE, PRICE, 0n])
  t.equal(await chain.isAuthorizationUsed(buyer.address, auth.nonce), true)
  t.equal(await chain.settlementStatus(result.txHash), 'confirmed')

  t.test('a replay of the same authorization fails, moves nothing and broadcasts nothing', async (t) => {
    const before = await chainMark(url, chain.serviceAddress)
    const replay = await chain.settleAuthorization(auth, signature)
    assertFailedBeforeBroadcast(t, replay, /authorization is used/)
    t.equal(await chainMark(url, chain.serviceAddress), before)
    t.same(await balances(chain, buyer.address, payTo), [1_000_000n - PRICE, PRICE])
  })
})

t.test('settles an x402 v1 payment (validAfter in the past)', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE)
  const v1 = await new ExactEvmSchemeV1(buyer).createPaymentPayload(1, {
    ...requirementsV2(chain.usdc, payTo, PRICE),
    network: 'base',
    maxAmountRequired: PRICE.toString(),
  } as unknown as PaymentRequirements)
  const { auth, signature } = toAuthorization(v1.payload as ExactEIP3009Payload)
  t.ok(auth.validAfter > 0n)
  t.equal((await chain.settleAuthorization(auth, signature)).status, 'confirmed')
  t.same(await balances(chain, buyer.address, payTo), [0n, PRICE])
})

t.test('invalid authorizations fail in simulation with nothing broadcast', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, 100_000n)
  const base = { from: buyer.address, to: payTo, value: PRICE, validAfter: 0n, validBefore: nowSeconds() + 300n }
  const before = await chainMark(url, chain.serviceAddress)

  const expired = await signAuthorization(buyer, chain.usdc, { ...base, validBefore: nowSeconds() - 5n })
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(expired.auth, expired.signature), /authorization is expired/)

  const early = await signAuthorization(buyer, chain.usdc, { ...base, validAfter: nowSeconds() + 3600n })
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(early.auth, early.signature), /not yet valid/)

  const forged = await signAuthorization(newAccount(), chain.usdc, base) // from = buyer, signed by someone else
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(forged.auth, forged.signature), /invalid signature/)

  const tampered = await signAuthorization(buyer, chain.usdc, base)
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization({ ...tampered.auth, value: 100_000n }, tampered.signature), /invalid signature/)

  // The same signature in its malleable twin form (s' = n - s, v flipped) is refused.
  const good = await signAuthorization(buyer, chain.usdc, base)
  const n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
  const s = BigInt(`0x${good.signature.slice(66, 130)}`)
  const v = Number.parseInt(good.signature.slice(130), 16)
  const twin = `${good.signature.slice(0, 66)}${(n - s).toString(16).padStart(64, '0')}${(v === 27 ? 28 : 27).toString(16)}` as Hex
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(good.auth, twin), /'s' value/)

  const poor = newAccount()
  const broke = await signAuthorization(poor, chain.usdc, { ...base, from: poor.address })
  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(broke.auth, broke.signature), /exceeds balance/)

  assertFailedBeforeBroadcast(t, await chain.settleAuthorization(good.auth, '0x1234'), /signature length/)

  t.equal(await chainMark(url, chain.serviceAddress), before, 'no tx sent, no block mined')
  t.same(await balances(chain, buyer.address, payTo), [100_000n, 0n])
  t.equal(await chain.isAuthorizationUsed(buyer.address, good.auth.nonce), false)

  // ...and the untampered authorization still settles afterwards.
  t.equal((await chain.settleAuthorization(good.auth, good.signature)).status, 'confirmed')
})

t.test('TestUSDC accepts the bytes-signature overload of transferWithAuthorization', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE)
  const { auth, signature } = await payX402(buyer, chain.usdc, payTo)
  const client = createPublicClient({ transport: http(url) })
  const args = [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, signature] as const
  const abi = artifact.abi as Abi
  await client.simulateContract({ account: chain.serviceAddress, address: chain.usdc, abi, functionName: 'transferWithAuthorization', args })
  const forged = await signAuthorization(newAccount(), chain.usdc, auth)
  await t.rejects(
    client.simulateContract({
      account: chain.serviceAddress,
      address: chain.usdc,
      abi,
      functionName: 'transferWithAuthorization',
      args: [...args.slice(0, 6), forged.signature] as unknown as typeof args,
    }),
    /invalid signature/,
  )
})

t.test('transfer (refunds) from the service wallet', async (t) => {
  const customer = newAccount().address
  await chain.mint(chain.serviceAddress, 50_000n)
  const result = await chain.transfer(customer, 20_000n)
  t.equal(result.status, 'confirmed')
  t.same(await balances(chain, chain.serviceAddress, customer), [30_000n, 20_000n])

  const before = await chainMark(url, chain.serviceAddress)
  assertFailedBeforeBroadcast(t, await chain.transfer(customer, 1_000_000n), /exceeds balance/)
  assertFailedBeforeBroadcast(t, await chain.transfer(customer, 0n), /positive/)
  t.equal(await chainMark(url, chain.serviceAddress), before)
  t.same(await balances(chain, chain.serviceAddress, customer), [30_000n, 20_000n])
  await chain.transfer(newAccount().address, 30_000n) // leave the service wallet empty again
})

t.test('receipt not seen in time → pending (never re-broadcast), confirmed once mined', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE)
  const { auth, signature } = await payX402(buyer, chain.usdc, payTo)

  await rpc(url, 'evm_setAutomine', [false])
  t.teardown(() => rpc(url, 'evm_setAutomine', [true]))
  const started = performance.now()
  const result = await chain.settleAuthorization(auth, signature, { timeoutMs: 200 })
  const waited = performance.now() - started
  t.equal(result.status, 'pending')
  if (result.status !== 'pending') return
  t.ok(waited >= 190 && waited < 2_000, `gave up after the timeout (${Math.round(waited)} ms)`)
  t.equal(await chain.settlementStatus(result.txHash), 'pending')
  t.equal(await chain.isAuthorizationUsed(buyer.address, auth.nonce), false)
  t.same(await balances(chain, buyer.address, payTo), [PRICE, 0n])
  const pool = await rpc<{ pending: Hex }>(url, 'txpool_status')
  t.equal(BigInt(pool.pending), 1n, 'exactly one tx broadcast')
  t.equal((await chain.settleAuthorization(auth, signature, { timeoutMs: 200 })).status, 'failed', 'a retry is refused (pending state)')
  t.equal(BigInt((await rpc<{ pending: Hex }>(url, 'txpool_status')).pending), 1n, 'and not broadcast')

  await rpc(url, 'evm_mine')
  t.equal(await chain.settlementStatus(result.txHash), 'confirmed')
  t.equal(await chain.isAuthorizationUsed(buyer.address, auth.nonce), true)
  t.same(await balances(chain, buyer.address, payTo), [0n, PRICE])
})

async function waitForPool(pending: bigint): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (BigInt((await rpc<{ pending: Hex }>(url, 'txpool_status')).pending) >= pending) return
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  throw new Error(`txpool never reached ${pending} pending txs`)
}

t.test('concurrent settlements from one wallet are broadcast with consecutive nonces', async (t) => {
  const payTo = newAccount().address
  const buyers = [newAccount(), newAccount(), newAccount()]
  for (const b of buyers) await chain.mint(b.address, PRICE)
  const payments = await Promise.all(buyers.map((b) => payX402(b, chain.usdc, payTo)))

  await rpc(url, 'evm_setAutomine', [false])
  t.teardown(() => rpc(url, 'evm_setAutomine', [true]))
  const settling = Promise.all(payments.map((p) => chain.settleAuthorization(p.auth, p.signature, { timeoutMs: 10_000 })))
  await waitForPool(3n)
  await rpc(url, 'evm_mine')
  const results = await settling
  t.same(
    results.map((r) => r.status),
    ['confirmed', 'confirmed', 'confirmed'],
  )
  t.equal(new Set(results.map((r) => (r.status === 'confirmed' ? r.blockNumber : -1n))).size, 1, 'one block')
  t.same(await balances(chain, payTo, ...buyers.map((b) => b.address)), [3n * PRICE, 0n, 0n, 0n])
})

t.test('the same authorization settled twice at once moves money exactly once', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE * 2n)
  const { auth, signature } = await payX402(buyer, chain.usdc, payTo)
  const results = await Promise.all([chain.settleAuthorization(auth, signature), chain.settleAuthorization(auth, signature)])
  t.same(results.map((r) => r.status).sort(), ['confirmed', 'failed'])
  t.same(await balances(chain, buyer.address, payTo), [PRICE, PRICE])
})

t.test('a settlement that reverts on-chain → failed with its txHash', async (t) => {
  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE)
  const { auth, signature } = await payX402(buyer, chain.usdc, payTo)

  await rpc(url, 'evm_setAutomine', [false])
  t.teardown(() => rpc(url, 'evm_setAutomine', [true]))
  const settling = chain.settleAuthorization(auth, signature, { timeoutMs: 10_000 })
  await waitForPool(1n)
  // Passed simulation and is in the mempool; now empty the buyer (balanceOf is mapping slot 1).
  const slot = keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [buyer.address, 1n]))
  await rpc(url, 'anvil_setStorageAt', [chain.usdc, slot, `0x${'0'.repeat(64)}`])
  await rpc(url, 'evm_mine')
  const result = await settling
  t.equal(result.status, 'failed')
  if (result.status !== 'failed' || !result.txHash) return t.fail('a reverted settlement carries its tx hash')
  t.equal(result.reason, 'transaction reverted')
  t.equal(await chain.settlementStatus(result.txHash), 'failed')
  t.equal(await chain.isAuthorizationUsed(buyer.address, auth.nonce), false)
  t.equal(await chain.balanceOf(payTo), 0n)
})

t.test('rpc adapter: same implementation, any wallet; wrong chain fails and a dead RPC throws, both before any broadcast', async (t) => {
  const wallet = privateKeyToAccount(ANVIL_ACCOUNT_1_KEY)
  const port = createRpcChain({ rpcUrl: url, privateKey: ANVIL_ACCOUNT_1_KEY, pollingIntervalMs: 20 })
  t.teardown(() => port.close())
  t.equal(port.kind, 'rpc')
  t.equal(port.serviceAddress, wallet.address)
  t.equal(port.usdc, BASE_USDC)

  const buyer = newAccount()
  const payTo = newAccount().address
  await chain.mint(buyer.address, PRICE)
  const { auth, signature } = await payX402(buyer, port.usdc, payTo)

  const wrongChain = createRpcChain({ rpcUrl: url, privateKey: ANVIL_ACCOUNT_1_KEY, chainId: 1 })
  assertFailedBeforeBroadcast(t, await wrongChain.settleAuthorization(auth, signature), /chain 8453, expected 1/)
  await wrongChain.close()

  const dead = createRpcChain({ rpcUrl: 'http://127.0.0.1:9', privateKey: ANVIL_ACCOUNT_1_KEY, requestTimeoutMs: 1_000 })
  // An unanswered node is no verdict: the call throws (the guard leaves it pending), nothing sent.
  await t.rejects(dead.settleAuthorization(auth, signature), /HTTP request failed/)
  await dead.close()

  t.equal((await port.settleAuthorization(auth, signature)).status, 'confirmed')
  t.same(await balances(port, buyer.address, payTo), [0n, PRICE])
  await port.close()
  await t.rejects(port.balanceOf(payTo), /closed/)
})

t.test('a state past 10 MB of dump (a long-lived chain) is still saved and loaded again', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'ag-chain-big-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const first = await startDevChain({ dataDir })
  // 7.5 MB of incompressible code, as 320 contracts of 24 KiB (the EIP-170 limit) set 16 per
  // request: the dump, gzipped and in hex, is over viem's 10 MB response limit.
  const pieces = Array.from({ length: 320 }, () => ({ where: newAccount().address, code: `0x${randomBytes(24 * 1024).toString('hex')}` as Hex }))
  const call = (url: string, method: string, params: unknown[]) =>
    fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) }).then(
      async (res) => ((await res.json()) as { result: unknown }).result,
    )
  for (let i = 0; i < pieces.length; i += 16) {
    const batch = pieces.slice(i, i + 16).map(({ where, code }, n) => ({ jsonrpc: '2.0', id: i + n, method: 'anvil_setCode', params: [where, code] }))
    await fetch(first.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(batch) }).then((res) => res.text())
  }
  const last = pieces.at(-1) as { where: Address; code: Hex }
  t.equal(((await call(first.rpcUrl, 'eth_getCode', [last.where, 'latest'])) as string).length, last.code.length, 'the code is set')
  await first.close()
  const second = await startDevChain({ dataDir })
  t.teardown(() => second.close())
  const loaded = (await call(second.rpcUrl, 'eth_getCode', [last.where, 'latest'])) as string
  t.equal(loaded.length, last.code.length, 'the restarted chain holds what the big state held')
})

t.test('state survives close + restart with the same dataDir', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'ag-chain-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const holder = newAccount()
  const payTo = newAccount().address

  let started = performance.now()
  const first = await startDevChain({ dataDir })
  t.comment(`persistent dev chain up in ${Math.round(performance.now() - started)} ms`)
  await first.mint(holder.address, 777_000n)
  const { auth, signature } = await payX402(holder, first.usdc, payTo)
  t.equal((await first.settleAuthorization(auth, signature)).status, 'confirmed')
  await first.close()
  t.ok(processGone(first.pid), 'anvil exited on close()')
  t.ok(first.stateFile && existsSync(first.stateFile), 'state dumped on exit')

  started = performance.now()
  const second = await startDevChain({ dataDir })
  t.comment(`restart with state in ${Math.round(performance.now() - started)} ms`)
  t.teardown(() => second.close())
  t.same(await balances(second, holder.address, payTo), [777_000n - PRICE, PRICE])
  t.equal(await second.isAuthorizationUsed(holder.address, auth.nonce), true)
  assertFailedBeforeBroadcast(t, await second.settleAuthorization(auth, signature), /authorization is used/)
  const next = await payX402(holder, second.usdc, payTo)
  t.equal((await second.settleAuthorization(next.auth, next.signature)).status, 'confirmed')
  t.same(await balances(second, holder.address, payTo), [777_000n - 2n * PRICE, 2n * PRICE])
})

t.test('a kill of anvil itself (the whole machine dying) keeps every block the service was told is final', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'ag-chain-kill-'))
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  const holder = newAccount()
  const payTo = newAccount().address
  const first = await startDevChain({ dataDir })
  // The faucet answers once its mint is saved; a final settlement is saved by definition.
  await first.mint(holder.address, 500_000n)
  const { auth, signature } = await payX402(holder, first.usdc, payTo)
  const settled = await first.settleAuthorization(auth, signature)
  if (settled.status !== 'confirmed') throw new Error(`settlement ${settled.status}`)
  const seen = await first.inclusion(settled.txHash, { from: holder.address, to: payTo, value: PRICE })
  t.match(seen, { status: 'included', matched: true, final: true }, 'final once saved')
  // No SIGTERM, no save on exit: what a power loss or an OOM kill of the process group does.
  process.kill(first.pid, 'SIGKILL')
  await first.close()
  const second = await startDevChain({ dataDir })
  t.teardown(() => second.close())
  t.same(await balances(second, holder.address, payTo), [500_000n - PRICE, PRICE], 'the mint and the final settlement survived')
  t.match(await second.inclusion(settled.txHash), { status: 'included', final: true }, 'the receipt is still there')
  t.equal(await second.authorizationFate(holder.address, auth.nonce, auth.validBefore), 'final')
  const other = await payX402(holder, second.usdc, payTo)
  t.equal(await second.authorizationFate(holder.address, other.auth.nonce, other.auth.validBefore), 'open', 'a fresh authorization is open')
  t.equal(await second.authorizationFate(holder.address, other.auth.nonce, nowSeconds() - 1n), 'dead', 'an expired one is dead once the idle chain mines up to now')
})

t.test('no orphan anvil when the parent process dies', async (t) => {
  const script = (onReady: string): string =>
    `const { startDevChain } = await import(${JSON.stringify(DEV_MODULE)});` + `const c = await startDevChain(); console.log('PID=' + c.pid); ${onReady}`

  async function runParent(onReady: string, kill: boolean): Promise<number> {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script(onReady)], { stdio: ['ignore', 'pipe', 'inherit'] })
    const pid = await new Promise<number>((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString()
        const m = /PID=(\d+)/.exec(out)
        if (m) resolve(Number(m[1]))
      })
      child.once('exit', (code) => reject(new Error(`parent exited (${code}) before anvil was up: ${out}`)))
    })
    if (kill) child.kill('SIGKILL')
    return pid
  }

  const hard = await runParent('setInterval(() => {}, 1000)', true)
  t.ok(await waitGone(hard, 3_000), `anvil ${hard} stopped after its parent was SIGKILLed`)
  const soft = await runParent('process.exit(0)', false) // exits without close()
  t.ok(await waitGone(soft, 3_000), `anvil ${soft} stopped after its parent exited without close()`)
  const idle = await runParent('/* nothing keeps the loop alive */', false)
  t.ok(await waitGone(idle, 3_000), `anvil ${idle} did not keep an idle parent alive`)
})
