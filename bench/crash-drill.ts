// The crash drill: `npm run drill`. ROUNDS rounds (default 3) on one DATA_DIR: WORKERS new buyers
// per round (6) pay for tasks and plans at once, the service is killed after about KILL_AFTER_MS
// (4000) as KILL says per round, cycled (group,service,group: `group` SIGKILLs node, anvil and the
// watchdogs at once, `service` node alone), restarted, every task of every buyer so far deleted;
// then every buyer and the service wallet are checked on-chain against conservation
// (test/helpers/crash-drill.ts). DATABASE=pglite|postgres (TEST_DATABASE_URL, TEST_REDIS_URL);
// SEED replays a run's kill times. Prints a line per round; exits 1 on any problem.
import { crashDrill, type KillKind, postgresUnreachable } from '../test/helpers/crash-drill.ts'

const rounds = Number(process.env.ROUNDS ?? 3)
const workers = Number(process.env.WORKERS ?? 6)
const killAfterMs = Number(process.env.KILL_AFTER_MS ?? 4000)
const kill = (process.env.KILL ?? 'group,service,group').split(',').map((kind) => kind.trim()) as KillKind[]
const database = (process.env.DATABASE ?? 'pglite') as 'pglite' | 'postgres'
const seed = process.env.SEED === undefined ? undefined : Number(process.env.SEED)

if (!Number.isInteger(rounds) || rounds < 1 || !Number.isInteger(workers) || workers < 1 || !(killAfterMs > 0))
  throw new Error('ROUNDS, WORKERS and KILL_AFTER_MS must be positive numbers')
if (kill.length === 0 || kill.some((kind) => kind !== 'group' && kind !== 'service'))
  throw new Error(`KILL must be a comma-separated list of group and service, not ${process.env.KILL}`)
if (database !== 'pglite' && database !== 'postgres') throw new Error(`DATABASE must be pglite or postgres, not ${database}`)
if (seed !== undefined && !Number.isInteger(seed)) throw new Error('SEED must be an integer')
if (database === 'postgres') {
  const reason = await postgresUnreachable()
  if (reason) throw new Error(reason)
}

// The CLIs lead their own process groups: exit through the drill's exit hook, which kills them.
process.once('SIGINT', () => process.exit(130))
process.once('SIGTERM', () => process.exit(143))

const started = performance.now()
const result = await crashDrill({ rounds, workers, killAfterMs, kill, database, seed, log: (line) => console.log(line) })
const wrongBuyers = result.buyers.filter((buyer) => buyer.final !== buyer.expected).length
console.log(
  `${result.problems.length === 0 ? 'EXACT' : 'WRONG'}: ${result.rounds.length} of ${rounds} rounds on ${database} (seed ${result.seed}), ` +
    `${result.buyers.length} buyers (${wrongBuyers} wrong), service wallet ${result.wallet.final === result.wallet.expected ? 'exact' : 'wrong'}, ` +
    `${result.problems.length} problems, ${((performance.now() - started) / 1000).toFixed(0)} s`,
)
process.exitCode = result.problems.length === 0 ? 0 : 1
