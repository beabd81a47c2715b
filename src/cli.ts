// The `agent-gateway` command line. One binary, every role.
// Only what every command needs is imported here: --help, --version, `config` and a mistyped
// command answer without loading the logger, tracing or the composition root (src/runtime.ts),
// which are imported when a command needs them.
import { flushCompileCache } from 'node:module'
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { readFileSync } from 'node:fs'
import { ConfigError, configTable, loadConfig } from './platform/config.ts'
import { isRole, ROLES, type Role } from './platform/roles.ts'

const USAGE = `agent-gateway: pay-per-request gateway, scheduler, job runner and memory service for AI agents

Usage:
  agent-gateway serve [ROLE...]   run the given roles in one process (no role = all roles)
  agent-gateway ROLE              same as \`serve ROLE\`
  agent-gateway migrate           apply database migrations and exit
  agent-gateway config            print the configuration variables and their defaults
  agent-gateway demo [--gateway URL] [--scheduler URL] [--memory URL]
                                  show the whole product against a running server, as an agent
                                  would use it: a throwaway wallet, a plan, a review, a paid task run
                                  and its refund, a song, a memory round trip (docs/demo.md)
  agent-gateway memory rotate-key [--to KEK_ID]
                                  re-wrap every memory owner's data key under a new key-encryption
                                  key: without --to, a new key is generated into the key ring file
                                  (the embedded default's); with --to, KEK_ID must already be in the
                                  ring (a mounted Secret). Records are not re-encrypted; replicas keep
                                  serving (with PGlite, stop the server first: it holds DATA_DIR)
  agent-gateway --help | --version

Roles: ${ROLES.join(', ')}
  gateway        {base_url}: discovery, payments, plans, reviews, songs, speech (GATEWAY_PORT);
                 review sites on their own isolated origin (REVIEWS_PORT)
  scheduler-api  {scheduler_url}: tasks, runs, ledger, accounts, webhooks (SCHEDULER_PORT)
  controller     reconciles Task/Run resources into sandboxed runs (probes on CONTROLLER_PORT alone)
  media          song/speech generation and DSP (probes on MEDIA_PORT alone)
  memory         remember / recall / expand / deposits (MEMORY_PORT)

Without DATABASE_URL data lives in PGlite under DATA_DIR; without REDIS_URL an in-process
substitute stands in for Redis. Configuration comes from the environment:

${configTable()}
`

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
  return pkg.version
}

/** When the start-up garbage is collected: ms after ready, then ms after the first pass (src/platform/heap.ts). */
const STARTUP_GC_DELAYS_MS = [1000, 1000]

const parseCommandLine = (argv: string[]) =>
  parseArgs({ args: argv, allowPositionals: true, options: { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' }, to: { type: 'string' } } })

export async function main(argv: string[]): Promise<number> {
  // The demo is a client of a running server with its own options (src/demo).
  if (argv[0] === 'demo') return (await import('./demo/index.ts')).runDemo(argv.slice(1))
  let parsed: ReturnType<typeof parseCommandLine>
  try {
    parsed = parseCommandLine(argv)
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}`)
    return 2
  }
  if (parsed.values.help) {
    process.stdout.write(USAGE)
    return 0
  }
  if (parsed.values.version) {
    process.stdout.write(`${version()}\n`)
    return 0
  }
  const [command = 'serve', ...rest] = parsed.positionals
  if (command === 'config') {
    process.stdout.write(`${configTable()}\n`)
    return 0
  }
  if (command === 'memory') return memoryCommand(rest, parsed.values.to)
  const roleArgs = command === 'serve' ? rest : command === 'migrate' ? [] : [command, ...rest]
  const unknown = roleArgs.filter((role) => !isRole(role))
  if (command !== 'serve' && command !== 'migrate' && !isRole(command)) {
    process.stderr.write(`Unknown command "${command}".\n\n${USAGE}`)
    return 2
  }
  if (unknown.length > 0) {
    process.stderr.write(`Unknown role "${unknown[0]}"; roles are ${ROLES.join(', ')}.\n`)
    return 2
  }

  const config = configOrExitCode()
  if (typeof config === 'number') return config
  const { createLogger } = await import('./platform/logger.ts')
  const logger = createLogger(config.logLevel)
  // Tracing first: the instrumentations patch http and pg as those modules load. Off (and not
  // loaded) without an OTLP endpoint.
  const tracing = config.otlpEndpoint
    ? await (await import('./platform/tracing.ts')).startTracing({ otlpEndpoint: config.otlpEndpoint, serviceName: config.serviceName })
    : undefined
  if (command === 'migrate') {
    // The database alone: the roles are not loaded for it.
    const [{ migrate, migrationsDir }, { openPlatformDb }] = await Promise.all([import('./platform/db/migrate.ts'), import('./platform/db/open.ts')])
    const db = await openPlatformDb(config)
    try {
      const applied = await migrate(db, migrationsDir)
      process.stdout.write(`migrations applied: ${Array.isArray(applied) ? applied.length : 'done'}\n`)
    } finally {
      await db.close()
    }
    return 0
  }

  const [runtime, heap] = await Promise.all([import('./runtime.ts'), import('./platform/heap.ts')])
  const roles = (roleArgs.length > 0 ? [...new Set(roleArgs)] : [...ROLES]) as Role[]
  let running: Awaited<ReturnType<typeof runtime.start>>
  try {
    running = await runtime.start(config, roles, logger)
  } catch (error) {
    logger.fatal({ err: error }, 'start-up failed')
    process.stderr.write(`agent-gateway: start-up failed: ${(error as Error).message}\n`)
    await tracing?.shutdown()
    return 1
  }
  for (const listener of running.listeners) {
    const publicUrl =
      listener.name === 'gateway'
        ? config.publicBaseUrl
        : listener.name === 'scheduler'
          ? config.publicSchedulerUrl
          : listener.name === 'memory'
            ? config.publicMemoryUrl
            : listener.url
    process.stdout.write(`${listener.name.padEnd(10)} ${listener.url}${publicUrl !== listener.url ? `  (public ${publicUrl})` : ''}\n`)
  }
  // startup: ms per phase of runtime.start; processMs: since this process began (after the launcher's re-exec).
  const processMs = Math.round(performance.now())
  logger.info(
    {
      roles,
      listeners: running.listeners.map((l) => ({ name: l.name, url: l.url })),
      database: running.db.kind,
      kv: running.kv.kind,
      startup: running.startup,
      startupRssMb: running.startupRssMb,
      processMs,
    },
    'agent-gateway ready',
  )
  process.stdout.write(`agent-gateway ready (${roles.join(', ')}; database ${running.db.kind}, kv ${running.kv.kind})\n`)
  // Once the start's background work (recovery, reconciliation, tool checks) has begun: what
  // start-up left behind is freed (src/platform/heap.ts; a second pass releases what the first
  // finalized), and the modules this start compiled are written to node's compile cache (enabled
  // by the launcher) rather than at exit, so the next start reuses them even if this one is
  // killed. Neither runs right after ready, where the first requests come.
  const rssAtReady = process.memoryUsage.rss()
  const afterStart = (pass: number) => {
    const started = performance.now()
    heap.collectGarbage()
    if (pass < STARTUP_GC_DELAYS_MS.length) {
      setTimeout(() => afterStart(pass + 1), STARTUP_GC_DELAYS_MS[pass]).unref()
      return
    }
    const gcMs = Math.round(performance.now() - started)
    flushCompileCache()
    logger.debug(
      { rssAtReadyMb: Math.round(rssAtReady / 2 ** 20), memoryMb: heap.memoryMb(), gcMs, flushMs: Math.round(performance.now() - started) - gcMs },
      'start-up garbage collected',
    )
  }
  setTimeout(() => afterStart(1), STARTUP_GC_DELAYS_MS[0]).unref()

  return await new Promise<number>((resolve) => {
    let signalled = false
    const shutdown = (signal: NodeJS.Signals) => {
      if (signalled) return
      signalled = true
      logger.info({ signal }, 'shutting down: draining in-flight requests')
      const force = setTimeout(() => {
        logger.error({ graceMs: config.shutdownGraceMs }, 'shutdown grace period elapsed; exiting')
        resolve(1)
      }, config.shutdownGraceMs)
      force.unref()
      running
        .stop()
        .then(() => tracing?.shutdown())
        .then(() => {
          clearTimeout(force)
          logger.info('stopped')
          resolve(0)
        })
        .catch((error: unknown) => {
          logger.error({ err: error }, 'error while stopping')
          resolve(1)
        })
    }
    process.once('SIGTERM', shutdown)
    process.once('SIGINT', shutdown)
  })
}

/** `agent-gateway memory rotate-key [--to KEK_ID]`: see USAGE and docs/memory.md "Keys". */
async function memoryCommand(args: string[], to: string | undefined): Promise<number> {
  if (args[0] !== 'rotate-key' || args.length !== 1) {
    process.stderr.write(`Unknown memory command "${args.join(' ')}"; try: agent-gateway memory rotate-key [--to KEK_ID]\n`)
    return 2
  }
  const config = configOrExitCode()
  if (typeof config === 'number') return config
  const { openPlatformDb } = await import('./platform/db/open.ts')
  const { migrate, migrationsDir } = await import('./platform/db/migrate.ts')
  const { rotateKek } = await import('./memory/crypto/rotate.ts')
  const { addKeyToRingFile, EMBEDDED_RING_FILE } = await import('./memory/crypto/keyring.ts')
  const { openKeyRing } = await import('./memory/role.ts')
  const path = await import('node:path')
  let db: Awaited<ReturnType<typeof openPlatformDb>>
  try {
    db = await openPlatformDb(config)
  } catch (error) {
    process.stderr.write(`agent-gateway memory rotate-key: cannot open the database: ${(error as Error).message}\n`)
    return 1
  }
  try {
    await migrate(db, migrationsDir)
    const ringFile = config.memoryKeyFile ?? path.join(config.dataDir, EMBEDDED_RING_FILE)
    const ring = await openKeyRing(config)
    let target = to
    if (target === undefined) {
      target = await addKeyToRingFile(ringFile, { makeActive: true })
      await ring.reload()
      process.stdout.write(`generated key-encryption key ${target} in ${ringFile}\n`)
    }
    const result = await rotateKek({
      db,
      ring,
      toKekId: target,
      onProgress: ({ rewrapped }) => {
        process.stdout.write(`  rewrapped ${rewrapped} data keys\n`)
      },
    })
    process.stdout.write(`active key-encryption key: ${target}; rewrapped ${result.rewrapped}, already current ${result.alreadyCurrent}\n`)
    return 0
  } catch (error) {
    process.stderr.write(`agent-gateway memory rotate-key: ${(error as Error).message}\n`)
    return 1
  } finally {
    await db.close()
  }
}

/** The configuration, or the exit code after saying which variable is wrong (78, EX_CONFIG). */
function configOrExitCode(): ReturnType<typeof loadConfig> | number {
  try {
    return loadConfig()
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`)
      return 78
    }
    throw error
  }
}
