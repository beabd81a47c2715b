// The topology drill: `npm run drill:topology` (docs/reliability.md). The Helm chart's topology on
// one machine (test/helpers/topology.ts): 2 gateways, 2 scheduler-api, 2 controllers on one Lease, media and
// memory, each `agent-gateway <role>` with the chart's environment, behind round-robin fronts, on a
// Postgres cluster and a Redis server of the drill's own, anvil behind an RPC front over
// CHAIN_RPC_URL and BLOB_DIR on a small tmpfs. Real x402 clients put mixed load on it for
// DRILL_MINUTES (2) while DRILL_FAULTS faults (4 per minute) hit it at moments drawn from DRILL_SEED
// (printed): kill -9 of a replica and its restart, pg_terminate_backend, a Postgres restart -m
// immediate, Redis CLIENT KILL, a Redis restart, the RPC front down or slow, anvil restarted behind
// the closed front, the blob volume full. Then quiescence and the invariants
// (test/helpers/topology-invariants.ts); a table; exit 1 on any violated invariant.
//
// Variables: DRILL_SEED, DRILL_MINUTES, DRILL_FAULTS, DRILL_KINDS (all of FAULT_KINDS),
// DRILL_SHARED_SERVICES (unset: own Postgres and Redis), DRILL_RPC_DOWN_S (10), DRILL_RPC_SLOW_S (20),
// DRILL_RPC_DELAY_S (3-8), DRILL_DISK_FULL_S (15), DRILL_BLOB_MB (64), DRILL_RECOVERY_BOUND_S (30),
// DRILL_TASK_BUYERS (3), DRILL_MEMORY_BUYERS (1), DRILL_PACE_MS (250), DRILL_MAX_CALLS (5000),
// DRILL_V1_BUYERS, DRILL_MCP_BUYERS, DRILL_SONG_BUYERS (1 each), DRILL_SONG_EVERY_S (20),
// DRILL_EXECUTOR (kubernetes: the fake API server, a kubelet double, 2 controllers on the Lease; or local),
// DRILL_READY_BOUND_S (60), DRILL_GRACE_S (5), DRILL_CONTROLLERS (2, local: 1), DRILL_MEMORIES (1), DRILL_REDIS_DB (9), DRILL_KEEP,
// DRILL_LOG_LEVEL (warn); with DRILL_SHARED_SERVICES, TEST_DATABASE_URL and TEST_REDIS_URL name the servers.
import { randomInt } from 'node:crypto'
import { postgresUnreachable } from '../test/helpers/crash-drill.ts'
import { ownPostgresUnavailable, ownRedisUnavailable } from '../test/helpers/own-services.ts'
import { SERVICE_ADDRESS, startTopology, type Topology } from '../test/helpers/topology.ts'
import { seededRandom } from '../test/helpers/signals.ts'
import { FAULT_KINDS, type FaultKind, KUBE_KINDS, OWN_SERVICE_KINDS, planFaults, runFaults } from '../test/helpers/topology-faults.ts'
import { checkMoney, faultOverlapping, judgeCalls, quiesce, table } from '../test/helpers/topology-invariants.ts'
import { fundBuyers, moreBuyersFromEnv, startLoad } from '../test/helpers/topology-load.ts'
import { startReceiver } from '../test/helpers/topology-reviews.ts'
import { startSchedules } from '../test/helpers/topology-schedules.ts'
import { startSongUpstream } from '../test/helpers/topology-songs.ts'

const num = (name: string, fallback: number) => {
  const value = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number, not ${process.env[name]}`)
  return value
}
const seed = process.env.DRILL_SEED === undefined ? randomInt(2 ** 31) : Number(process.env.DRILL_SEED)
if (!Number.isInteger(seed)) throw new Error('DRILL_SEED must be an integer')
const minutes = num('DRILL_MINUTES', 2)
const faultCount = Math.round(num('DRILL_FAULTS', Math.max(2, Math.round(minutes * 4))))
const asked = (process.env.DRILL_KINDS ?? FAULT_KINDS.join(',')).split(',').map((kind) => kind.trim()) as FaultKind[]
if (asked.length === 0 || asked.some((kind) => !FAULT_KINDS.includes(kind))) throw new Error(`DRILL_KINDS must be a list of ${FAULT_KINDS.join(', ')}`)
const shared = process.env.DRILL_SHARED_SERVICES === '1'
const executor = process.env.DRILL_EXECUTOR === 'local' ? 'local' : 'kubernetes'
if (process.env.DRILL_EXECUTOR !== undefined && !['local', 'kubernetes'].includes(process.env.DRILL_EXECUTOR)) throw new Error('DRILL_EXECUTOR must be kubernetes or local')
// The machine's servers serve every other test: the drill restarts only servers it started. The
// Lease and the API server exist only with the kubernetes executor.
const kinds = asked.filter((kind) => !(shared && OWN_SERVICE_KINDS.includes(kind)) && !(executor === 'local' && KUBE_KINDS.includes(kind)))
if (kinds.length === 0)
  throw new Error(`no fault kind of ${asked.join(', ')} applies (${OWN_SERVICE_KINDS.join(', ')} need the own services, ${KUBE_KINDS.join(', ')} the kubernetes executor)`)
const [delayMin, delayMax] = (process.env.DRILL_RPC_DELAY_S ?? '3-8').split('-').map((part) => Number(part) * 1000)
if (!Number.isFinite(delayMin) || !Number.isFinite(delayMax) || (delayMin as number) > (delayMax as number)) throw new Error('DRILL_RPC_DELAY_S must be <min>-<max> seconds')
const readyBoundMs = num('DRILL_READY_BOUND_S', 60) * 1000
const graceMs = num('DRILL_GRACE_S', 5) * 1000
const keep = process.env.DRILL_KEEP !== undefined

const unreachable = shared ? await postgresUnreachable() : (ownPostgresUnavailable() ?? ownRedisUnavailable())
if (unreachable) throw new Error(`${unreachable}${shared ? '' : ' (DRILL_SHARED_SERVICES=1 runs on the machine’s servers, without the restart kinds)'}`)
process.once('SIGINT', () => process.exit(130))
process.once('SIGTERM', () => process.exit(143))

const began = performance.now()
const log = (line: string) => console.log(`[${((performance.now() - began) / 1000).toFixed(1).padStart(6)} s] ${line}`)
log(`seed ${seed} (DRILL_SEED=${seed} replays the fault plan); ${minutes} min of load, ${faultCount} faults of ${kinds.join(',')}`)
if (kinds.length < asked.length)
  log(`${asked.filter((kind) => !kinds.includes(kind)).join(', ')} left out (shared services are never restarted; the local executor has no Lease or API server)`)
const random = seededRandom(seed)
const plan = planFaults(random, minutes * 60_000, faultCount, kinds)
log(`fault plan: ${plan.map((step) => `${(step.at / 1000).toFixed(0)} s ${step.kind}`).join(', ')}`)

const problems: string[] = []
let topology: Topology | undefined
let failed = false
// The review callbacks' receiver and the song model the media role generates with: both started
// before the roles, whose environment names them. Their own seeds keep the fault plan and the
// load's draws the same as without them.
const receiver = await startReceiver({ random: seededRandom(seed + 1), failFirst: 0.5 })
const songs = await startSongUpstream()
try {
  topology = await startTopology({
    ...(process.env.DRILL_CONTROLLERS !== undefined ? { controllers: num('DRILL_CONTROLLERS', 2) } : {}),
    executor,
    random: seededRandom(seed + 2),
    roleEnv: {
      gateway: { REVIEWS_EGRESS_ALLOW: receiver.allow, REVIEWS_CALLBACK_RETRY_DELAY_SEC: '1' },
      media: { SONG_UPSTREAM_URL: songs.songsUrl, MEDIA_UPSTREAM_RETRIES: '0' },
    },
    memories: num('DRILL_MEMORIES', 1),
    redisDb: num('DRILL_REDIS_DB', 9),
    sharedServices: shared,
    blobVolumeMb: num('DRILL_BLOB_MB', 64),
    log,
  })
  const startupMs = performance.now() - began
  // The RPC node produces a block every 2 s, as a real chain does (anvil alone mines only on a
  // transaction, and its clock stands still in between: an expired authorization would look alive).
  // Straight to the node: a chain goes on producing blocks while an RPC endpoint is down or slow.
  const producer = setInterval(() => {
    if (!topology?.chainUp()) return
    fetch(topology.nodeUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}',
      signal: AbortSignal.timeout(2_000),
    }).catch(() => {})
  }, 2_000)
  producer.unref()
  const buyers = await fundBuyers(topology, num('DRILL_TASK_BUYERS', 3), num('DRILL_MEMORY_BUYERS', 1), moreBuyersFromEnv())
  const walletBase = await topology.chain().balanceOf(SERVICE_ADDRESS)
  log(`${buyers.length} buyers funded; service wallet ${walletBase} micros; load for ${minutes} min`)
  const schedules = await startSchedules(topology, { random: seededRandom(seed + 1), log, receiver })
  log(`${schedules.tasks.length} every-minute tasks scheduled; reviews with callbacks to ${receiver.allow}`)

  const load = startLoad(topology, buyers, { paceMs: num('DRILL_PACE_MS', 250), maxCalls: num('DRILL_MAX_CALLS', 5000), random })
  const faults = runFaults(topology, plan, {
    rpcDownMs: num('DRILL_RPC_DOWN_S', 10) * 1000,
    rpcSlowMs: num('DRILL_RPC_SLOW_S', 20) * 1000,
    rpcDelayMs: [delayMin as number, delayMax as number],
    diskFullMs: num('DRILL_DISK_FULL_S', 15) * 1000,
    readyBoundMs,
    recoveryBoundMs: num('DRILL_RECOVERY_BOUND_S', 30) * 1000,
    log,
    stopAfterMs: minutes * 60_000,
  })
  await new Promise((resolve) => setTimeout(resolve, minutes * 60_000))
  faults.stop()
  await faults.done
  await load.stop()
  // Its tasks deleted before quiescence, so their refunds are waited for with the others.
  await schedules.stop()
  log(`load stopped: ${load.calls.length + schedules.calls.length} calls; ${faults.faults.length} faults injected; quiescing`)

  // Whatever a failed restart left down is brought back: the checks need every replica.
  for (const proc of topology.processes) if (!proc.cli) await topology.start(proc).catch((error: unknown) => problems.push(`${proc.name} could not be restarted: ${error}`))
  topology.rpcFront.slow(undefined)
  topology.blobs.free()
  if (!topology.chainUp() || !topology.rpcFront.isUp()) await topology.startChain()
  const rest = await quiesce(topology, buyers, problems, 240_000)
  problems.push(...topology.chainProblems)
  log(
    `quiescent: ${rest.retried} purchases retried, ${rest.deleted} tasks deleted, ${rest.withdrawn} deposits withdrawn; ` +
      `payments decided in ${(rest.decidedMs / 1000).toFixed(1)} s, refunds in ${(rest.refundsMs / 1000).toFixed(1)} s`,
  )
  const scheduled = await schedules.check(problems, faults.faults)
  const faulted = (from: number, to: number) => faultOverlapping(faults.faults, from, to, graceMs) !== undefined
  const money = await checkMoney(topology, buyers, walletBase + scheduled.serviceGain, SERVICE_ADDRESS, problems, faulted)
  const verdict = judgeCalls([...load.calls, ...schedules.calls], faults.faults, graceMs, problems)
  // One Job per Run, whoever led when it was dispatched (the kubelet double saw every Job ever made).
  const jobsPerRun = new Map<string, number>()
  for (const job of topology.kube?.jobHistory() ?? []) if (job.run) jobsPerRun.set(job.run, (jobsPerRun.get(job.run) ?? 0) + 1)
  for (const [run, jobs] of jobsPerRun) if (jobs > 1) problems.push(`run ${run} got ${jobs} Jobs: one Run, one Job`)
  for (const crash of topology.crashes) {
    problems.push(
      `${crash.name} exited on its own at ${new Date(crash.at).toISOString()} (${crash.code ?? crash.signal})` +
        `${crash.restartMs !== undefined ? `, restarted in ${(crash.restartMs / 1000).toFixed(1)} s` : ''}${crash.error ? `, restart failed: ${crash.error}` : ''}; ` +
        `its last words: ${crash.tail.slice(-700).replace(/\s+/g, ' ')}`,
    )
  }
  const front = Object.entries(topology.fronts)
    .map(([name, f]) => `${name} ${f.stats.proxied} proxied, ${f.stats.skipped} refused-and-skipped, ${f.stats.unavailable} 503 (no replica), ${f.stats.reset} reset`)
    .join('; ')
  console.log(
    table(faults.faults, verdict, money, {
      fronts: front,
      'rpc front': `${topology.rpcFront.stats.proxied} answered, ${topology.rpcFront.stats.dropped} reset while down (refused connections never reach it), ${topology.rpcFront.stats.delayed} held back while slow`,
      services: topology.services === 'own' ? 'own Postgres cluster and Redis server' : 'the machine’s shared Postgres and Redis',
      'start-up': `${(startupMs / 1000).toFixed(1)} s for the whole topology`,
      restarts: topology.processes.map((proc) => `${proc.name} ${proc.restarts}`).join(', '),
      schedules:
        `${scheduled.slotsRan}/${scheduled.slotsDue} cron slots ran (${scheduled.slotsSkipped} documented skips, ${scheduled.runsLost} lost in fault windows, ` +
        `max lag ${scheduled.maxLagS.toFixed(1)} s), ${scheduled.webhookRuns} webhook runs; callbacks ${scheduled.reviews.delivered}/${scheduled.reviews.submitted} delivered, ${scheduled.reviews.repeats} retried`,
      executor:
        executor === 'kubernetes'
          ? `kubernetes (fake API server, kubelet double): ${jobsPerRun.size} runs with Jobs, ${topology.kube?.kubelet.started ?? 0} pods started, leader now ${topology.kube?.leader()?.name ?? 'none'}`
          : 'local (bubblewrap)',
      crashes: topology.crashes.length === 0 ? 'none' : topology.crashes.map((crash) => `${crash.name} (${crash.code ?? crash.signal})`).join(', '),
    }),
  )
} catch (error) {
  failed = true
  problems.push(`the drill itself failed: ${(error as Error).stack ?? error}`)
} finally {
  await topology?.stop(keep || failed || problems.length > 0).catch((error: unknown) => problems.push(`stop: ${error}`))
  await songs.close().catch(() => {})
}
for (const problem of problems) console.log(`PROBLEM ${problem}`)
console.log(`${problems.length === 0 ? 'HELD' : 'VIOLATED'}: seed ${seed}, ${minutes} min, ${problems.length} problems, ${((performance.now() - began) / 1000).toFixed(0)} s`)
process.exit(problems.length === 0 ? 0 : 1)
