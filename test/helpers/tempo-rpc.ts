// A scripted Tempo JSON-RPC responder for tests: a real node:http server on 127.0.0.1:0 that
// answers the handful of methods mppx (client and server) uses for a `tempo`/`charge` payment.
//
// No Tempo node can be installed on these machines (none is published on npm; anvil/hardhat do
// not speak Tempo's 0x76 transactions or TIP-20 precompiles), so this stands in for one. It does
// not execute anything: a broadcast transaction is decoded with viem/tempo
// `Transaction.deserialize`, and its TIP-20 `transfer`/`transferWithMemo` calls become
// `Transfer` (+ `TransferWithMemo`) logs in a successful receipt whose hash is keccak256(raw).
// Every broadcast is recorded so tests can count settlements, and faults can be scripted per
// method (revert, JSON-RPC error, timeout).
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Socket } from 'node:net'
import { decodeFunctionData, encodeAbiParameters, encodeEventTopics, keccak256, numberToHex, type Address, type Hex } from 'viem'
import { Abis, Transaction } from 'viem/tempo'

export type TempoRpcFault =
  /** eth_call/eth_estimateGas: "execution reverted"; broadcasts: mined with status 0x0, no logs. */
  | 'revert'
  /** A JSON-RPC error (-32000); a broadcast is refused and not recorded. */
  | 'rpc-error'
  /** The request is recorded (a broadcast counts as sent) but never answered. */
  | 'timeout'

export interface RpcRequestRecord {
  method: string
  params: unknown[]
}

export interface TempoRpcResponder {
  readonly url: string
  readonly chainId: number
  /** Every JSON-RPC request received, in order. */
  readonly requests: RpcRequestRecord[]
  /** Raw signed transactions that reached the "chain" (accepted, reverted or timed out). */
  readonly broadcasts: Hex[]
  /** Receipts (RPC form) by lower-case transaction hash. */
  readonly receipts: Map<string, Record<string, unknown>>
  /** How many requests of this method were received. */
  count(method: string): number
  /** The next `times` requests of `method` fail with `fault`. */
  fail(method: string, fault: TempoRpcFault, times?: number): void
  close(): Promise<void>
}

export interface TempoRpcOptions {
  chainId?: number
  /** Base fee per gas reported in blocks (wei). */
  baseFeePerGas?: bigint
}

const BROADCAST_METHODS = new Set(['eth_sendRawTransaction', 'eth_sendRawTransactionSync'])
const ZERO_HASH = `0x${'00'.repeat(32)}` as Hex

interface JsonRpcRequest {
  id?: unknown
  method?: unknown
  params?: unknown
}

class RpcError extends Error {
  readonly code: number
  readonly data: Hex | undefined
  constructor(code: number, message: string, data?: Hex) {
    super(message)
    this.code = code
    this.data = data
  }
}

/** Held (never-answered) requests: resolved with undefined when the responder closes. */
const HOLD = Symbol('hold')

export async function startTempoRpc(options: TempoRpcOptions = {}): Promise<TempoRpcResponder> {
  const chainId = options.chainId ?? 4217
  const baseFeePerGas = options.baseFeePerGas ?? 20_000_000_000n
  const requests: RpcRequestRecord[] = []
  const broadcasts: Hex[] = []
  const receipts = new Map<string, Record<string, unknown>>()
  const faults = new Map<string, TempoRpcFault[]>()
  const sockets = new Set<Socket>()
  let blockNumber = 1n

  const takeFault = (method: string): TempoRpcFault | undefined => faults.get(method)?.shift()

  function block(): Record<string, unknown> {
    const number = blockNumber
    return {
      number: numberToHex(number),
      hash: keccak256(numberToHex(number, { size: 32 })),
      parentHash: keccak256(numberToHex(number - 1n, { size: 32 })),
      timestamp: numberToHex(Math.floor(Date.now() / 1000)),
      baseFeePerGas: numberToHex(baseFeePerGas),
      gasLimit: numberToHex(30_000_000n),
      gasUsed: '0x0',
      miner: `0x${'00'.repeat(20)}`,
      nonce: '0x0000000000000000',
      difficulty: '0x0',
      totalDifficulty: '0x0',
      extraData: '0x',
      logsBloom: `0x${'00'.repeat(256)}`,
      mixHash: ZERO_HASH,
      receiptsRoot: ZERO_HASH,
      sha3Uncles: ZERO_HASH,
      stateRoot: ZERO_HASH,
      transactionsRoot: ZERO_HASH,
      size: '0x0',
      transactions: [],
      uncles: [],
    }
  }

  /** A receipt for a raw Tempo transaction, with TIP-20 transfer logs unless it reverted. */
  function buildReceipt(raw: Hex, reverted: boolean): Record<string, unknown> {
    const tx = Transaction.deserialize(raw as Parameters<typeof Transaction.deserialize>[0]) as {
      from?: Address
      calls?: readonly { to?: Address | null; data?: Hex }[]
      to?: Address | null
    }
    const from = tx.from ?? (`0x${'00'.repeat(20)}` as Address)
    const transactionHash = keccak256(raw)
    blockNumber += 1n
    const blockHash = keccak256(numberToHex(blockNumber, { size: 32 }))
    const logs: Record<string, unknown>[] = []
    const pushLog = (address: Address, topics: readonly (Hex | Hex[] | null)[], data: Hex): void => {
      logs.push({
        address,
        topics,
        data,
        blockHash,
        blockNumber: numberToHex(blockNumber),
        logIndex: numberToHex(logs.length),
        transactionHash,
        transactionIndex: '0x0',
        removed: false,
      })
    }
    if (!reverted) {
      for (const call of tx.calls ?? []) {
        if (!call.to || !call.data) continue
        let decoded: { functionName: string; args?: readonly unknown[] }
        try {
          decoded = decodeFunctionData({ abi: Abis.tip20, data: call.data }) as typeof decoded
        } catch {
          continue
        }
        if (decoded.functionName !== 'transfer' && decoded.functionName !== 'transferWithMemo') continue
        const [to, amount, memo] = decoded.args as [Address, bigint, Hex | undefined]
        const data = encodeAbiParameters([{ type: 'uint256' }], [amount])
        pushLog(call.to, encodeEventTopics({ abi: Abis.tip20, eventName: 'Transfer', args: { from, to } }), data)
        if (decoded.functionName === 'transferWithMemo' && memo !== undefined) {
          pushLog(call.to, encodeEventTopics({ abi: Abis.tip20, eventName: 'TransferWithMemo', args: { from, to, memo } }), data)
        }
      }
    }
    const firstCall = tx.calls?.[0]
    return {
      blockHash,
      blockNumber: numberToHex(blockNumber),
      contractAddress: null,
      cumulativeGasUsed: '0x186a0',
      effectiveGasPrice: numberToHex(baseFeePerGas),
      from,
      gasUsed: '0x186a0',
      logs,
      logsBloom: `0x${'00'.repeat(256)}`,
      status: reverted ? '0x0' : '0x1',
      to: firstCall?.to ?? tx.to ?? null,
      transactionHash,
      transactionIndex: '0x0',
      type: '0x76',
    }
  }

  function broadcast(method: string, raw: Hex, fault: TempoRpcFault | undefined): unknown {
    if (fault === 'rpc-error') throw new RpcError(-32000, 'scripted broadcast failure')
    broadcasts.push(raw)
    const receipt = buildReceipt(raw, fault === 'revert')
    receipts.set(String(receipt.transactionHash).toLowerCase(), receipt)
    if (fault === 'timeout') return HOLD
    return method === 'eth_sendRawTransactionSync' ? receipt : receipt.transactionHash
  }

  function answer(method: string, params: unknown[]): unknown {
    const fault = takeFault(method)
    if (BROADCAST_METHODS.has(method)) return broadcast(method, params[0] as Hex, fault)
    if (fault === 'timeout') return HOLD
    if (fault === 'rpc-error') throw new RpcError(-32000, `scripted ${method} failure`)
    if (fault === 'revert') throw new RpcError(3, 'execution reverted', '0x')
    switch (method) {
      case 'eth_chainId':
        return numberToHex(chainId)
      case 'net_version':
        return String(chainId)
      case 'eth_blockNumber':
        return numberToHex(blockNumber)
      case 'eth_getBlockByNumber':
      case 'eth_getBlockByHash':
        return block()
      case 'eth_gasPrice':
        return numberToHex(baseFeePerGas)
      case 'eth_maxPriorityFeePerGas':
        return '0x0'
      case 'eth_estimateGas':
        return numberToHex(100_000n)
      case 'eth_getTransactionCount':
        return '0x0'
      case 'eth_getCode':
        return '0x'
      case 'eth_call':
        return '0x'
      case 'eth_getTransactionReceipt':
        return receipts.get(String(params[0]).toLowerCase()) ?? null
      case 'eth_fillTransaction':
        // Tempo nodes can fill transactions; viem falls back to local filling when this fails.
        throw new RpcError(-32601, 'the method eth_fillTransaction does not exist/is not available')
      default:
        throw new RpcError(-32601, `the method ${method} does not exist/is not available`)
    }
  }

  function handleOne(request: JsonRpcRequest): Record<string, unknown> | typeof HOLD {
    const id = request.id ?? null
    const method = typeof request.method === 'string' ? request.method : ''
    const params = Array.isArray(request.params) ? (request.params as unknown[]) : []
    requests.push({ method, params })
    try {
      const result = answer(method, params)
      if (result === HOLD) return HOLD
      return { jsonrpc: '2.0', id, result }
    } catch (err) {
      if (!(err instanceof RpcError)) throw err
      const error: Record<string, unknown> = { code: err.code, message: err.message }
      if (err.data !== undefined) error.data = err.data
      return { jsonrpc: '2.0', id, error }
    }
  }

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      let body: unknown
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } }))
        return
      }
      const batch = Array.isArray(body)
      const replies = (batch ? (body as JsonRpcRequest[]) : [body as JsonRpcRequest]).map(handleOne)
      if (replies.some((reply) => reply === HOLD)) return // never answered; closed with the server
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(batch ? replies : replies[0]))
    })
  })
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    chainId,
    requests,
    broadcasts,
    receipts,
    count: (method) => requests.filter((r) => r.method === method).length,
    fail(method, fault, times = 1) {
      const queue = faults.get(method) ?? []
      for (let i = 0; i < times; i++) queue.push(fault)
      faults.set(method, queue)
    },
    async close() {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
