// The kill -9 drill once, on the real CLI: concurrent paid creates and plan purchases
// from real x402 clients, SIGKILL, restart on the same DATA_DIR, delete everything; every buyer's
// on-chain balance is what conservation says, and the restart is ready as fast as a clean start.
// `npm run drill` repeats it (bench/crash-drill.ts).
import t from 'tap'
import { crashDrill } from '../helpers/crash-drill.ts'

t.test('kill -9 under concurrent paid load: every buyer ends exactly where conservation says', async (t) => {
  const result = await crashDrill({ workers: 4, killAfterMs: 2500, log: (line) => t.comment(line) })
  t.ok(result.answered > 0, `${result.answered} paid calls were answered before the kill`)
  t.same(result.problems, [], 'every buyer exact, nothing left open')
  // Recovery runs in the background: a restart after a crash is no slower than a clean start
  // (with slack for this machine's noise).
  t.ok(result.restartMs < result.cleanStartMs * 1.5 + 2000, `restart ${result.restartMs.toFixed(0)} ms vs clean start ${result.cleanStartMs.toFixed(0)} ms`)
})
