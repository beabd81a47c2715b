// The dev chain's saved state is one instant of the chain: its accounts and its blocks agree.
// anvil_dumpState reads the blocks before the accounts, so a block mined during a dump was in the
// accounts and not in the blocks, and a chain loaded from it had that block's transfers without
// their transactions (a refund whose transaction was lost was sent again: paid twice). Real anvil,
// a sender mining a block per transaction throughout, every save checked: the sender's nonce in
// the saved accounts is the count of its transactions in the saved blocks.
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { createWalletClient, http, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { ANVIL_ACCOUNT_0_KEY, startDevChain } from '../../src/payments/chain/dev.ts'

const SAVES = 8

interface SavedState {
  accounts: Record<string, { nonce: number }>
  blocks: { header: { number: string }; transactions: unknown[] }[]
}

t.test('every save holds accounts and blocks of one instant, while blocks are mined throughout', async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-dev-state-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const dev = await startDevChain({ dataDir: dir })
  t.teardown(() => dev.close())
  const file = dev.stateFile as string
  const account = privateKeyToAccount(ANVIL_ACCOUNT_0_KEY)
  const chain = { id: dev.chainId, name: 'dev', nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [dev.rpcUrl] } } }
  const wallet = createWalletClient({ account, chain, transport: http(dev.rpcUrl) })
  const rpc = async <T>(method: string, params: unknown[]): Promise<T> => {
    const response = await fetch(dev.rpcUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) })
    const body = (await response.json()) as { result?: T; error?: { message: string } }
    if (body.error) throw new Error(body.error.message)
    return body.result as T
  }
  // A chain of some size, so that a dump takes a while (as one half an hour old does): 7.5 MB of
  // incompressible code, 320 contracts of 24 KiB (the EIP-170 limit).
  for (let i = 0; i < 320; i += 1) await rpc('anvil_setCode', [privateKeyToAccount(generatePrivateKey()).address, `0x${randomBytes(24 * 1024).toString('hex')}`])

  // A block per transaction (automine), one after another, until the saves are done.
  let sending = true
  let sent = 0
  const sender = (async () => {
    let nonce = await rpc<Hex>('eth_getTransactionCount', [account.address, 'pending']).then(Number)
    while (sending) {
      await wallet.sendTransaction({ to: '0x000000000000000000000000000000000000dEaD', value: 1n, nonce, gas: 21_000n })
      nonce += 1
      sent += 1
    }
  })()
  const mismatches: string[] = []
  for (let i = 0; i < SAVES; i += 1) {
    const head = await dev.saveState()
    const saved = JSON.parse(readFileSync(file, 'utf8')) as SavedState
    const nonce = Number(Object.entries(saved.accounts).find(([address]) => address.toLowerCase() === account.address.toLowerCase())?.[1].nonce ?? 0)
    const mined = saved.blocks.reduce((n, block) => n + block.transactions.length, 0)
    const top = Math.max(...saved.blocks.map((block) => Number(block.header.number)))
    if (nonce !== mined) mismatches.push(`save ${i}: the sender's nonce is ${nonce}, its transactions in the blocks ${mined} (blocks to ${top}, head ${head})`)
    if (BigInt(top) < head) mismatches.push(`save ${i}: blocks only to ${top}, but it reported ${head}`)
  }
  sending = false
  await sender
  t.ok(sent > SAVES, `blocks were mined throughout (${sent} transactions)`)
  t.same(mismatches, [], 'accounts and blocks agree in every save')
  // Nothing left behind in the pool once mining resumed (anvil's automine may lag a moment).
  let left = Number.POSITIVE_INFINITY
  for (const until = Date.now() + 20_000; left > 0 && Date.now() < until; await new Promise((resolve) => setTimeout(resolve, 200))) {
    const pool = await rpc<{ pending: Hex; queued: Hex }>('txpool_status', [])
    left = Number(pool.pending) + Number(pool.queued)
  }
  t.equal(left, 0, 'sends made while a dump paused mining were mined after it')
})
