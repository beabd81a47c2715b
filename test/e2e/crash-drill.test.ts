// The crash drill on the real CLI, several rounds on one DATA_DIR: concurrent paid creates and plan
// purchases from real x402 clients, then the whole process group (node, anvil, watchdogs) or the
// node process alone is SIGKILLed, the service restarted on the same data and every task of every
// buyer so far deleted; every buyer and the service wallet end exactly where conservation says, and
// a restart after a crash is ready as fast as a start after a graceful stop. On PGlite and on
// Postgres + Redis (skipped with the reason when unreachable). DRILL_SEED replays a run's kill times;
// `npm run drill` runs more rounds (bench/crash-drill.ts).
import t, { type Test } from 'tap'
import { crashDrill, type DrillOptions, postgresUnreachable } from '../helpers/crash-drill.ts'

// A PGlite round takes 25–40 s here. A Postgres round after a kill waits out the 2-minute window in
// which a 'settling' payment may still belong to another replica (PGlite decides the dead process's
// at start), so the two run side by side, the Postgres one mostly waiting. A failing round waits out
// its 3-minute deadline and then ends its drill.
t.setTimeout(10 * 60_000)
t.jobs = 2

const seed = process.env.DRILL_SEED === undefined ? undefined : Number(process.env.DRILL_SEED)

async function drill(t: Test, options: Pick<DrillOptions, 'rounds' | 'kill' | 'database' | 'workers' | 'killAfterMs'>): Promise<void> {
  const result = await crashDrill({ ...options, seed, stopWhenStuck: true, log: (line) => t.comment(line) })
  t.equal(result.rounds.length, options.rounds, `all ${options.rounds} rounds ran (seed ${result.seed})`)
  for (const round of result.rounds) {
    t.ok(round.answered > 0 && round.cutOff > 0, `round ${round.round} (${round.kill} kill): ${round.answered} paid calls answered, ${round.cutOff} cut off by the kill`)
    // Recovery runs in the background: with slack for this machine's noise.
    t.ok(round.restartMs < round.startMs * 1.5 + 2000, `round ${round.round}: restart ${round.restartMs.toFixed(0)} ms vs start ${round.startMs.toFixed(0)} ms`)
  }
  t.same(result.problems, [], 'every buyer of every round and the service wallet exact, nothing left open')
}

t.test('on PGlite: group, service and group kills on one DATA_DIR', { buffered: true }, async (t) => {
  await drill(t, { database: 'pglite', rounds: 3, kill: ['group', 'service', 'group'], workers: 4, killAfterMs: 3000 })
})

t.test('on Postgres and Redis: group and service kills on one database', { buffered: true }, async (t) => {
  const reason = await postgresUnreachable()
  if (reason) {
    t.comment(reason)
    t.skip(reason, () => {})
    return
  }
  await drill(t, { database: 'postgres', rounds: 2, kill: ['group', 'service'], workers: 4, killAfterMs: 3000 })
})
