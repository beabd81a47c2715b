// Logs for people and for machines: on a terminal the CLI writes readable lines (time, level,
// message, then the fields), anywhere else pino's JSON lines; LOG_FORMAT=json|pretty overrides.
// Redaction holds in both.
import t from 'tap'
import { ConfigError, loadConfig } from '../../src/platform/config.ts'
import { createProcessLogger, formatLogLine, logFormatFor } from '../../src/platform/logger.ts'

/** A stand-in for process.stdout: what was written, and whether it is a terminal. */
function terminal(isTTY: boolean): { isTTY: boolean; text: string; write(chunk: string): boolean } {
  return {
    isTTY,
    text: '',
    write(chunk: string) {
      this.text += chunk
      return true
    },
  }
}

/** The text without its ANSI colour codes (ESC [ n m). */
const uncoloured = (text: string) =>
  text
    .split('\u001b[')
    .map((part, i) => (i === 0 ? part : part.replace(/^\d+m/, '')))
    .join('')

t.test('LOG_FORMAT: unset, json or pretty; anything else stops start-up naming it', async (t) => {
  t.equal(loadConfig({}).logFormat, undefined)
  t.equal(loadConfig({ LOG_FORMAT: 'json' }).logFormat, 'json')
  t.equal(loadConfig({ LOG_FORMAT: 'pretty' }).logFormat, 'pretty')
  t.throws(() => loadConfig({ LOG_FORMAT: 'xml' }), ConfigError)
  t.throws(() => loadConfig({ LOG_FORMAT: 'xml' }), /LOG_FORMAT must be json or pretty/)
})

t.test('the format: pretty on a terminal, JSON otherwise, unless LOG_FORMAT says', async (t) => {
  t.equal(logFormatFor(undefined, { isTTY: true }), 'pretty')
  t.equal(logFormatFor(undefined, { isTTY: false }), 'json')
  t.equal(logFormatFor(undefined, {}), 'json')
  t.equal(logFormatFor('json', { isTTY: true }), 'json')
  t.equal(logFormatFor('pretty', { isTTY: false }), 'pretty')
})

t.test('a readable line: local time, level, message, then the fields as key=value', async (t) => {
  const time = '2026-01-02T03:04:05.678Z'
  const local = new Date(time)
  const hhmmss = [local.getHours(), local.getMinutes(), local.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':')
  const line = formatLogLine(
    JSON.stringify({ level: 30, time, service: 'agent-gateway', msg: 'agent-gateway ready', roles: ['gateway', 'memory'], database: 'pglite', startupMs: 812, note: 'two words' }),
  )
  t.equal(line, `${hhmmss}.678 INFO  agent-gateway ready roles=["gateway","memory"] database=pglite startupMs=812 note="two words"\n`)
  t.match(formatLogLine(JSON.stringify({ level: 40, time, msg: 'careful' })), / WARN {2}careful\n$/)
  t.match(formatLogLine(JSON.stringify({ level: 50, time, msg: 'x', req: { method: 'GET', url: '/a' } })), / ERROR x req=\{"method":"GET","url":"\/a"\}\n$/)
})

t.test('an error: its type and message on the line, its stack indented below', async (t) => {
  const err = { type: 'Error', message: 'boom', stack: 'Error: boom\n    at main (src/cli.ts:1:1)' }
  const line = formatLogLine(JSON.stringify({ level: 60, time: '2026-01-02T03:04:05.678Z', msg: 'start-up failed', err, variable: 'X' }))
  t.match(line, /FATAL start-up failed err="Error: boom" variable=X\n {4}Error: boom\n {8}at main \(src\/cli\.ts:1:1\)\n$/)
})

t.test('colours only on a terminal without NO_COLOR; what is not JSON passes as it is', async (t) => {
  const record = JSON.stringify({ level: 50, time: '2026-01-02T03:04:05.678Z', msg: 'bad' })
  t.match(formatLogLine(record, { color: true }), '\u001b[31mERROR\u001b[39m')
  t.notMatch(formatLogLine(record), '\u001b[')
  t.equal(formatLogLine('not json at all\n'), 'not json at all\n')
})

t.test('the process logger writes what the terminal and LOG_FORMAT ask, and still redacts', async (t) => {
  const headers = { authorization: 'Bearer agw_secret_token' }
  const tty = terminal(true)
  createProcessLogger('info', undefined, tty, {}).info({ req: { headers } }, 'hello')
  t.match(uncoloured(tty.text), / INFO {2}hello req=/, 'readable on a terminal')
  t.notMatch(tty.text, /^\{/m, 'no JSON line')
  t.notMatch(tty.text, /agw_secret_token/, 'redacted')
  t.match(tty.text, /\[redacted\]/)
  t.match(tty.text, '\u001b[32mINFO \u001b[39m', 'coloured')

  const noColor = terminal(true)
  createProcessLogger('info', undefined, noColor, { NO_COLOR: '1' }).info('plain')
  t.notMatch(noColor.text, '\u001b[', 'NO_COLOR turns colours off')

  const pipe = terminal(false)
  createProcessLogger('info', undefined, pipe, {}).info({ req: { headers } }, 'hello')
  t.match(JSON.parse(pipe.text), { level: 30, msg: 'hello', service: 'agent-gateway', req: { headers: { authorization: '[redacted]' } } }, 'JSON when piped')

  const forcedJson = terminal(true)
  createProcessLogger('info', 'json', forcedJson, {}).info('hello')
  t.match(JSON.parse(forcedJson.text), { msg: 'hello' }, 'LOG_FORMAT=json on a terminal')

  const forcedPretty = terminal(false)
  createProcessLogger('info', 'pretty', forcedPretty, {}).info('hello')
  t.match(forcedPretty.text, / INFO {2}hello\n$/, 'LOG_FORMAT=pretty when piped')
  t.notMatch(forcedPretty.text, '\u001b[', 'without colours off a terminal')

  const quiet = terminal(true)
  createProcessLogger('warn', undefined, quiet, {}).info('not shown')
  t.equal(quiet.text, '', 'the level still applies')
})
