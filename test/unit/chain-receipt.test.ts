// A receipt is found even when viem's wait, which asks again only on a new block, would hang: an
// idle dev chain announces no further block after the one it has not yet served the receipt of.
import t from 'tap'
import type { Hex, TransactionReceipt } from 'viem'
import { waitForReceipt } from '../../src/payments/chain/receipt.ts'

const HASH = `0x${'ab'.repeat(32)}` as Hex
const RECEIPT = { transactionHash: HASH, status: 'success' } as unknown as TransactionReceipt

t.test('the direct ask answers while the block-driven wait hangs', async (t) => {
  let asked = 0
  const client = {
    waitForTransactionReceipt: (() => new Promise(() => undefined)) as never,
    getTransactionReceipt: (async () => {
      asked += 1
      if (asked < 3) throw new Error('receipt not found')
      return RECEIPT
    }) as never,
  }
  const receipt = await waitForReceipt(client, HASH, { timeoutMs: 5_000, directEveryMs: 10 })
  t.equal(receipt, RECEIPT)
  t.equal(asked, 3)
})

t.test("viem's answer wins when it comes first, and the direct ask stops", async (t) => {
  let asked = 0
  const client = {
    waitForTransactionReceipt: (async () => RECEIPT) as never,
    getTransactionReceipt: (async () => {
      asked += 1
      throw new Error('receipt not found')
    }) as never,
  }
  t.equal(await waitForReceipt(client, HASH, { timeoutMs: 5_000, directEveryMs: 10 }), RECEIPT)
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.ok(asked <= 1, `asked ${asked} times after the answer`)
})

t.test("a timeout is viem's: the wait rejects once neither found it", async (t) => {
  const timeout = new Error('timed out')
  const client = {
    waitForTransactionReceipt: (() => new Promise((_resolve, reject) => setTimeout(() => reject(timeout), 50))) as never,
    getTransactionReceipt: (async () => {
      throw new Error('receipt not found')
    }) as never,
  }
  await t.rejects(waitForReceipt(client, HASH, { timeoutMs: 50, directEveryMs: 10 }), timeout)
})
