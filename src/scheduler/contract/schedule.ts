// What a task's schedule means, for the API (compiling the two request forms to one stored 5-field
// cron + IANA zone) and for the Task reconciler (enumerating slots, naming their Runs): one
// definition, so the API's next_run_at and the controller's slots never disagree. Pure: every
// function takes the time it reasons about, nothing reads a clock.
//
// Decisions (SPEC leaves them open):
// - Only 5-field cron (minute hour day-of-month month day-of-week). A 6th (seconds) field is
//   refused: runs are billed per sandbox and named per minute, so sub-minute slots make no sense.
//   cron-parser silently pads short expressions with defaults ("5" becomes "every minute on
//   Fridays"), so the field count is checked here, before the library sees the text.
// - Macros: the classic Vixie set @yearly @annually @monthly @weekly @daily @hourly is accepted
//   and stored compiled to its 5-field form. @reboot, @minutely, @secondly and cron-parser's own
//   @weekdays/@weekends are refused (not portable, or meaningless for a cloud scheduler).
// - Syntax beyond POSIX that cron-parser evaluates deterministically is kept: names (jan, mon),
//   7 = Sunday, L (last day / last weekday of month) and # (nth weekday). Jenkins-style H is
//   refused: its value depends on a hash seed, so two services could disagree on the slot.
//   A step wider than its field (*/90 in minutes) is refused: cron-parser silently turns it into
//   "only the first value", which is never what the author meant.
// - day-of-month and day-of-week both restricted = either matches (Vixie/POSIX OR semantics, which
//   is what cron-parser does outside strict mode; strict mode would reject the combination).
// - Time zones: any IANA name Intl accepts (not an offset like +01:00), stored as written (only the
//   case is fixed: utc -> UTC); links such as US/Eastern or Asia/Kolkata are kept, not rewritten
//   to ICU's preferred spelling. Default UTC.
// - Convenience form: minute -> "* * * * *" (at ignored); hourly -> "M * * * *" with M the minutes
//   of at (default 0; the hour of at is ignored); daily -> "M H * * *" (default 00:00);
//   weekly -> "M H * * D" (dayOfWeek required). dayOfWeek with another `every` is refused rather
//   than guessed (daily + dayOfWeek probably meant weekly).
// - DST, pinned to cron-parser 5.x and tested (test/unit/scheduler-schedule.test.ts):
//   * spring forward: a wall time that does not exist (02:30 in Europe/Berlin on 2026-03-29) runs
//     once, shifted to the same minute of the next existing hour (03:30 CEST); not skipped.
//     (K8s CronJob/robfig skip that day; croner runs at 03:00.)
//   * fall back: a daily slot inside the repeated hour (02:30 on 2026-10-25) runs once, at its
//     first occurrence (02:30 CEST = 00:30Z). A "0 * * * *" schedule keeps firing every absolute
//     hour, so the repeated local hour runs twice (00:00Z and 01:00Z are both "02:00").
//   * slots are only ever enumerated forward with next(): cron-parser's prev() disagrees with
//     next() around DST (it returns the other instance), so nothing here uses it.
// - end_at is inclusive: a slot exactly at end_at still runs; later ones never do.
// - Run names use the slot's UTC minute (`<taskId>-<yyyyMMddHHmm>`): the local wall time repeats
//   on fall-back days, the UTC minute never does, and a slot is always minute-aligned. A second
//   controller or a restart creating the same slot's Run gets AlreadyExists and does nothing.
import { CronExpression, CronExpressionParser, type CronFieldCollection } from 'cron-parser'
import { AppError } from '../../platform/errors.ts'
import { FIELD_LIMITS, FIELD_PATTERNS } from '../../catalog/schemas/scheduler-limits.ts'
import { DAYS_OF_WEEK, EVERY_VALUES, type DayOfWeekName, type Every } from '../../catalog/schemas/scheduler-vocabulary.ts'

const CRON_DOW: Record<DayOfWeekName, number> = { sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6 }

export type ScheduleInput = { cron: string; timezone?: string } | { every: Every; at?: string; dayOfWeek?: DayOfWeekName; timezone?: string }

/** The stored schedule (matches the ScheduleView response schema). */
export interface CompiledSchedule {
  /** Always a 5-field cron, evaluated in `timezone`. */
  readonly cron: string
  readonly timezone: string
  readonly every?: Every
  readonly at?: string
  readonly dayOfWeek?: DayOfWeekName
}

export const DEFAULT_TIMEZONE = 'UTC'

const MACROS: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@hourly': '0 * * * *',
}

const FIELD_NAMES = ['minute', 'hour', 'day-of-month', 'month', 'day-of-week'] as const
/** Largest useful step per field: one less than the field's span. */
const MAX_STEP = [59, 23, 30, 11, 6] as const
const AT_PATTERN = /^([01]\d|2[0-3]):([0-5]\d)$/
const MAX_CRON_CHARS = FIELD_LIMITS.maxCronChars
const TIMEZONE_PATTERN = new RegExp(FIELD_PATTERNS.timezone)
/** Fixed instant the "does it ever fire" probe starts from; any date works, a fixed one keeps it pure. */
const PROBE_FROM = new Date('2000-01-01T00:00:00Z')

function invalid(detail: string, field: string): AppError {
  return new AppError('INVALID_CRON', detail, { field })
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * Validates an IANA zone name (Intl must know it) and returns the name to store: the input as
 * written, except that a different spelling of the same name gets Intl's (utc -> UTC). Links are
 * kept as given: Node's ICU would rewrite Asia/Kolkata to Asia/Calcutta. Throws INVALID_CRON.
 */
export function normalizeTimezone(value: unknown, field = 'body.schedule.timezone'): string {
  if (value === undefined) return DEFAULT_TIMEZONE
  if (typeof value !== 'string' || value.length > FIELD_LIMITS.maxTimezoneChars || !TIMEZONE_PATTERN.test(value)) {
    throw invalid(`schedule.timezone must be an IANA time zone name such as UTC or Europe/Berlin`, field)
  }
  let resolved: string
  try {
    resolved = new Intl.DateTimeFormat('en-US', { timeZone: value }).resolvedOptions().timeZone
  } catch {
    throw invalid(`schedule.timezone "${value}" is not a known IANA time zone`, field)
  }
  return resolved.toLowerCase() === value.toLowerCase() ? resolved : value
}

/** Checks the text of a 5-field cron before cron-parser sees it (see the header for why). */
function checkCronText(raw: string, field: string): string {
  const trimmed = raw.trim()
  if (trimmed.length === 0) throw invalid('schedule.cron is empty', field)
  if (trimmed.length > MAX_CRON_CHARS) throw invalid(`schedule.cron is longer than ${MAX_CRON_CHARS} characters`, field)
  if (trimmed.startsWith('@')) {
    const macro = MACROS[trimmed.toLowerCase()]
    if (macro === undefined) {
      throw invalid(`schedule.cron macro ${trimmed} is not supported; use one of ${Object.keys(MACROS).join(', ')} or a 5-field cron`, field)
    }
    return macro
  }
  if (/^(CRON_)?TZ=/i.test(trimmed)) throw invalid('schedule.cron must not carry a time zone; use schedule.timezone', field)
  const parts = trimmed.split(/\s+/)
  if (parts.length === 6) throw invalid('schedule.cron has 6 fields; seconds are not supported, use 5 fields (minute hour day-of-month month day-of-week)', field)
  if (parts.length !== 5) throw invalid(`schedule.cron has ${parts.length} field(s); expected 5 (minute hour day-of-month month day-of-week)`, field)
  parts.forEach((part, index) => {
    const name = FIELD_NAMES[index]
    if (part.split(',').some((item) => /^H(\(|\/|$)/i.test(item))) {
      throw invalid(`schedule.cron ${name} field "${part}": hashed values (H) are not supported`, field)
    }
    if (!/^[A-Za-z0-9*,/#?-]+$/.test(part)) throw invalid(`schedule.cron ${name} field "${part}" has invalid characters`, field)
    for (const item of part.split(',')) {
      const slash = item.indexOf('/')
      if (slash < 0) continue
      const step = item.slice(slash + 1)
      if (!/^\d+$/.test(step) || Number(step) < 1 || Number(step) > (MAX_STEP[index] ?? 0)) {
        throw invalid(`schedule.cron ${name} field "${part}": step must be 1 to ${MAX_STEP[index]}`, field)
      }
    }
  })
  return parts.join(' ')
}

/**
 * Parsed cron fields by expression text. A controller computes slots of the same few expressions
 * on every reconcile, and parsing was most of the pure reconciler's time; the fields are immutable
 * (an iterator keeps its position apart), so one parse serves every iterator. Bounded: the oldest
 * entry goes first.
 */
const parsedFields = new Map<string, CronFieldCollection>()
const MAX_PARSED_FIELDS = 1024

function parseCron(cron: string, timezone: string, currentDate: Date): CronExpression {
  const fields = parsedFields.get(cron)
  if (fields !== undefined) return new CronExpression(fields, { currentDate, tz: timezone, expression: cron })
  const expression = CronExpressionParser.parse(cron, { currentDate, tz: timezone })
  if (parsedFields.size >= MAX_PARSED_FIELDS) parsedFields.delete(parsedFields.keys().next().value as string)
  parsedFields.set(cron, expression.fields)
  return expression
}

/** Proves the cron parses in the zone and fires at least once; throws INVALID_CRON naming `field`. */
function checkFires(cron: string, timezone: string, field: string): void {
  try {
    parseCron(cron, timezone, PROBE_FROM).next()
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error)
    throw invalid(`schedule.cron "${cron}" is invalid: ${reason}`, field)
  }
}

/**
 * Compiles either request form to the stored schedule. `prefix` is the field path of the schedule
 * object in the request (errors name `${prefix}.cron`, `${prefix}.at`, ...).
 */
export function compileSchedule(input: unknown, prefix = 'body.schedule'): CompiledSchedule {
  if (!isRecord(input)) throw invalid('schedule must be an object: { cron, timezone } or { every, at, dayOfWeek, timezone }', prefix)
  const hasCron = 'cron' in input
  const hasEvery = 'every' in input
  if (hasCron === hasEvery) {
    throw invalid('schedule needs exactly one of cron or every', prefix)
  }
  const allowed = hasCron ? ['cron', 'timezone'] : ['every', 'at', 'dayOfWeek', 'timezone']
  for (const key of Object.keys(input)) {
    if (!allowed.includes(key)) throw invalid(`schedule.${key} is not allowed with ${hasCron ? 'cron' : 'every'}`, `${prefix}.${key}`)
  }
  const timezone = normalizeTimezone(input.timezone, `${prefix}.timezone`)

  if (hasCron) {
    if (typeof input.cron !== 'string') throw invalid('schedule.cron must be a string', `${prefix}.cron`)
    const cron = checkCronText(input.cron, `${prefix}.cron`)
    checkFires(cron, timezone, `${prefix}.cron`)
    return { cron, timezone }
  }

  const every = input.every
  if (typeof every !== 'string' || !(EVERY_VALUES as readonly string[]).includes(every)) {
    throw invalid(`schedule.every must be one of ${EVERY_VALUES.join(', ')}`, `${prefix}.every`)
  }
  let minute = 0
  let hour = 0
  if (input.at !== undefined) {
    const match = typeof input.at === 'string' ? AT_PATTERN.exec(input.at) : null
    if (match === null) throw invalid('schedule.at must be HH:MM (24 h, 00:00 to 23:59)', `${prefix}.at`)
    hour = Number(match[1])
    minute = Number(match[2])
  }
  const dayOfWeek = input.dayOfWeek
  if (dayOfWeek !== undefined && (typeof dayOfWeek !== 'string' || !(DAYS_OF_WEEK as readonly string[]).includes(dayOfWeek))) {
    throw invalid(`schedule.dayOfWeek must be one of ${DAYS_OF_WEEK.join(', ')}`, `${prefix}.dayOfWeek`)
  }
  if (every === 'weekly' && dayOfWeek === undefined) throw invalid('schedule.dayOfWeek is required with every=weekly', `${prefix}.dayOfWeek`)
  if (every !== 'weekly' && dayOfWeek !== undefined) {
    throw invalid(`schedule.dayOfWeek is only allowed with every=weekly (got every=${every})`, `${prefix}.dayOfWeek`)
  }
  let cron: string
  switch (every as Every) {
    case 'minute':
      cron = '* * * * *'
      break
    case 'hourly':
      cron = `${minute} * * * *`
      break
    case 'daily':
      cron = `${minute} ${hour} * * *`
      break
    case 'weekly':
      cron = `${minute} ${hour} * * ${CRON_DOW[dayOfWeek as DayOfWeekName]}`
      break
  }
  const compiled: { -readonly [K in keyof CompiledSchedule]: CompiledSchedule[K] } = { cron, timezone, every: every as Every }
  if (typeof input.at === 'string') compiled.at = input.at
  if (dayOfWeek !== undefined) compiled.dayOfWeek = dayOfWeek as DayOfWeekName
  return compiled
}

/** Hard bound on how many slots one call enumerates, so a bad caller can't spin forever. */
export const MAX_SLOTS_PER_CALL = 10_000

function checkCount(count: number, name: string): void {
  if (!Number.isSafeInteger(count) || count < 0 || count > MAX_SLOTS_PER_CALL) {
    throw new RangeError(`${name} must be an integer 0 to ${MAX_SLOTS_PER_CALL}`)
  }
}

/**
 * The first slot strictly after `afterMs`, memoised per schedule by gap: when n is the first slot
 * after a, it is the first after every instant in [a, n) too, so every Task sharing a schedule is
 * answered by one cron step until that slot passes (a cron step cost a controller more than the
 * rest of a reconcile). Only gaps the zone's UTC offset does not change in are kept: around a DST
 * switch cron-parser's answer is not monotonic (from inside a repeated hour it gives that hour's
 * second 02:30, which it skips from before), so such instants are always asked afresh. A gap is
 * widened downwards when an earlier instant lands on its slot.
 */
function firstSlotAfter(schedule: CompiledSchedule, afterMs: number): number {
  const key = `${schedule.timezone} ${schedule.cron}`
  let gaps = slotGaps.get(key)
  if (gaps !== undefined) {
    for (const gap of gaps) if (gap.fromMs <= afterMs && afterMs < gap.slotMs) return gap.slotMs
  }
  const slotMs = parseCron(schedule.cron, schedule.timezone, new Date(afterMs)).next().toDate().getTime()
  if (!sameOffsetThroughout(schedule.timezone, afterMs, slotMs)) return slotMs
  if (gaps === undefined) {
    if (slotGaps.size >= MAX_GAP_SCHEDULES) slotGaps.delete(slotGaps.keys().next().value as string)
    slotGaps.set(key, (gaps = []))
  }
  const widened = gaps.find((gap) => gap.slotMs === slotMs)
  if (widened !== undefined) widened.fromMs = Math.min(widened.fromMs, afterMs)
  else {
    if (gaps.length >= MAX_GAPS_PER_SCHEDULE) gaps.splice(gaps.indexOf(gaps.reduce((a, b) => (b.slotMs < a.slotMs ? b : a))), 1) // the earliest: time moves on
    gaps.push({ fromMs: afterMs, slotMs })
  }
  return slotMs
}

/** [fromMs, slotMs): no slot in it, slotMs is one. */
interface SlotGap {
  fromMs: number
  readonly slotMs: number
}
const slotGaps = new Map<string, SlotGap[]>()
const MAX_GAP_SCHEDULES = 1024
/** Enough for the slots around now, a lookahead and a catch-up window of each schedule. */
const MAX_GAPS_PER_SCHEDULE = 8
/** DST switches are months apart: an offset the same at both ends of a day did not change in it. */
const MAX_GAP_MS = 24 * 3600_000

/** The zone keeps one UTC offset over [fromMs, toMs] (checked at both ends of at most a day). */
function sameOffsetThroughout(timezone: string, fromMs: number, toMs: number): boolean {
  if (timezone === 'UTC') return true
  return toMs - fromMs <= MAX_GAP_MS && utcOffset(timezone, fromMs) === utcOffset(timezone, toMs)
}

const offsetFormats = new Map<string, Intl.DateTimeFormat>()

/** The zone's UTC offset at an instant, as Intl names it ("GMT+01:00"). */
function utcOffset(timezone: string, ms: number): string {
  let format = offsetFormats.get(timezone)
  if (format === undefined) offsetFormats.set(timezone, (format = new Intl.DateTimeFormat('en-US', { timeZone: timezone, timeZoneName: 'longOffset' })))
  return format.formatToParts(ms).find((part) => part.type === 'timeZoneName')?.value ?? ''
}

/**
 * The next `count` slots strictly after `after`, earliest first, stopping at `endAt` (inclusive)
 * when given. Fewer than `count` come back only when the schedule ends.
 */
export function nextSlots(schedule: CompiledSchedule, after: Date, count: number, options: { endAt?: Date | null } = {}): Date[] {
  checkCount(count, 'count')
  const out: Date[] = []
  if (count === 0) return out
  const endMs = options.endAt?.getTime()
  if (endMs !== undefined && endMs <= after.getTime()) return out
  let slotMs = after.getTime()
  while (out.length < count) {
    slotMs = firstSlotAfter(schedule, slotMs)
    if (endMs !== undefined && slotMs > endMs) break
    out.push(new Date(slotMs))
  }
  return out
}

/** The first slot strictly after `after` (undefined when end_at comes first). */
export function nextSlot(schedule: CompiledSchedule, after: Date, options: { endAt?: Date | null } = {}): Date | undefined {
  return nextSlots(schedule, after, 1, options)[0]
}

/** Slots in the half-open window (from, to], earliest first, at most `limit`. */
export function slotsBetween(schedule: CompiledSchedule, from: Date, to: Date, limit: number): Date[] {
  checkCount(limit, 'limit')
  const out: Date[] = []
  if (limit === 0 || to.getTime() <= from.getTime()) return out
  let slotMs = from.getTime()
  while (out.length < limit) {
    slotMs = firstSlotAfter(schedule, slotMs)
    if (slotMs > to.getTime()) break
    out.push(new Date(slotMs))
  }
  return out
}

/**
 * Missed-run math for a dispatcher that runs at most one catch-up (CronJob style): the latest
 * slot in (from, to] and how many slots the window held. Counting stops at `maxScan`
 * (`capped` true): the latest slot is then unknown and the caller should treat the window as
 * "too many missed" and resume from `to`.
 */
export function latestSlotBetween(schedule: CompiledSchedule, from: Date, to: Date, maxScan = MAX_SLOTS_PER_CALL): { latest: Date | undefined; count: number; capped: boolean } {
  checkCount(maxScan, 'maxScan')
  const toMs = to.getTime()
  if (toMs <= from.getTime()) return { latest: undefined, count: 0, capped: false }
  let slotMs = from.getTime()
  let latestMs: number | undefined
  let count = 0
  while (count < maxScan) {
    slotMs = firstSlotAfter(schedule, slotMs)
    if (slotMs > toMs) return { latest: latestMs === undefined ? undefined : new Date(latestMs), count, capped: false }
    latestMs = slotMs
    count += 1
  }
  return { latest: undefined, count, capped: true }
}

const TASK_ID_FOR_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/
/** 253 (max object name) minus "-" and 12 digits. */
const MAX_TASK_ID_FOR_NAME = 240

function pad(value: number, width = 2): string {
  return String(value).padStart(width, '0')
}

/** yyyyMMddHHmm of an instant in UTC. */
export function slotStamp(slot: Date): string {
  return `${pad(slot.getUTCFullYear(), 4)}${pad(slot.getUTCMonth() + 1)}${pad(slot.getUTCDate())}${pad(slot.getUTCHours())}${pad(slot.getUTCMinutes())}`
}

/**
 * Deterministic Run name for one scheduled slot: `${taskId}-${yyyyMMddHHmm UTC}`. The task id must
 * already be a DNS-1123 label (lowercase alphanumerics and '-') so the name is a valid Kubernetes
 * object name, and the slot must be minute-aligned (every cron slot is) so two different instants
 * never share a name.
 */
export function slotName(taskId: string, slot: Date): string {
  if (!TASK_ID_FOR_NAME.test(taskId) || taskId.length > MAX_TASK_ID_FOR_NAME) {
    throw new TypeError(`slotName: task id "${taskId}" is not a lowercase DNS-1123 label of at most ${MAX_TASK_ID_FOR_NAME} characters`)
  }
  const ms = slot.getTime()
  if (!Number.isFinite(ms) || ms % 60_000 !== 0) throw new TypeError(`slotName: slot ${String(slot)} is not minute-aligned`)
  return `${taskId}-${slotStamp(slot)}`
}
