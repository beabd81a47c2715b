// pino JSON logs. Secrets never reach a log line: credentials in headers and the fields
// that carry keys, tokens and task env are redacted at the logger, not at each call site.
import { pino, type Logger } from 'pino'
import type { LogLevel } from './config.ts'

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
