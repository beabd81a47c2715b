// The same CLI on both data backends: the embedded default keeps its data across a restart, and
// with DATABASE_URL / REDIS_URL it runs on the real Postgres and Redis.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { repoRoot, startCli } from '../helpers/cli.ts'
import { reachableRedis, throwawayDatabase } from '../helpers/servers.ts'

function migrate(env: Record<string, string>): string {
  const result = spawnSync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'migrate'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
  })
  if (result.status !== 0) throw new Error(`migrate failed: ${result.stderr}`)
  return result.stdout
}

t.test('embedded default: PGlite data survives a restart', async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-modes-'))
  const first = migrate({ DATA_DIR: dataDir })
  t.match(first, /migrations applied: [1-9]/, 'first start applies the migrations')
  t.match(migrate({ DATA_DIR: dataDir }), /migrations applied: 0/, 'a restart finds them applied')
  const cli = await startCli({ dataDir })
  t.teardown(() => cli.stop('SIGKILL'))
  t.match(cli.output(), /database pglite, kv memory/)
  t.equal((await fetch(`${cli.gateway}/readyz`)).status, 200)
  t.equal(await cli.stop(), 0)
  const again = await startCli({ dataDir })
  t.teardown(() => again.stop('SIGKILL'))
  t.equal((await fetch(`${again.gateway}/readyz`)).status, 200, 'restarts on the same data directory')
  t.equal(await again.stop(), 0)
})

t.test('the CLI runs with its V8 flags however it is started, in the same process', async (t) => {
  // startCli runs `node bin/agent-gateway.js` with no flags: the launcher re-executes itself with them.
  const cli = await startCli({ args: ['gateway'] })
  t.teardown(() => cli.stop('SIGKILL'))
  const argv = readFileSync(`/proc/${cli.child.pid}/cmdline`, 'utf8').split('\0')
  t.ok(argv.includes('--no-memory-reducer'), `the serving process (pid ${cli.child.pid}, the one started) runs with --no-memory-reducer: ${argv.join(' ')}`)
  t.equal(argv.filter((arg) => arg === '--no-memory-reducer').length, 1, 'once')
  t.equal((await fetch(`${cli.gateway}/readyz`)).status, 200)
  t.equal(await cli.stop(), 0, 'SIGTERM reaches it and it exits cleanly')
})

t.test('one process per embedded data directory; the lock of a crashed owner is taken over', async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-lock-'))
  const first = await startCli({ dataDir })
  t.teardown(() => first.stop('SIGKILL'))
  const second = spawnSync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'serve'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir, GATEWAY_PORT: '0', SCHEDULER_PORT: '0', MEMORY_PORT: '0', REVIEWS_PORT: '0' },
    encoding: 'utf8',
  })
  t.equal(second.status, 1, 'a second process on the same DATA_DIR refuses to start')
  t.match(second.stderr, new RegExp(`in use by process ${first.child.pid}`))
  await first.stop('SIGKILL')
  const third = await startCli({ dataDir })
  t.teardown(() => third.stop('SIGKILL'))
  t.equal((await fetch(`${third.gateway}/readyz`)).status, 200, 'the lock of a killed process is taken over')
  t.equal(await third.stop(), 0)
})

t.test('DATABASE_URL and REDIS_URL: the same code on real Postgres and Redis', async (t) => {
  const databaseUrl = await throwawayDatabase(t)
  if (!databaseUrl) return
  const redisUrl = await reachableRedis(t)
  if (!redisUrl) return
  t.match(migrate({ DATABASE_URL: databaseUrl }), /migrations applied: [1-9]/)
  t.match(migrate({ DATABASE_URL: databaseUrl }), /migrations applied: 0/, 'recorded in Postgres')
  const cli = await startCli({ env: { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl } })
  t.teardown(() => cli.stop('SIGKILL'))
  t.match(cli.output(), /database postgres, kv redis/)
  const ready = (await (await fetch(`${cli.scheduler}/readyz`)).json()) as { checks: Record<string, boolean> }
  // (plus `executor`, the local sandbox's prerequisites: true where bwrap works)
  t.match(ready.checks, { database: true, kv: true })
  const doc = await fetch(`${cli.gateway}/openapi.json?q=song`)
  t.equal(doc.status, 200)
  t.equal(await cli.stop(), 0)
})

t.test('a bad variable stops start-up with its name', async (t) => {
  const result = spawnSync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'serve'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', GATEWAY_PORT: 'eighty' },
    encoding: 'utf8',
  })
  t.equal(result.status, 78)
  t.match(result.stderr, /GATEWAY_PORT/)
})
