// The `agent-gateway` command line. One binary, every role.
// Only what every command needs is imported here: help, --version, `config` and a mistyped
// command answer without loading the logger, tracing or the composition root (src/runtime.ts),
// which are imported when a command needs them. The help texts are in src/cli/help.ts; `demo` and
// `pay` are clients of a running server (src/demo, src/cli/pay.ts).
import { flushCompileCache } from 'node:module'
import { performance } from 'node:perf_hooks'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { readFileSync } from 'node:fs'
import { ConfigError, configTable, loadConfig } from './platform/config.ts'
import { isRole, ROLES, type Role } from './platform/roles.ts'
import { helpOf, INDEX } from './cli/help.ts'

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
  return pkg.version
}

/** When the start-up garbage is collected: ms after ready, then ms after the first pass (src/platform/heap.ts). */
const STARTUP_GC_DELAYS_MS = [1000, 1000]

const HELP_OPTION = { help: { type: 'boolean', short: 'h' } } as const

/**
 * A command's own arguments: its options and positionals, or, for `--help`, its help printed; a
 * bad option is said on stderr with where its help is (exit 2).
 */
function commandArgs<O extends NonNullable<ParseArgsConfig['options']>>(
  words: string[],
  argv: string[],
  options: O,
  positionals: boolean,
): { values: Record<string, string | boolean | undefined>; positionals: string[] } | number {
  let parsed: { values: Record<string, string | boolean | (string | boolean)[] | undefined>; positionals: string[] }
  try {
    parsed = parseArgs({ args: argv, allowPositionals: positionals, strict: true, options: { ...HELP_OPTION, ...options } })
  } catch (error) {
    process.stderr.write(`agent-gateway ${words.join(' ')}: ${(error as Error).message}\nSee \`agent-gateway ${words.join(' ')} --help\`.\n`)
    return 2
  }
  if (parsed.values.help) {
    process.stdout.write(helpOf(words) ?? INDEX)
    return 0
  }
  return parsed as { values: Record<string, string | boolean | undefined>; positionals: string[] }
}

function unknownCommand(command: string): number {
  process.stderr.write(`Unknown command "${command}". \`agent-gateway help\` lists the commands.\n`)
  return 2
}

/** `agent-gateway help [COMMAND]`. */
function helpCommand(words: string[]): number {
  const text = words.length === 1 && (words[0] === '--help' || words[0] === '-h') ? helpOf(['help']) : helpOf(words)
  if (text === undefined) return unknownCommand(words.join(' '))
  process.stdout.write(text)
  return 0
}

export async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv
  if (first === undefined) return await serve([])
  if (first === '--help' || first === '-h') return helpCommand(rest)
  if (first === '--version' || first === '-v') {
    process.stdout.write(`${version()}\n`)
    return 0
  }
  switch (first) {
    case 'help':
      return helpCommand(rest)
    // The demo and pay are clients of a running server, with options of their own.
    case 'demo':
      return (await import('./demo/index.ts')).runDemo(rest)
    case 'pay':
      return (await import('./cli/pay.ts')).runPay(rest)
    case 'config': {
      const args = commandArgs(['config'], rest, {}, false)
      if (typeof args === 'number') return args
      process.stdout.write(`${configTable()}\n`)
      return 0
    }
    case 'migrate': {
      const args = commandArgs(['migrate'], rest, {}, false)
      return typeof args === 'number' ? args : await migrateCommand()
    }
    case 'serve': {
      const args = commandArgs(['serve'], rest, {}, true)
      return typeof args === 'number' ? args : await serve(args.positionals)
    }
  }
  // `memory rotate-key`; otherwise `memory` is the role, like the others.
  if (first === 'memory' && rest[0] === 'rotate-key') {
    const args = commandArgs(['memory', 'rotate-key'], rest.slice(1), { to: { type: 'string' } }, false)
    return typeof args === 'number' ? args : await rotateKeyCommand(args.values.to as string | undefined)
  }
  if (isRole(first)) {
    const args = commandArgs([first], rest, {}, true)
    return typeof args === 'number' ? args : await serve([first, ...args.positionals])
  }
  if (first.startsWith('-')) {
    process.stderr.write(`Unknown option "${first}". \`agent-gateway help\` lists the commands.\n`)
    return 2
  }
  return unknownCommand(first)
}

/** `agent-gateway migrate`: the database alone (the roles are not loaded for it). */
async function migrateCommand(): Promise<number> {
  const config = configOrExitCode()
  if (typeof config === 'number') return config
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

/** `agent-gateway serve [ROLE...]` and `agent-gateway ROLE...`: runs until SIGTERM or SIGINT. */
async function serve(roleArgs: string[]): Promise<number> {
  const unknown = roleArgs.filter((role) => !isRole(role))
  if (unknown.length > 0) {
    process.stderr.write(`Unknown role "${unknown[0]}"; roles are ${ROLES.join(', ')}.\n`)
    return 2
  }
  const config = configOrExitCode()
  if (typeof config === 'number') return config
  const { createProcessLogger } = await import('./platform/logger.ts')
  // Readable lines on a terminal, JSON lines otherwise (LOG_FORMAT overrides).
  const logger = createProcessLogger(config.logLevel, config.logFormat)
  // Tracing first: the instrumentations patch http and pg as those modules load. Off (and not
  // loaded) without an OTLP endpoint.
  const tracing = config.otlpEndpoint
    ? await (await import('./platform/tracing.ts')).startTracing({ otlpEndpoint: config.otlpEndpoint, serviceName: config.serviceName })
    : undefined
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

/** `agent-gateway memory rotate-key [--to KEK_ID]`: see its help (src/cli/help.ts) and docs/memory.md "Keys". */
async function rotateKeyCommand(to: string | undefined): Promise<number> {
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
