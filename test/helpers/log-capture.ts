// A pino logger whose JSON lines are collected in memory, for tests that assert levels and fields.
import { Writable } from 'node:stream'
import { createLogger, type Logger } from '../../src/platform/logger.ts'

export interface LogLine {
  level: number
  msg: string
  err?: { stack?: string; message?: string }
  [key: string]: unknown
}

export const LEVEL = { debug: 20, info: 30, warn: 40, error: 50 } as const

export function captureLogs(level: Parameters<typeof createLogger>[0] = 'debug'): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = []
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as LogLine)
      done()
    },
  })
  return { logger: createLogger(level, sink), lines }
}
