// The Helm chart's topology on one machine, for the topology drill (bench/topology-drill.ts): every
// role its own `agent-gateway <role>` process from the same CLI, with the environment the chart
// gives it (charts/agent-gateway/templates/_helpers.tpl "agent-gateway.env"), on a Postgres cluster
// and a Redis server of the drill's own (own-services.ts: the faults restart them; with
// sharedServices, a throw-away database and a Redis database number on the machine's servers) and
// a separate anvil reached over CHAIN_RPC_URL through an RPC front of its own (topology-rpc-front.ts)
// like a real RPC endpoint. The shared BLOB_DIR is a small tmpfs (topology-disk.ts). The public URLs
// point at round-robin fronts (topology-front.ts), one per public service, as the chart's Ingress does.
//
// Executor: the local one (bubblewrap), with ONE controller: the kubernetes executor's Lease
// election would need the fake API server to run Jobs, which it does not; the local executor has
// no leader election, so a second local controller is opt-in (DRILL_CONTROLLERS=2) and not what
// the chart deploys (controller.replicas 1).
import { execFile, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { privateKeyToAccount } from 'viem/accounts'
import { ANVIL_ACCOUNT_0_KEY, type StartedDevChain, startDevChain } from '../../src/payments/chain/dev.ts'
import { type Db, openDb } from '../../src/platform/db/index.ts'
import type { Role } from '../../src/platform/roles.ts'
import { type CliProcess, freePort, repoRoot, startCli } from './cli.ts'
import { type OwnPostgres, type OwnRedis, startOwnPostgres, startOwnRedis } from './own-services.ts'
import { disownGroup, killGroup, killOwnedGroups, ownGroup } from './process-groups.ts'
import { openAdmin, PG_URL, REDIS_URL } from './servers.ts'
import { type BlobVolume, mountBlobVolume } from './topology-disk.ts'
import { type Backend, type Front, startFront } from './topology-front.ts'
import { type KubeDrill, startKubeForDrill } from './topology-kube.ts'
import { type RpcFront, startRpcFront } from './topology-rpc-front.ts'

export const SERVICE_KEY = ANVIL_ACCOUNT_0_KEY
export const SERVICE_ADDRESS = privateKeyToAccount(ANVIL_ACCOUNT_0_KEY).address

export interface RoleProcess {
  /** gateway-1, scheduler-api-2, controller-1, media-1, memory-1. */
  name: string
  role: Role
  /** The port of its main listener (probes, /metrics). */
  port: number
  env: Record<string, string>
  cli: CliProcess | undefined
  /** Whether it is a money role (gateway, scheduler-api, controller, memory): it reports payments and refunds. */
  takesPayments: boolean
  restarts: number
  /** Set while the drill itself kills or stops it: any other exit is a crash. */
  expectExit?: boolean
  /** Its entry in its front (when it has one): ready only between /readyz 200 and its death. */
  endpoint: Backend
}

/** A process that exited on its own (not killed or stopped by the drill), restarted as the kubelet would. */
export interface Crash {
  name: string
  at: number
  code: number | null
  signal: string | null
  /** The last lines of its output before it died. */
  tail: string
  restartMs?: number
  error?: string
}

export interface TopologyOptions {
  gateways?: number
  schedulers?: number
  controllers?: number
  memories?: number
  /** Redis database number of the drill (keys stay apart from other users of the server). */
  redisDb?: number
  /** The machine's Postgres and Redis (TEST_DATABASE_URL, TEST_REDIS_URL) instead of the drill's own: nothing can restart them. */
  sharedServices?: boolean
  /** Size of the blob volume (tmpfs), MiB; default 64. */
  blobVolumeMb?: number
  /** Connections per process (DATABASE_POOL_MAX); default 5. */
  poolMax?: number
  /**
   * 'kubernetes' (default, what the chart deploys): scheduler-api and the controllers use the
   * kubernetes executor against the fake API server with a kubelet double (topology-kube.ts), and
   * the controllers elect a leader on its Lease. 'local': bubblewrap sandboxes, no election.
   */
  executor?: 'kubernetes' | 'local'
  /** Extra environment per role (a callback receiver the reviews egress may reach, a song upstream). */
  roleEnv?: Partial<Record<Role, Record<string, string>>>
  /** Seeds the kubelet double's timings. */
  random?: () => number
  log?: (line: string) => void
}

/** max_connections of the drill's own cluster: a small server's default, which the pools must fit. */
export const OWN_MAX_CONNECTIONS = 100

export interface Topology {
  root: string
  database: { name: string; url: string }
  redisUrl: string
  redisDb: number
  /** 'own': a Postgres cluster and a Redis server of the drill's (restartable); 'shared': the machine's. */
  services: 'own' | 'shared'
  /** An admin connection to the drill's Postgres server (pg_stat_activity, pg_terminate_backend). */
  openAdmin(): Promise<Db>
  /** `pg_ctl restart -m immediate` of the own cluster (own services only). */
  restartPostgres(): Promise<void>
  /** The own Redis killed and started again on its port, empty (own services only). */
  restartRedis(): Promise<void>
  /** The shared BLOB_DIR's volume (a tmpfs when it could be mounted). */
  blobs: BlobVolume
  /** The anvil node, for the checks and the drill's block producer (past the front). */
  chain(): StartedDevChain
  nodeUrl: string
  /** The RPC front: CHAIN_RPC_URL of every money role. */
  rpcUrl: string
  rpcFront: RpcFront
  urls: { gateway: string; scheduler: string; memory: string }
  fronts: Record<'gateway' | 'scheduler' | 'memory', Front>
  processes: RoleProcess[]
  crashes: Crash[]
  /** SIGKILLs the process group of `proc` and waits for its exit. */
  kill(proc: RoleProcess): Promise<void>
  /** Starts `proc` again with the same environment and ports; resolves with the ms to ready (/readyz 200). */
  start(proc: RoleProcess): Promise<number>
  /**
   * Stops the RPC node (its state saved): the front refuses connections first and every write it
   * passed on is answered, so nothing lands after the dump. Unreachable until startChain().
   */
  stopChain(): Promise<void>
  /** Restarts the RPC node on its saved state and the same port, then opens the front; ms it took. */
  startChain(): Promise<number>
  /** Whether the node itself is up (the block producer pauses while it is not). */
  chainUp(): boolean
  /** Resolves with the ms until every process's /readyz is 200; throws after `timeoutMs`. */
  untilAllReady(timeoutMs: number): Promise<number>
  /** The fake API server and its kubelet double (executor 'kubernetes'). */
  kube: KubeDrill | undefined
  /** What the RPC node logged as errors (a restart that could not save its state first). */
  chainProblems: string[]
  stop(keep: boolean): Promise<void>
}

const execFileAsync = promisify(execFile)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `url` until it answers 200; the ms waited, or throws after `timeoutMs`. */
export async function untilReady(url: string, timeoutMs: number): Promise<number> {
  const started = performance.now()
  for (;;) {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined)
    if (res?.status === 200) return performance.now() - started
    await res?.body?.cancel().catch(() => {})
    if (performance.now() - started > timeoutMs) throw new Error(`${url} not 200 within ${timeoutMs} ms (last ${res?.status ?? 'no answer'})`)
    await sleep(200)
  }
}

/** `agent-gateway migrate` with a role's environment, as the chart's migrate Job runs it. */
async function migrateOnce(proc: RoleProcess): Promise<void> {
  const { stdout } = await execFileAsync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'migrate'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: proc.env.DATABASE_URL as string, LOG_LEVEL: 'warn' },
    timeout: 60_000,
  })
  if (!/migrations applied/.test(stdout)) throw new Error(`agent-gateway migrate said: ${stdout}`)
}

/** A memory key ring as the chart's Secret holds it: {"active": id, "keys": {id: base64 of 32 bytes}}. */
function writeKeyRing(file: string): void {
  writeFileSync(file, JSON.stringify({ active: 'drill-1', keys: { 'drill-1': randomBytes(32).toString('base64') } }), { mode: 0o600 })
}

/** The drill's Postgres and Redis: its own (restartable), or the machine's (a database and a Redis db number). */
async function openServices(shared: boolean, redisDb: number, log: (line: string) => void) {
  const dbName = `ag_topo_${randomBytes(6).toString('hex')}`
  if (shared) {
    const admin = await openAdmin()
    await admin.exec(`create database ${dbName}`)
    await admin.close()
    const dbUrl = new URL(PG_URL)
    dbUrl.pathname = `/${dbName}`
    const redisUrl = new URL(REDIS_URL)
    redisUrl.pathname = `/${redisDb}`
    return {
      dbName,
      dbUrl: dbUrl.toString(),
      redisUrl: redisUrl.toString(),
      openAdmin,
      postgres: undefined,
      redis: undefined,
      async done(keep: boolean) {
        if (keep) return log(`kept database ${dbName} on ${PG_URL}`)
        const cleanup = await openAdmin()
        await cleanup.exec(`drop database if exists ${dbName} with (force)`).finally(() => cleanup.close())
      },
    }
  }
  const postgres: OwnPostgres = await startOwnPostgres({ maxConnections: OWN_MAX_CONNECTIONS })
  let redis: OwnRedis | undefined
  try {
    await postgres.createDatabase(dbName)
    redis = await startOwnRedis()
  } catch (error) {
    await postgres.destroy()
    throw error
  }
  const ownRedis = redis
  // Whatever way this process ends, the services it started end with it.
  const onExit = () => {
    postgres.stopNow()
    void ownRedis.kill()
  }
  process.once('exit', onExit)
  return {
    dbName,
    dbUrl: postgres.url(dbName),
    redisUrl: `${ownRedis.url}/${redisDb}`,
    openAdmin: () => openDb({ kind: 'postgres', url: postgres.url('postgres'), poolMax: 1, connectTimeoutMs: 3000 }),
    postgres,
    redis: ownRedis,
    async done(keep: boolean) {
      process.off('exit', onExit)
      await ownRedis.destroy()
      if (keep) {
        await postgres.stop()
        log(`kept the own Postgres cluster (database ${dbName}) in ${postgres.root}`)
      } else await postgres.destroy()
    },
  }
}

export async function startTopology(options: TopologyOptions = {}): Promise<Topology> {
  const log = options.log ?? (() => {})
  const root = mkdtempSync(path.join(os.tmpdir(), 'agw-topology-'))
  const started: (() => Promise<void>)[] = []
  const chainProblems: string[] = []
  let services: Awaited<ReturnType<typeof openServices>> | undefined
  let volume: BlobVolume | undefined
  try {
    // --- the dependencies: Postgres, Redis, the RPC node behind its front, the blob volume ---
    const redisDb = options.redisDb ?? 9
    services = await openServices(options.sharedServices === true, redisDb, log)
    const { dbName, dbUrl, redisUrl } = services
    const chainDir = path.join(root, 'chain')
    const nodePort = await freePort()
    // The node's own complaints go to the drill's log; an error (a state it could not save before a
    // restart: blocks lost, a reorg no real node makes) is also a problem of the run.
    const say = (level: string) => (obj: object, msg?: string) => {
      const line = `RPC node ${level}: ${msg ?? ''} ${(obj as { err?: Error }).err?.message ?? ''}`.trim()
      log(line)
      if (level === 'error') chainProblems.push(line)
    }
    const chainLogger = { debug: () => {}, info: () => {}, warn: say('warn'), error: say('error') }
    let chain = await startDevChain({ dataDir: chainDir, port: nodePort, logger: chainLogger })
    let chainIsUp = true
    started.push(async () => {
      if (chainIsUp) await chain.close()
    })
    const rpcFront = await startRpcFront(chain.rpcUrl)
    started.push(() => rpcFront.close())
    const blobDir = path.join(root, 'blobs')
    mkdirSync(blobDir, { recursive: true })
    const blobVolumeMb = options.blobVolumeMb ?? 64
    volume = await mountBlobVolume(blobDir, blobVolumeMb)
    const blobs = volume
    const unmountOnExit = () => {
      if (blobs.unavailable === undefined) execFileSync('umount', ['-l', blobDir], { stdio: 'ignore' })
    }
    process.once('exit', unmountOnExit)
    started.push(async () => {
      process.off('exit', unmountOnExit)
      await blobs.unmount()
    })
    log(
      `${services.postgres ? `own Postgres :${services.postgres.port}` : 'shared Postgres'}, database ${dbName}; ` +
        `${services.redis ? 'own' : 'shared'} Redis ${redisUrl}; RPC node ${chain.rpcUrl} (anvil pid ${chain.pid}) behind the front ${rpcFront.url}; ` +
        `BLOB_DIR ${blobs.unavailable ? `a plain directory (${blobs.unavailable})` : `a ${blobVolumeMb} MiB tmpfs`}`,
    )

    // --- ports, fronts and the processes' environments ---
    const executor = options.executor ?? 'kubernetes'
    const kube = executor === 'kubernetes' ? await startKubeForDrill({ ...(options.random ? { random: options.random } : {}), log }) : undefined
    if (kube) started.push(() => kube.stop())
    // Two controllers on one Lease, as the chart's controller.replicas may; the local executor has no election.
    const count = {
      gateway: options.gateways ?? 2,
      'scheduler-api': options.schedulers ?? 2,
      controller: options.controllers ?? (kube ? 2 : 1),
      media: 1,
      memory: options.memories ?? 1,
    }
    const processes: RoleProcess[] = []
    for (const role of ['gateway', 'scheduler-api', 'controller', 'media', 'memory'] as const) {
      for (let i = 1; i <= count[role]; i += 1) {
        const port = await freePort()
        const endpoint: Backend = { name: `${role}-${i}`, port, ready: false }
        processes.push({ name: `${role}-${i}`, role, port, env: {}, cli: undefined, takesPayments: role !== 'media', restarts: 0, endpoint })
      }
    }
    const backends = (role: Role): Backend[] => processes.filter((proc) => proc.role === role).map((proc) => proc.endpoint)
    const media = backends('media')
    const fronts = {
      // The chart's Ingress routes /media of the gateway host to the media Service.
      gateway: await startFront('gateway', [
        { prefix: '/media/', backends: media },
        { prefix: '/', backends: backends('gateway') },
      ]),
      scheduler: await startFront('scheduler', [{ prefix: '/', backends: backends('scheduler-api') }]),
      memory: await startFront('memory', [{ prefix: '/', backends: backends('memory') }]),
    }
    started.push(async () => {
      await Promise.all(Object.values(fronts).map((front) => front.close()))
    })
    const urls = { gateway: fronts.gateway.url, scheduler: fronts.scheduler.url, memory: fronts.memory.url }
    const poolMax = options.poolMax ?? 5
    if (services.postgres && processes.length * poolMax > OWN_MAX_CONNECTIONS - 20) {
      throw new Error(`${processes.length} processes × DATABASE_POOL_MAX ${poolMax} do not fit max_connections ${OWN_MAX_CONNECTIONS} with room for the drill's own connections`)
    }
    const keyRing = path.join(root, 'memory-keys.json')
    writeKeyRing(keyRing)
    // The Secrets the chart shares across replicas (secrets.existingSecret, the media token, the reviews key).
    const shared = {
      MPP_SECRET_KEY: randomBytes(32).toString('hex'),
      SCHEDULER_SECRET_KEY: randomBytes(32).toString('hex'),
      OFFER_RECEIPT_SIGNING_KEY: `0x${randomBytes(32).toString('hex')}`,
      REVIEWS_SECRET_KEY: randomBytes(32).toString('hex'),
      MEDIA_INTERNAL_TOKEN: randomBytes(24).toString('hex'),
    }
    const mediaPort = (processes.find((proc) => proc.role === 'media') as RoleProcess).port
    const portVariable: Record<Role, string> = {
      gateway: 'GATEWAY_PORT',
      'scheduler-api': 'SCHEDULER_PORT',
      controller: 'CONTROLLER_PORT',
      media: 'MEDIA_PORT',
      memory: 'MEMORY_PORT',
    }
    for (const proc of processes) {
      const dataDir = path.join(root, proc.name)
      mkdirSync(dataDir, { recursive: true })
      const env: Record<string, string> = {
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        LOG_LEVEL: process.env.DRILL_LOG_LEVEL ?? 'warn',
        LOG_FORMAT: 'json',
        PUBLIC_BASE_URL: urls.gateway,
        PUBLIC_SCHEDULER_URL: urls.scheduler,
        PUBLIC_MEMORY_URL: urls.memory,
        PUBLIC_MEDIA_URL: urls.gateway,
        SHUTDOWN_GRACE_MS: '5000',
        DATABASE_URL: dbUrl,
        // 7–9 processes on one server of max_connections 100, with room for the checks and migrate.
        DATABASE_POOL_MAX: String(poolMax),
        REDIS_URL: redisUrl,
        [portVariable[proc.role]]: String(proc.port),
      }
      if (proc.takesPayments) {
        Object.assign(env, {
          PAY_TO_ADDRESS: SERVICE_ADDRESS,
          CHAIN_RPC_URL: rpcFront.url,
          // The dev chain mines on demand (and the drill's producer every 2 s): Base's 10 would take long.
          CHAIN_CONFIRMATIONS: '1',
          SETTLER_PRIVATE_KEY: SERVICE_KEY,
          MPP_SECRET_KEY: shared.MPP_SECRET_KEY,
        })
      }
      if (proc.role === 'scheduler-api' || proc.role === 'controller') {
        Object.assign(env, {
          ...(kube ? kube.env : { SCHEDULER_EXECUTOR: 'local' }),
          ...(kube && proc.role === 'controller' ? kube.controllerEnv(proc.name) : {}),
          SCHEDULER_INTERNAL_URL: urls.scheduler,
          SCHEDULER_SECRET_KEY: shared.SCHEDULER_SECRET_KEY,
          SANDBOX_MAX_PARALLEL: '2',
        })
      }
      if (proc.role !== 'memory') env.BLOB_DIR = blobDir // the shared claim (blobStore.existingClaim)
      if (proc.role === 'gateway' || proc.role === 'media') env.MEDIA_INTERNAL_TOKEN = shared.MEDIA_INTERNAL_TOKEN
      if (proc.role === 'gateway') {
        Object.assign(env, {
          MEDIA_URL: `http://127.0.0.1:${mediaPort}`,
          REVIEWS_PORT: String(await freePort()),
          REVIEWS_SECRET_KEY: shared.REVIEWS_SECRET_KEY,
          OFFER_RECEIPT_SIGNING_KEY: shared.OFFER_RECEIPT_SIGNING_KEY,
        })
      }
      if (proc.role === 'scheduler-api' || proc.role === 'memory') env.OFFER_RECEIPT_SIGNING_KEY = shared.OFFER_RECEIPT_SIGNING_KEY
      if (proc.role === 'memory') Object.assign(env, { MEMORY_KEY_FILE: keyRing, MEMORY_CACHE_MB: '64' })
      if (proc.role === 'media') Object.assign(env, { MEDIA_CONCURRENCY: '1', MEDIA_ANALYSIS_THREADS: '1' })
      Object.assign(env, options.roleEnv?.[proc.role] ?? {})
      proc.env = env
    }

    // Each process's output, kept in <root>/<name>.log (one section per life), for a failed run.
    const saveOutput = (proc: RoleProcess, cli: CliProcess, end: string) =>
      appendFileSync(path.join(root, `${proc.name}.log`), `${cli.output()}\n--- ${end} at ${new Date().toISOString()} ---\n`)
    const crashes: Crash[] = []
    const own = services
    const topology: Topology = {
      root,
      crashes,
      database: { name: dbName, url: dbUrl },
      redisUrl,
      redisDb,
      services: own.postgres ? 'own' : 'shared',
      openAdmin: own.openAdmin,
      async restartPostgres() {
        if (!own.postgres) throw new Error('the shared Postgres is not restarted by the drill')
        await own.postgres.restartImmediate()
      },
      async restartRedis() {
        if (!own.redis) throw new Error('the shared Redis is not restarted by the drill')
        await own.redis.restart()
      },
      blobs,
      chain: () => chain,
      nodeUrl: chain.rpcUrl,
      rpcUrl: rpcFront.url,
      rpcFront,
      urls,
      fronts,
      processes,
      async kill(proc) {
        const cli = proc.cli
        if (!cli) return
        const pgid = cli.child.pid as number
        proc.expectExit = true
        // Out of its front at once (as the Endpoints controller drops a dead pod; a request already routed to it is refused and skipped).
        killGroup(pgid)
        proc.endpoint.ready = false
        await cli.stop('SIGKILL')
        disownGroup(pgid)
        saveOutput(proc, cli, 'killed')
        proc.cli = undefined
      },
      async start(proc) {
        const begun = performance.now()
        const cli = await startCli({ args: [proc.role], env: proc.env, detached: true, readyTimeoutMs: 120_000 })
        ownGroup(cli.child.pid as number)
        proc.cli = cli
        proc.expectExit = false
        cli.child.once('exit', (code, signal) => {
          if (proc.expectExit || proc.cli !== cli) return
          // Died on its own: recorded, and restarted with the same environment (restartPolicy: Always).
          const crash: Crash = { name: proc.name, at: Date.now(), code, signal, tail: cli.output().slice(-1500) }
          crashes.push(crash)
          proc.endpoint.ready = false
          saveOutput(proc, cli, `crashed (${code ?? signal})`)
          disownGroup(cli.child.pid as number)
          killGroup(cli.child.pid as number)
          proc.cli = undefined
          log(`${proc.name} exited on its own (${code ?? signal}); restarting it`)
          void sleep(1_000)
            .then(() => topology.start(proc))
            .then(
              (ms) => {
                crash.restartMs = ms
                proc.restarts += 1
              },
              (error: unknown) => {
                crash.error = String(error).slice(0, 500)
              },
            )
        })
        await untilReady(`http://127.0.0.1:${proc.port}/readyz`, 60_000)
        proc.endpoint.ready = true
        return performance.now() - begun
      },
      async stopChain() {
        await rpcFront.down('refuse')
        chainIsUp = false
        await chain.close()
      },
      async startChain() {
        const begun = performance.now()
        if (!chainIsUp) chain = await startDevChain({ dataDir: chainDir, port: nodePort, logger: chainLogger })
        chainIsUp = true
        await rpcFront.up()
        return performance.now() - begun
      },
      chainUp: () => chainIsUp,
      kube,
      chainProblems,
      async untilAllReady(timeoutMs) {
        const begun = performance.now()
        await Promise.all(processes.map((proc) => untilReady(`http://127.0.0.1:${proc.port}/readyz`, timeoutMs)))
        return performance.now() - begun
      },
      async stop(keep) {
        // Gracefully first (SIGTERM, as a rollout does), then whatever is left, then the dependencies.
        await Promise.all(
          processes.map(async (proc) => {
            const cli = proc.cli
            if (!cli) return
            const pgid = cli.child.pid as number
            proc.expectExit = true
            const code = await Promise.race([cli.stop('SIGTERM'), sleep(15_000).then(() => 'timeout' as const)])
            if (code === 'timeout') log(`${proc.name} did not stop within 15 s of SIGTERM; killed`)
            killGroup(pgid)
            disownGroup(pgid)
            saveOutput(proc, cli, `stopped (${code})`)
            proc.cli = undefined
          }),
        )
        for (const done of started.reverse()) await done().catch(() => {})
        await own.done(keep)
        if (!keep) rmSync(root, { recursive: true, force: true })
        else log(`kept ${root}`)
      },
    }
    // The chart's migrate hook (a Job running `agent-gateway migrate`) first, then every role at
    // once, as a fresh install rolls out.
    await migrateOnce(processes[0] as RoleProcess)
    // A process that fails its first start is recorded as a crash and started again, as the kubelet
    // restarts a container whose start-up failed.
    const times = await Promise.all(
      processes.map((proc) =>
        topology.start(proc).catch(async (error: unknown) => {
          const crash: Crash = { name: proc.name, at: Date.now(), code: 1, signal: null, tail: String((error as Error).message ?? error).slice(-1500) }
          crashes.push(crash)
          log(`${proc.name} failed its first start; starting it again`)
          await sleep(1_000)
          const ms = await topology.start(proc)
          proc.restarts += 1
          crash.restartMs = ms
          return ms
        }),
      ),
    )
    log(`topology ready: ${processes.map((proc, i) => `${proc.name} ${((times[i] as number) / 1000).toFixed(1)} s`).join(', ')}`)
    return topology
  } catch (error) {
    for (const done of started.reverse()) await done().catch(() => {})
    killOwnedGroups()
    // The start failed: nothing of it is kept (its error says why).
    await services?.done(false).catch(() => {})
    await volume?.unmount().catch(() => {})
    rmSync(root, { recursive: true, force: true })
    throw error
  }
}
