// The kill -9 drill, repeated: `npm run drill` (ROUNDS=3 WORKERS=6 KILL_AFTER_MS=4000 by default).
// Each round starts `agent-gateway serve` on a fresh DATA_DIR, pays for tasks and plans from
// WORKERS buyers at once, SIGKILLs the process after KILL_AFTER_MS, restarts it, deletes every task
// and checks every buyer's on-chain balance against conservation (test/helpers/crash-drill.ts).
// Prints the clean-start and restart-after-crash times of each round.
import { crashDrill } from '../test/helpers/crash-drill.ts'

const rounds = Number(process.env.ROUNDS ?? 3)
const workers = Number(process.env.WORKERS ?? 6)
const killAfterMs = Number(process.env.KILL_AFTER_MS ?? 4000)
let failed = 0
for (let round = 1; round <= rounds; round += 1) {
  const result = await crashDrill({ workers, killAfterMs, log: (line) => console.log(`round ${round}: ${line}`) })
  console.log(
    `round ${round}: ${result.problems.length === 0 ? 'EXACT' : 'WRONG'}; ${result.answered} paid calls answered, ${result.cutOff} cut off, ${result.deleted} tasks deleted; ` +
      `clean start ${(result.cleanStartMs / 1000).toFixed(1)} s, restart after kill -9 ${(result.restartMs / 1000).toFixed(1)} s`,
  )
  for (const problem of result.problems) console.log(`  ${problem}`)
  if (result.problems.length > 0) failed += 1
}
process.exitCode = failed === 0 ? 0 : 1
