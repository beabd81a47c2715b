// The dev chain mines what it is sent, whatever the order it arrives in. anvil's automine alone
// leaves some of a sender's transactions queued forever when their nonces arrive out of order (a
// round of 30 here sticks within ~50 rounds); the pool doctor of src/payments/chain/dev.ts puts
// them back. Real anvil, the service's own key, the rounds bounded.
import t from 'tap'
import { createPublicClient, createWalletClient, http } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { ANVIL_ACCOUNT_0_KEY, startDevChain } from '../../src/payments/chain/dev.ts'

const ROUNDS = 100
const PER_ROUND = 30

t.test('transactions sent out of nonce order are all mined, every round', async (t) => {
  const dev = await startDevChain({})
  t.teardown(() => dev.close())
  const account = privateKeyToAccount(ANVIL_ACCOUNT_0_KEY)
  const chain = { id: dev.chainId, name: 'dev', nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [dev.rpcUrl] } } }
  const wallet = createWalletClient({ account, chain, transport: http(dev.rpcUrl) })
  const node = createPublicClient({ chain, transport: http(dev.rpcUrl), pollingInterval: 20 })
  let slowest = 0
  for (let round = 0; round < ROUNDS; round += 1) {
    const base = await node.getTransactionCount({ address: account.address, blockTag: 'latest' })
    const order = [...Array(PER_ROUND).keys()].sort(() => Math.random() - 0.5)
    await Promise.all(order.map((i) => wallet.sendTransaction({ to: '0x000000000000000000000000000000000000dEaD', value: 1n, nonce: base + i, gas: 21_000n })))
    const started = Date.now()
    // Left alone a moment first, as a settler waiting on receipts would (polling right away hides it).
    await new Promise((resolve) => setTimeout(resolve, 300))
    let mined = base
    while (Date.now() - started < 10_000) {
      mined = await node.getTransactionCount({ address: account.address, blockTag: 'latest' })
      if (mined === base + PER_ROUND) break
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    slowest = Math.max(slowest, Date.now() - started)
    if (mined !== base + PER_ROUND) {
      t.fail(`round ${round}: ${mined - base} of ${PER_ROUND} mined after 10 s`, { pool: await node.request({ method: 'txpool_status' as never }) })
      return
    }
  }
  t.pass(`${ROUNDS} rounds of ${PER_ROUND} mined; the slowest took ${slowest} ms`)
})
