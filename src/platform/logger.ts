// pino logs. Secrets never reach a log line: credentials in headers and the fields that carry
// keys, tokens and task env are redacted at the logger, not at each call site.
//
// The process logger (createProcessLogger, what the CLI uses) writes pino's JSON lines, one object
// per line, for log shippers and containers; on a terminal (or with LOG_FORMAT=pretty) each line
// is turned into a readable one instead: local time, level, message, then the other fields as
// key=value, an error's stack indented below. A small formatter over pino's destination stream,
// in this process (no transport worker, no extra dependency), so what is written and when is the
// same in both formats.
import { pino, type Logger } from 'pino'
import type { LogFormat, LogLevel } from './config.ts'

export type { Logger }

export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["svc-agent-authorization"]',
  'req.headers["payment-signature"]',
  'req.headers["x-payment"]',
  'req.headers["sign-in-with-x"]',
  'req.headers.cookie',
  'headers.authorization',
  '*.accessToken',
  '*.apiKey',
  '*.secret',
  '*.password',
  '*.env',
  '*.privateKey',
  'databaseUrl',
  'redisUrl',
  'settlerPrivateKey',
  'mppSecretKey',
  'offerReceiptSigningKeys',
  'smtpUrl',
]

export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'agent-gateway' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  )
}

/** Where the process logs go: process.stdout, or a stand-in with the same two members. */
export interface LogOutput {
  isTTY?: boolean
  write(chunk: string): unknown
}

/** LOG_FORMAT when set; otherwise readable lines on a terminal and JSON anywhere else. */
export function logFormatFor(setting: LogFormat | undefined, output: Pick<LogOutput, 'isTTY'>): LogFormat {
  return setting ?? (output.isTTY === true ? 'pretty' : 'json')
}

/**
 * The logger of the process: JSON lines to `output` (pino's own fast path to stdout), or readable
 * lines where logFormatFor says so, coloured when `output` is a terminal and NO_COLOR is not set.
 */
export function createProcessLogger(level: LogLevel, format: LogFormat | undefined, output: LogOutput = process.stdout, env: NodeJS.ProcessEnv = process.env): Logger {
  if (logFormatFor(format, output) === 'json') return createLogger(level, output === process.stdout ? undefined : (output as pino.DestinationStream))
  const color = output.isTTY === true && (env.NO_COLOR ?? '') === ''
  return createLogger(level, prettyDestination(output, { color }))
}

/** A pino destination that writes each JSON line to `output` as a readable one. */
export function prettyDestination(output: Pick<LogOutput, 'write'>, options: { color?: boolean } = {}): pino.DestinationStream {
  return {
    write(chunk: string) {
      // pino writes one line per call; split anyway, so a batched write stays line by line.
      let text = ''
      for (const line of chunk.split('\n')) if (line !== '') text += formatLogLine(line, options)
      output.write(text)
    },
  }
}

const LEVELS: Record<number, { label: string; color: number }> = {
  10: { label: 'TRACE', color: 90 },
  20: { label: 'DEBUG', color: 90 },
  30: { label: 'INFO ', color: 32 },
  40: { label: 'WARN ', color: 33 },
  50: { label: 'ERROR', color: 31 },
  60: { label: 'FATAL', color: 35 },
}

/** Fields every line has, shown as the line's start (time, level, message) or not at all. */
const HIDDEN = new Set(['level', 'time', 'msg', 'service', 'pid', 'hostname'])

const paint = (text: string, code: number, on: boolean) => (on ? `\u001b[${code}m${text}\u001b[39m` : text)

/** A value as the right side of key=value: bare when it is a plain word, else JSON. */
function fieldValue(value: unknown): string {
  if (typeof value === 'string') return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value)
  if (value === undefined) return 'undefined'
  return JSON.stringify(value) ?? String(value)
}

function clock(time: unknown): string {
  const date = typeof time === 'string' || typeof time === 'number' ? new Date(time) : new Date()
  if (Number.isNaN(date.getTime())) return String(time)
  const two = (n: number) => String(n).padStart(2, '0')
  return `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}.${String(date.getMilliseconds()).padStart(3, '0')}`
}

/**
 * One pino JSON line as a readable line (newline included): "14:03:07.123 INFO  message key=value …",
 * an error as err="Type: message" with its stack indented on the lines below. A line that is not a
 * JSON object is returned as it is.
 */
export function formatLogLine(line: string, options: { color?: boolean } = {}): string {
  let record: Record<string, unknown>
  try {
    const parsed = JSON.parse(line) as unknown
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return line.endsWith('\n') ? line : `${line}\n`
    record = parsed as Record<string, unknown>
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`
  }
  const color = options.color === true
  const level = LEVELS[record.level as number] ?? { label: String(record.level).toUpperCase().padEnd(5), color: 39 }
  const parts = [paint(clock(record.time), 90, color), paint(level.label, level.color, color)]
  if (record.msg !== undefined) parts.push(String(record.msg))
  let stack = ''
  for (const [key, value] of Object.entries(record)) {
    if (HIDDEN.has(key)) continue
    if ((key === 'err' || key === 'error') && value !== null && typeof value === 'object') {
      const err = value as { type?: unknown; name?: unknown; message?: unknown; stack?: unknown }
      const name = typeof err.type === 'string' ? err.type : typeof err.name === 'string' ? err.name : 'Error'
      parts.push(`${key}=${fieldValue(`${name}: ${String(err.message ?? '')}`)}`)
      if (typeof err.stack === 'string') stack += err.stack.replace(/^/gm, '    ').concat('\n')
      continue
    }
    parts.push(`${key}=${fieldValue(value)}`)
  }
  return `${parts.join(' ')}\n${stack}`
}
