// What `npm start` prints, on a terminal and piped: the real CLI under a pseudo-terminal
// (util-linux `script`) writes readable log lines; piped (a container, a log shipper) pino's JSON
// lines; LOG_FORMAT=json|pretty overrides either way.
import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { freePort, repoRoot, startCli } from '../helpers/cli.ts'

const hasScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).status === 0
const BIN = path.join(repoRoot, 'bin/agent-gateway.js')

/** The text without its ANSI colour codes (ESC [ n m). */
const uncoloured = (text: string) =>
  text
    .split('\u001b[')
    .map((part, i) => (i === 0 ? part : part.replace(/^\d+m/, '')))
    .join('')

/** Runs the CLI on a pseudo-terminal until `until` shows in its output (or it exits); then Ctrl-C, as a person stops it. */
function onTerminal(args: string[], env: Record<string, string>, until: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const command = [process.execPath, BIN, ...args].map((word) => `'${word}'`).join(' ')
    const child = spawn('script', ['-qefc', command, '/dev/null'], { cwd: repoRoot, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true })
    let output = ''
    let stopped = false
    const timer = setTimeout(() => {
      process.kill(-(child.pid ?? 0), 'SIGKILL')
      reject(new Error(`timed out:\n${output}`))
    }, 90_000)
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      if (!stopped && until.test(output)) {
        stopped = true
        child.stdin.write('\u0003') // the terminal turns it into SIGINT for the CLI: a clean stop
      }
    }
    child.stdout.on('data', onData)
    child.stderr.on('data', onData)
    child.once('error', reject)
    child.once('close', () => {
      clearTimeout(timer)
      resolve(uncoloured(output.replaceAll('\r\n', '\n')))
    })
  })
}

/** The environment of a start that fails at once, with a fatal log line: the media role alone, without its token. */
async function failingStart(extra: Record<string, string> = {}): Promise<Record<string, string>> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    DATA_DIR: mkdtempSync(path.join(os.tmpdir(), 'agw-logs-')),
    MEDIA_PORT: String(await freePort()),
    TERM: 'dumb',
    ...extra,
  }
}

t.test('on a terminal, `serve` logs readable lines, not JSON', { skip: hasScript ? false : 'util-linux `script` is not installed' }, async (t) => {
  const ports = { GATEWAY_PORT: await freePort(), SCHEDULER_PORT: await freePort(), MEMORY_PORT: await freePort(), REVIEWS_PORT: await freePort() }
  const env = {
    ...(await failingStart()),
    ...Object.fromEntries(Object.entries(ports).map(([name, port]) => [name, String(port)])),
    LOG_LEVEL: 'info',
  }
  const output = await onTerminal(['serve'], env, /^agent-gateway ready \(/m)
  t.match(output, /^\d\d:\d\d:\d\d\.\d{3} INFO {2}agent-gateway ready roles=\[/m, 'the ready log line is readable')
  t.notMatch(output, /^\{"level"/m, 'no JSON line')
})

t.test('a fatal start-up error on a terminal: readable; piped: JSON; LOG_FORMAT overrides', { skip: hasScript ? false : 'util-linux `script` is not installed' }, async (t) => {
  const pretty = await onTerminal(['media'], await failingStart(), /start-up failed: /)
  t.match(pretty, /^\d\d:\d\d:\d\d\.\d{3} FATAL start-up failed err="ConfigError: Invalid configuration: MEDIA_INTERNAL_TOKEN/m)
  t.match(pretty, /^ {8}at /m, 'its stack indented below')
  t.notMatch(pretty, /^\{"level"/m)
  const json = await onTerminal(['media'], await failingStart({ LOG_FORMAT: 'json' }), /start-up failed: /)
  t.match(json, /^\{"level":60,.*"msg":"start-up failed"\}$/m, 'LOG_FORMAT=json on a terminal')

  const piped = spawnSync(process.execPath, [BIN, 'media'], { cwd: repoRoot, env: await failingStart(), encoding: 'utf8', timeout: 60_000 })
  t.match(piped.stdout, /^\{"level":60,.*"msg":"start-up failed"\}$/m, 'piped: JSON')
  const forced = spawnSync(process.execPath, [BIN, 'media'], { cwd: repoRoot, env: await failingStart({ LOG_FORMAT: 'pretty' }), encoding: 'utf8', timeout: 60_000 })
  t.match(forced.stdout, /^\d\d:\d\d:\d\d\.\d{3} FATAL start-up failed /m, 'LOG_FORMAT=pretty when piped, without colours')
})

t.test('piped (as the tests and a container run it), `serve` logs JSON', async (t) => {
  const cli = await startCli({ env: { LOG_LEVEL: 'info' } })
  t.teardown(() => cli.stop('SIGKILL'))
  // pino writes its JSON lines to stdout asynchronously: the ready line may follow the plain one.
  const ready = /^\{"level":30,.*"msg":"agent-gateway ready"\}$/m
  for (let waited = 0; !ready.test(cli.output()) && waited < 10_000; waited += 100) await new Promise((resolve) => setTimeout(resolve, 100))
  t.match(cli.output(), ready)
  t.notMatch(cli.output(), /^\d\d:\d\d:\d\d\.\d{3} INFO/m, 'no readable lines')
})
