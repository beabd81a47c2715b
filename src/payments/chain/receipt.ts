// Waiting for a transaction's receipt. viem's wait follows replacements, but it asks for the
// receipt again only when a new block is announced, and a node can announce the block before it
// serves the block's receipts. On a chain that mines only when a transaction arrives (anvil, the
// dev chain) no further block may come, and the wait hung until its timeout with the transaction
// long mined. So the receipt is also asked for directly, at a slower pace, and the first answer wins.
import type { Hex, PublicClient, TransactionReceipt } from 'viem'

export async function waitForReceipt(
  client: Pick<PublicClient, 'waitForTransactionReceipt' | 'getTransactionReceipt'>,
  hash: Hex,
  options: { timeoutMs: number; pollingIntervalMs?: number | undefined; directEveryMs?: number },
): Promise<TransactionReceipt> {
  let settled = false
  const direct = async (): Promise<TransactionReceipt> => {
    const deadline = Date.now() + options.timeoutMs
    while (!settled && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, options.directEveryMs ?? 500))
      const receipt = await client.getTransactionReceipt({ hash }).catch(() => undefined)
      if (receipt) return receipt
    }
    // viem's wait owns the timeout: this side only ever answers with a receipt.
    return new Promise<never>(() => undefined)
  }
  try {
    return await Promise.race([
      client.waitForTransactionReceipt({ hash, timeout: options.timeoutMs, ...(options.pollingIntervalMs ? { pollingInterval: options.pollingIntervalMs } : {}) }),
      direct(),
    ])
  } finally {
    settled = true
  }
}
