// RPC adapter of the chain port: any EVM JSON-RPC endpoint + the service hot wallet.
// Production adapter (Base mainnet); the dev adapter runs this same code against anvil, so there
// is ONE implementation of settle / transfer / status.
//
// Writes are: simulate (eth_call; a revert → failed, nothing broadcast) → prepare + sign locally
// (the tx hash is known before anything leaves the process) → eth_sendRawTransaction → wait for
// the receipt. If the RPC does not answer the broadcast, the tx may or may not be out: that is
// `pending` with the locally computed hash, never `failed` and never a re-broadcast.
// Broadcasts are serialized per adapter. Replicas that share the wallet key also pass a
// `walletLock` (held across processes around nonce → sign → send); without one, the nonce is
// tracked locally (one adapter per wallet).
import {
  BaseError,
  ContractFunctionRevertedError,
  HttpRequestError,
  TimeoutError,
  TransactionNotFoundError,
  TransactionReceiptNotFoundError,
  WaitForTransactionReceiptTimeoutError,
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  getAddress,
  http,
  isAddressEqual,
  keccak256,
  parseEventLogs,
  parseSignature,
  size,
} from 'viem'
import type { Address, Chain, Hex, TransactionReceipt, WalletClient } from 'viem'
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { addressOfPrivateKey } from '../x402/recover.ts'
import type { AuthorizationFate, ChainLogger, ChainPort, ExpectedTransfer, Inclusion, SettlementResult, SignedTransaction, TransferAuthorization } from './types.ts'
import { waitForReceipt } from './receipt.ts'
import { BASE_CHAIN_ID, BASE_USDC, usdcAbi } from './usdc-abi.ts'

export interface RpcChainOptions {
  rpcUrl: string
  /** Service wallet key: submits settlements (pays gas in ETH) and pays refunds (in USDC). */
  privateKey: Hex
  /** Default 8453 (Base mainnet). */
  chainId?: number
  /** Default: canonical Base USDC. */
  usdc?: Address
  /** Default receipt wait of settleAuthorization/transfer; default 30 000 ms. */
  confirmationTimeoutMs?: number
  /** Per JSON-RPC request; default 10 000 ms. */
  requestTimeoutMs?: number
  /** Receipt polling; default 250 ms (Base makes a block every 2 s). */
  pollingIntervalMs?: number
  /** Blocks a transaction needs (its own included) before it is final; default 1. */
  confirmations?: number
  /**
   * The newest block that is final, given the head; `needed` is the block the caller asks about
   * (an answer below it says "not final"). Default: head − (confirmations − 1). The dev chain
   * narrows it to what is saved on disk, saving only when `needed` is not saved yet.
   */
  finalBlock?: (head: bigint, needed: bigint) => Promise<bigint>
  logger?: ChainLogger
  /**
   * Held around "choose a nonce → sign → onSigned → broadcast" (and a resend) by every process
   * that signs with this wallet, so replicas never pick the same nonce. With it, the nonce is read
   * from the node each time (another holder may have used the next one). Default: none (this
   * process is the wallet's only writer).
   */
  walletLock?: WalletLock
}

/** Runs fn while no other process that signs with the same wallet runs its own. */
export type WalletLock = <T>(fn: () => Promise<T>) => Promise<T>

export interface RpcChain extends ChainPort {
  kind: 'rpc'
}

const DEFAULT_CONFIRMATION_TIMEOUT_MS = 30_000
/**
 * How long a broadcast keeps retrying nonce conflicts: with a walletLock only a writer outside it
 * (another tool on the same key) causes them, without one every replica does; either settles within
 * a few blocks.
 */
const NONCE_RETRY_MS = 10_000
const NONCE_ERROR = /nonce too low|nonce has already been used|replacement transaction underpriced|nonce too high/i
/** How far back findAuthorizationTx looks (about 5.5 hours of Base blocks). */
const AUTHORIZATION_LOOKBACK_BLOCKS = 10_000n

type Broadcast =
  | { outcome: 'sent'; hash: Hex }
  | { outcome: 'rejected'; reason: string }
  /** The RPC did not answer: the signed tx may be out. */
  | { outcome: 'unknown'; hash: Hex; reason: string }

export function createRpcChain(options: RpcChainOptions): RpcChain {
  const chainId = options.chainId ?? BASE_CHAIN_ID
  const usdc = getAddress(options.usdc ?? BASE_USDC)
  const defaultTimeoutMs = options.confirmationTimeoutMs ?? DEFAULT_CONFIRMATION_TIMEOUT_MS
  const pollingInterval = options.pollingIntervalMs ?? 250
  const log = options.logger
  const confirmations = Math.max(1, Math.floor(options.confirmations ?? 1))
  const finalBlock = options.finalBlock ?? (async (head: bigint) => head - BigInt(confirmations - 1))
  // The address at once, natively; viem's signer (its curve tables, ~50-90 ms) by the first write.
  const serviceAddress = addressOfPrivateKey(options.privateKey)
  let signer: PrivateKeyAccount | undefined
  const account = (): PrivateKeyAccount => (signer ??= privateKeyToAccount(options.privateKey))
  const chain: Chain = defineChain({
    id: chainId,
    name: `eip155:${chainId}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [options.rpcUrl] } },
  })
  const transport = http(options.rpcUrl, {
    timeout: options.requestTimeoutMs ?? 10_000,
    retryCount: 2,
    retryDelay: 100,
  })
  const publicClient = createPublicClient({ chain, transport, pollingInterval })
  let wallet: WalletClient | undefined
  const walletClient = (): WalletClient => (wallet ??= createWalletClient({ account: account(), chain, transport, pollingInterval }))

  let closed = false
  let chainChecked = false
  /** Next nonce of the service wallet; undefined = ask the node (`pending`). */
  let nextNonce: number | undefined
  let writeQueue: Promise<unknown> = Promise.resolve()
  const walletLock: WalletLock = options.walletLock ?? ((fn) => fn())

  function assertOpen(): void {
    if (closed) throw new Error('chain port is closed')
  }

  /** Runs fn after every earlier broadcast finished (one nonce at a time). */
  function exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = writeQueue.then(fn, fn)
    writeQueue = run.catch(() => undefined)
    return run
  }

  async function ensureChain(): Promise<void> {
    if (chainChecked) return
    const remote = await publicClient.getChainId()
    if (remote !== chainId) throw new Error(`RPC is on chain ${remote}, expected ${chainId}`)
    chainChecked = true
  }

  /** The nonce to sign with: the node's `pending` count, unless this process is the only writer and knows better. */
  async function chooseNonce(): Promise<number> {
    if (nextNonce !== undefined && options.walletLock === undefined) return nextNonce
    const pending = await publicClient.getTransactionCount({ address: serviceAddress, blockTag: 'pending' })
    // A node may not count a transaction it accepted a moment ago: our own last one is a floor.
    return nextNonce !== undefined && nextNonce > pending ? nextNonce : pending
  }

  /** One attempt, under the wallet lock: nonce → sign → onSigned → send. `retry`: a nonce conflict. */
  async function attempt(data: Hex, onSigned?: (tx: SignedTransaction) => Promise<void>): Promise<Broadcast | { outcome: 'retry'; nonce: number; reason: string }> {
    let nonce: number
    let hash: Hex
    let serializedTransaction: Hex
    try {
      await ensureChain()
      nonce = await chooseNonce()
      // Fills gas (eth_estimateGas) and EIP-1559 fees; signing is local.
      const request = await walletClient().prepareTransactionRequest({ account: account(), chain, to: usdc, data, nonce, type: 'eip1559' })
      serializedTransaction = await account().signTransaction({
        type: 'eip1559',
        chainId,
        to: usdc,
        data,
        nonce,
        gas: request.gas,
        maxFeePerGas: request.maxFeePerGas,
        maxPriorityFeePerGas: request.maxPriorityFeePerGas,
      })
      hash = keccak256(serializedTransaction)
    } catch (err) {
      // Nothing has left the process.
      return { outcome: 'rejected', reason: errorReason(err) }
    }
    if (onSigned) {
      try {
        await onSigned({ hash, nonce, raw: serializedTransaction })
      } catch (err) {
        // Not recorded, so not sent: the nonce stays free for the next transaction.
        return { outcome: 'rejected', reason: `could not record the signed transaction: ${errorReason(err)}` }
      }
    }
    try {
      await publicClient.sendRawTransaction({ serializedTransaction })
      nextNonce = nonce + 1
      return { outcome: 'sent', hash }
    } catch (err) {
      const reason = errorReason(err)
      if (/already known|known transaction|already imported/i.test(reason)) {
        nextNonce = nonce + 1
        return { outcome: 'sent', hash }
      }
      nextNonce = undefined // re-read from the node next time
      if (isTransportError(err)) return { outcome: 'unknown', hash, reason }
      if (NONCE_ERROR.test(reason)) return { outcome: 'retry', nonce, reason }
      return { outcome: 'rejected', reason }
    }
  }

  /** Signs locally and broadcasts `data` to USDC from the service wallet (after `onSigned`, if given). */
  function broadcast(data: Hex, onSigned?: (tx: SignedTransaction) => Promise<void>): Promise<Broadcast> {
    return exclusive(async () => {
      const deadline = performance.now() + NONCE_RETRY_MS
      for (let tries = 1; ; tries++) {
        let result: Awaited<ReturnType<typeof attempt>>
        try {
          result = await walletLock(() => attempt(data, onSigned))
        } catch (err) {
          // The lock itself failed before anything was signed.
          return { outcome: 'rejected', reason: errorReason(err) }
        }
        if (result.outcome !== 'retry') return result
        if (performance.now() >= deadline) return { outcome: 'rejected', reason: result.reason }
        log?.warn({ nonce: result.nonce, reason: result.reason, tries }, 'chain: nonce taken by another writer, retrying with a fresh one')
        // Outside the lock: the other writer's transaction gets a moment to reach the node.
        await new Promise((resolve) => setTimeout(resolve, Math.min(1_000, 50 * tries) + Math.random() * 100))
      }
    })
  }

  /** The outcome of a mined tx (undefined while it has no receipt). */
  async function receiptOutcome(hash: Hex, expected: { from: Address; to: Address; value: bigint }): Promise<SettlementResult | undefined> {
    let receipt: TransactionReceipt
    try {
      receipt = await publicClient.getTransactionReceipt({ hash })
    } catch (err) {
      if (err instanceof BaseError && err.walk((e) => e instanceof TransactionReceiptNotFoundError)) return undefined
      throw err
    }
    return judgeReceipt(receipt, hash, expected)
  }

  function carries(receipt: TransactionReceipt, expected: ExpectedTransfer): boolean {
    const transfers = parseEventLogs({ abi: usdcAbi, eventName: 'Transfer', logs: receipt.logs, strict: true })
    return transfers.some(
      (l) => isAddressEqual(l.address, usdc) && isAddressEqual(l.args.from, expected.from) && isAddressEqual(l.args.to, expected.to) && l.args.value === expected.value,
    )
  }

  function judgeReceipt(receipt: TransactionReceipt, hash: Hex, expected: ExpectedTransfer): SettlementResult {
    if (receipt.status !== 'success') return { status: 'failed', reason: 'transaction reverted', txHash: hash }
    if (!carries(receipt, expected)) return { status: 'failed', reason: 'no matching USDC Transfer log in the receipt', txHash: hash }
    return { status: 'confirmed', txHash: hash, blockNumber: receipt.blockNumber }
  }

  /** Waits for the receipt of a broadcast tx and checks the expected USDC Transfer log. */
  async function awaitOutcome(hash: Hex, expected: { from: Address; to: Address; value: bigint }, timeoutMs: number): Promise<SettlementResult> {
    let receipt: TransactionReceipt
    try {
      receipt = await waitForReceipt(publicClient, hash, { timeoutMs, pollingIntervalMs: pollingInterval })
    } catch (err) {
      if (!(err instanceof WaitForTransactionReceiptTimeoutError)) {
        log?.warn({ txHash: hash, err: errorReason(err) }, 'chain: receipt lookup failed')
      }
      // Not mined in time: it may wait behind a nonce the node no longer has (a dropped block).
      nextNonce = undefined
      return { status: 'pending', txHash: hash }
    }
    if (receipt.transactionHash !== hash) {
      // viem follows replacements; ours was dropped for another tx with the same nonce.
      return { status: 'failed', reason: `replaced by ${receipt.transactionHash}`, txHash: hash }
    }
    return judgeReceipt(receipt, hash, expected)
  }

  async function write(
    op: string,
    simulate: () => Promise<unknown>,
    data: Hex,
    expected: { from: Address; to: Address; value: bigint },
    timeoutMs: number,
    onSigned?: (tx: SignedTransaction) => Promise<void>,
  ): Promise<SettlementResult> {
    const started = performance.now()
    try {
      await simulate()
    } catch (err) {
      const reason = errorReason(err)
      // A node that did not answer said nothing about the transaction: that is no verdict, and a
      // settlement must not be refused for it (the caller leaves it to the reconciler).
      if (op === 'settle' && isTransportError(err)) {
        log?.warn({ op, reason }, 'chain: simulation unanswered, nothing broadcast')
        throw err
      }
      log?.info({ op, reason }, 'chain: simulation failed, nothing broadcast')
      return { status: 'failed', reason }
    }
    const sent = await broadcast(data, onSigned)
    if (sent.outcome === 'rejected') {
      log?.warn({ op, reason: sent.reason }, 'chain: broadcast rejected')
      return { status: 'failed', reason: sent.reason }
    }
    if (sent.outcome === 'unknown') {
      log?.error({ op, txHash: sent.hash, reason: sent.reason }, 'chain: broadcast unanswered, outcome unknown')
      return { status: 'pending', txHash: sent.hash }
    }
    const result = await awaitOutcome(sent.hash, expected, timeoutMs)
    const ms = Math.round(performance.now() - started)
    if (result.status === 'confirmed') log?.info({ op, txHash: result.txHash, block: result.blockNumber.toString(), ms }, 'chain: confirmed')
    else if (result.status === 'pending') log?.warn({ op, txHash: result.txHash, ms }, 'chain: receipt not seen in time, pending')
    else log?.warn({ op, txHash: result.txHash, reason: result.reason, ms }, 'chain: transaction failed')
    return result
  }

  const port: RpcChain = {
    kind: 'rpc',
    chainId,
    usdc,
    serviceAddress,
    confirmations,

    async inclusion(txHash, expected): Promise<Inclusion> {
      assertOpen()
      let receipt: TransactionReceipt
      try {
        receipt = await publicClient.getTransactionReceipt({ hash: txHash })
      } catch (err) {
        if (err instanceof BaseError && err.walk((e) => e instanceof TransactionReceiptNotFoundError)) {
          // A transaction we counted on is gone: our view of the wallet's nonce may be ahead of the chain.
          nextNonce = undefined
          return { status: 'missing' }
        }
        throw err
      }
      if (receipt.status !== 'success') return { status: 'reverted', blockNumber: receipt.blockNumber }
      const final = receipt.blockNumber <= (await finalBlock(await publicClient.getBlockNumber(), receipt.blockNumber))
      return {
        status: 'included',
        blockNumber: receipt.blockNumber,
        blockHash: receipt.blockHash,
        matched: expected === undefined || carries(receipt, expected),
        final,
      }
    },

    async authorizationFate(from, nonce, validBefore): Promise<AuthorizationFate> {
      assertOpen()
      const head = await publicClient.getBlockNumber()
      const usedAt = (blockNumber: bigint) => publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'authorizationState', args: [from, nonce], blockNumber })
      const last = await finalBlock(head, head)
      if (await usedAt(head)) return last >= head || (last >= 0n && (await usedAt(last))) ? 'final' : 'used'
      // EIP-3009 refuses a block whose timestamp reaches validBefore, and block times only grow:
      // once a final block is there, no block that can still change may use it.
      if (last < 0n) return 'open'
      const block = await publicClient.getBlock({ blockNumber: last > head ? head : last })
      return block.timestamp >= validBefore ? 'dead' : 'open'
    },

    async settleAuthorization(auth, signature, opts) {
      assertOpen()
      const timeoutMs = opts?.timeoutMs ?? defaultTimeoutMs
      let call: { simulate: () => Promise<unknown>; data: Hex }
      try {
        call = settlementCall(auth, signature)
      } catch (err) {
        return { status: 'failed', reason: errorReason(err) }
      }
      return write('settle', call.simulate, call.data, { from: auth.from, to: auth.to, value: auth.value }, timeoutMs)
    },

    async settlementStatus(txHash) {
      assertOpen()
      try {
        const receipt = await publicClient.getTransactionReceipt({ hash: txHash })
        return receipt.status === 'success' ? 'confirmed' : 'failed'
      } catch (err) {
        if (err instanceof BaseError && err.walk((e) => e instanceof TransactionReceiptNotFoundError)) return 'pending'
        throw err
      }
    },

    async transactionKnown(txHash) {
      assertOpen()
      try {
        await publicClient.getTransaction({ hash: txHash })
        return true
      } catch (err) {
        if (err instanceof BaseError && err.walk((e) => e instanceof TransactionNotFoundError)) return false
        throw err
      }
    },

    async isAuthorizationUsed(from, nonce) {
      assertOpen()
      return publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'authorizationState', args: [from, nonce] })
    },

    async findAuthorizationTx(from, nonce) {
      assertOpen()
      // Authorizations live minutes: the recent blocks hold the log. Searched newest first, in
      // windows small enough for public RPC range limits.
      const head = await publicClient.getBlockNumber()
      const WINDOW = 2_000n
      for (let to = head, searched = 0n; to >= 0n && searched < AUTHORIZATION_LOOKBACK_BLOCKS; to -= WINDOW, searched += WINDOW) {
        const fromBlock = to >= WINDOW - 1n ? to - (WINDOW - 1n) : 0n
        const logs = await publicClient.getContractEvents({
          address: usdc,
          abi: usdcAbi,
          eventName: 'AuthorizationUsed',
          args: { authorizer: from, nonce },
          fromBlock,
          toBlock: to,
        })
        const found = logs.at(-1)
        if (found?.transactionHash) return found.transactionHash
        if (fromBlock === 0n) break
      }
      return undefined
    },

    async transfer(to, amount, opts) {
      assertOpen()
      if (amount <= 0n) return { status: 'failed', reason: 'amount must be positive' }
      const timeoutMs = opts?.timeoutMs ?? defaultTimeoutMs
      const args = [to, amount] as const
      return write(
        'transfer',
        () => publicClient.simulateContract({ account: account(), address: usdc, abi: usdcAbi, functionName: 'transfer', args }),
        encodeFunctionData({ abi: usdcAbi, functionName: 'transfer', args }),
        { from: serviceAddress, to, value: amount },
        timeoutMs,
        opts?.onSigned,
      )
    },

    async resend(tx, expected, opts) {
      assertOpen()
      const timeoutMs = opts?.timeoutMs ?? defaultTimeoutMs
      const outcome = { from: serviceAddress, to: expected.to, value: expected.value }
      // The nonce first, then the receipt: a tx mined in between is seen by the receipt lookup.
      const mined = await publicClient.getTransactionCount({ address: serviceAddress, blockTag: 'latest' })
      const known = await receiptOutcome(tx.hash, outcome)
      if (known !== undefined) return known
      if (mined > tx.nonce) return { status: 'superseded' }
      return exclusive(async () => {
        // Under the wallet lock: another replica choosing a nonce sees this one as taken once it is out.
        const sent = await walletLock(async () => {
          try {
            await publicClient.sendRawTransaction({ serializedTransaction: tx.raw })
          } catch (err) {
            const reason = errorReason(err)
            if (!/already known|known transaction|already imported|nonce too low|nonce has already been used/i.test(reason)) {
              if (isTransportError(err)) return false
              log?.warn({ txHash: tx.hash, reason }, 'chain: resend refused')
            }
          }
          return true
        })
        if (!sent) return { status: 'pending' as const, txHash: tx.hash }
        nextNonce = undefined // the node's view of our nonce may have moved
        const result = await awaitOutcome(tx.hash, outcome, timeoutMs)
        if (result.status !== 'pending') return result
        const after = await publicClient.getTransactionCount({ address: serviceAddress, blockTag: 'latest' })
        return after > tx.nonce && (await receiptOutcome(tx.hash, outcome)) === undefined ? { status: 'superseded' as const } : result
      })
    },

    async balanceOf(address) {
      assertOpen()
      return publicClient.readContract({ address: usdc, abi: usdcAbi, functionName: 'balanceOf', args: [address] })
    },

    async close() {
      closed = true
      // Let in-flight broadcasts finish; receipt waits end on their own timeouts.
      await writeQueue
    },
  }

  /** 65-byte ECDSA → the (v,r,s) overload every USDC version has; anything else (ERC-1271) → bytes. */
  function settlementCall(auth: TransferAuthorization, signature: Hex): { simulate: () => Promise<unknown>; data: Hex } {
    const head = [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce] as const
    if (size(signature) === 65) {
      const { r, s, v, yParity } = parseSignature(signature)
      const args = [...head, Number(v ?? BigInt(yParity + 27)), r, s] as const
      return {
        simulate: () => publicClient.simulateContract({ account: account(), address: usdc, abi: usdcAbi, functionName: 'transferWithAuthorization', args }),
        data: encodeFunctionData({ abi: usdcAbi, functionName: 'transferWithAuthorization', args }),
      }
    }
    const args = [...head, signature] as const
    return {
      simulate: () => publicClient.simulateContract({ account: account(), address: usdc, abi: usdcAbi, functionName: 'transferWithAuthorization', args }),
      data: encodeFunctionData({ abi: usdcAbi, functionName: 'transferWithAuthorization', args }),
    }
  }

  return port
}

/** Transport-level failure: the request may or may not have reached the node. */
function isTransportError(err: unknown): boolean {
  if (!(err instanceof BaseError)) return !(err instanceof Error) || err.name === 'AbortError' || err.name === 'TypeError'
  return err.walk((e) => e instanceof HttpRequestError || e instanceof TimeoutError) !== null
}

/** Revert reason of a simulation, or the shortest useful message of any error. */
export function errorReason(err: unknown): string {
  if (err instanceof BaseError) {
    const revert = err.walk((e) => e instanceof ContractFunctionRevertedError)
    if (revert instanceof ContractFunctionRevertedError) {
      return revert.reason ?? revert.data?.errorName ?? revert.shortMessage
    }
    if (!err.details || err.details === err.shortMessage) return err.shortMessage
    return `${err.shortMessage.replace(/\.$/, '')}: ${err.details}`
  }
  return err instanceof Error ? err.message : String(err)
}
