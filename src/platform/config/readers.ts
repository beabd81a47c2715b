// Parsing primitives of the configuration: one variable in, a typed value or a ConfigError naming
// the variable out. The rules that tie variables together stay in ../config.ts.
import { createRequire } from 'node:module'
import { parseHeaderList } from '../header-list.ts'

export class ConfigError extends Error {
  readonly variable: string
  constructor(variable: string, message: string) {
    super(`Invalid configuration: ${variable} ${message}`)
    this.name = 'ConfigError'
    this.variable = variable
  }
}

export type Env = Record<string, string | undefined>

export function readPort(env: Env, name: string, fallback: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a port number (0-65535), got "${raw}"`)
  const port = Number(raw)
  if (port > 65535) throw new ConfigError(name, `must be a port number (0-65535), got "${raw}"`)
  return port
}

export function readPositiveInt(env: Env, name: string, fallback: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) <= 0 || !Number.isSafeInteger(Number(raw))) {
    throw new ConfigError(name, `must be a positive integer, got "${raw}"`)
  }
  return Number(raw)
}

export function readBoundedInt(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new ConfigError(name, `must be an integer from ${min} to ${max}, got "${raw}"`)
  }
  return Number(raw)
}

export function readUrl(env: Env, name: string, protocols: readonly string[]): string | undefined {
  const raw = env[name]
  if (raw === undefined || raw === '') return undefined
  let parsed: URL
  try {
    parsed = new URL(raw)
  } catch {
    throw new ConfigError(name, 'must be an absolute URL')
  }
  if (!protocols.includes(parsed.protocol)) {
    throw new ConfigError(name, `must use ${protocols.join(' or ')}, got "${parsed.protocol}"`)
  }
  return raw
}

export function readBoolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]
  if (raw === undefined || raw === '') return fallback
  if (raw === 'true') return true
  if (raw === 'false') return false
  throw new ConfigError(name, `must be true or false, got "${raw}"`)
}

/**
 * An upstream URL that must not carry credentials: user:password in a URL ends up in error
 * messages and logs (fetch echoes the URL); keys go in the *_API_KEY variables instead.
 */
export function readUpstreamUrl(env: Env, name: string): string | undefined {
  const url = readUrl(env, name, ['http:', 'https:'])
  if (url === undefined) return undefined
  const parsed = new URL(url)
  if (parsed.username !== '' || parsed.password !== '') throw new ConfigError(name, 'must not contain a user name or password; put the key in the matching *_API_KEY variable')
  return url
}

/** A header list variable (header-list.ts); errors name the variable, never a value. */
export function readHeaders(env: Env, name: string): Record<string, string> {
  try {
    return parseHeaderList(env[name] ?? '')
  } catch (error) {
    throw new ConfigError(name, (error as Error).message)
  }
}

export function stripSlash(url: string): string {
  return url.endsWith('/') ? url.slice(0, -1) : url
}

// cron-parser (and luxon under it) is required by the first expression checked, not at every start.
const requireModule = createRequire(import.meta.url)
let cronParser: typeof import('cron-parser').CronExpressionParser | undefined

export function isCron(expression: string): boolean {
  cronParser ??= (requireModule('cron-parser') as typeof import('cron-parser')).CronExpressionParser
  try {
    cronParser.parse(expression)
    return true
  } catch {
    return false
  }
}
