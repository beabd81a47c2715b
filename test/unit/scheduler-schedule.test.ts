import t from 'tap'
import { compileSchedule, latestSlotBetween, nextSlot, nextSlots, normalizeTimezone, slotName, slotsBetween, type CompiledSchedule } from '../../src/scheduler/contract/schedule.ts'

const iso = (dates: readonly Date[]) => dates.map((d) => d.toISOString())
const at = (value: string) => new Date(value)

t.test('convenience form compiles to a 5-field cron', async (t) => {
  t.same(compileSchedule({ every: 'minute' }), { cron: '* * * * *', timezone: 'UTC', every: 'minute' })
  t.same(compileSchedule({ every: 'minute', at: '10:30' }).cron, '* * * * *', 'minute ignores at')
  t.same(compileSchedule({ every: 'hourly' }).cron, '0 * * * *')
  t.same(compileSchedule({ every: 'hourly', at: '13:45' }).cron, '45 * * * *', 'hourly uses the minutes of at')
  t.same(compileSchedule({ every: 'daily' }).cron, '0 0 * * *', 'daily defaults to 00:00')
  t.same(compileSchedule({ every: 'daily', at: '09:05', timezone: 'Europe/Berlin' }), {
    cron: '5 9 * * *',
    timezone: 'Europe/Berlin',
    every: 'daily',
    at: '09:05',
  })
  t.same(compileSchedule({ every: 'weekly', at: '07:15', dayOfWeek: 'sun' }).cron, '15 7 * * 0')
  t.same(compileSchedule({ every: 'weekly', dayOfWeek: 'mon' }).cron, '0 0 * * 1')
  t.same(compileSchedule({ every: 'weekly', at: '23:59', dayOfWeek: 'sat' }).cron, '59 23 * * 6')
})

t.test('cron form: 5 fields, names, L and #, Vixie macros', async (t) => {
  t.same(compileSchedule({ cron: '  */15   9-17 * * mon-fri ' }), { cron: '*/15 9-17 * * mon-fri', timezone: 'UTC' })
  t.equal(compileSchedule({ cron: '0 0 L * *' }).cron, '0 0 L * *')
  t.equal(compileSchedule({ cron: '0 12 * * 1#2' }).cron, '0 12 * * 1#2')
  t.equal(compileSchedule({ cron: '0 0 * * 7' }).cron, '0 0 * * 7')
  t.equal(compileSchedule({ cron: '@daily' }).cron, '0 0 * * *')
  t.equal(compileSchedule({ cron: '@HOURLY' }).cron, '0 * * * *')
  t.equal(compileSchedule({ cron: '@weekly' }).cron, '0 0 * * 0')
  t.equal(compileSchedule({ cron: '@annually' }).cron, '0 0 1 1 *')
  // day-of-month and day-of-week together: either matches (Vixie OR)
  const either = compileSchedule({ cron: '0 0 1 * 1' })
  t.same(iso(nextSlots(either, at('2026-01-25T00:00:00Z'), 3)), ['2026-01-26T00:00:00.000Z', '2026-02-01T00:00:00.000Z', '2026-02-02T00:00:00.000Z'])
})

t.test('cron errors are INVALID_CRON naming body.schedule.cron', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['0 0 * * * *', /6 fields; seconds are not supported/],
    ['* * * *', /4 field/],
    ['5', /1 field/],
    ['', /empty/],
    ['@reboot', /not supported/],
    ['@secondly', /not supported/],
    ['@weekdays', /not supported/],
    ['H * * * *', /hashed/],
    ['H(0-29)/5 * * * *', /hashed/],
    ['*/90 * * * *', /step must be 1 to 59/],
    ['0 */0 * * *', /step must be 1 to 23/],
    ['61 * * * *', /invalid/],
    ['0 24 * * *', /invalid/],
    ['0 0 31 2 *', /invalid/],
    ['0 0 * * 8', /invalid/],
    ['0 0 * * 5-1', /invalid/],
    ['0 0 * * blursday', /invalid/],
    ['0 0 * * $', /invalid characters/],
    ['TZ=Europe/Berlin 0 0 * * *', /time zone/],
    [`${'0 0 * * *'.padEnd(130, ' ')}x`, /longer than/],
  ]
  for (const [cron, message] of cases) {
    t.throws(() => compileSchedule({ cron }), { code: 'INVALID_CRON', field: 'body.schedule.cron', message }, JSON.stringify(cron))
  }
  t.throws(() => compileSchedule({ cron: 5 }), { code: 'INVALID_CRON', field: 'body.schedule.cron' })
})

t.test('shape errors name the schedule member', async (t) => {
  t.throws(() => compileSchedule('0 0 * * *'), { code: 'INVALID_CRON', field: 'body.schedule' })
  t.throws(() => compileSchedule({}), { code: 'INVALID_CRON', field: 'body.schedule' })
  t.throws(() => compileSchedule({ cron: '0 0 * * *', every: 'daily' }), { code: 'INVALID_CRON', field: 'body.schedule' })
  t.throws(() => compileSchedule({ cron: '0 0 * * *', at: '10:00' }), { code: 'INVALID_CRON', field: 'body.schedule.at' })
  t.throws(() => compileSchedule({ every: 'monthly' }), { code: 'INVALID_CRON', field: 'body.schedule.every' })
  for (const bad of ['24:00', '9:00', '09:60', '0900', 9]) {
    t.throws(() => compileSchedule({ every: 'daily', at: bad }), { code: 'INVALID_CRON', field: 'body.schedule.at' }, String(bad))
  }
  t.throws(() => compileSchedule({ every: 'weekly', at: '10:00' }), { code: 'INVALID_CRON', field: 'body.schedule.dayOfWeek', message: /required/ })
  t.throws(() => compileSchedule({ every: 'weekly', dayOfWeek: 'monday' }), { code: 'INVALID_CRON', field: 'body.schedule.dayOfWeek' })
  t.throws(() => compileSchedule({ every: 'daily', dayOfWeek: 'mon' }), { code: 'INVALID_CRON', field: 'body.schedule.dayOfWeek', message: /only allowed with every=weekly/ })
  t.throws(() => compileSchedule({ cron: 'x' }, 'body.spec.schedule'), { code: 'INVALID_CRON', field: 'body.spec.schedule.cron' }, 'field prefix')
})

t.test('time zones: IANA names, normalised, default UTC', async (t) => {
  t.equal(normalizeTimezone(undefined), 'UTC')
  t.equal(normalizeTimezone('UTC'), 'UTC')
  t.equal(normalizeTimezone('utc'), 'UTC')
  t.equal(normalizeTimezone('europe/berlin'), 'Europe/Berlin')
  t.equal(normalizeTimezone('US/Eastern'), 'US/Eastern', 'links are kept as written')
  t.equal(normalizeTimezone('Asia/Kolkata'), 'Asia/Kolkata', "not rewritten to ICU's Asia/Calcutta")
  t.equal(normalizeTimezone('Etc/GMT+5'), 'Etc/GMT+5')
  t.equal(normalizeTimezone('America/Argentina/Buenos_Aires'), 'America/Argentina/Buenos_Aires')
  for (const bad of ['+01:00', 'UTC+1', 'Mars/Olympus', 'Europe/Berlinn', '', 42, 'Z', 'Europe/../etc']) {
    t.throws(() => compileSchedule({ cron: '0 0 * * *', timezone: bad }), { code: 'INVALID_CRON', field: 'body.schedule.timezone' }, String(bad))
  }
  t.throws(() => compileSchedule({ every: 'daily', timezone: 'Nowhere/City' }), { code: 'INVALID_CRON', field: 'body.schedule.timezone' })
})

t.test('DST Europe/Berlin, 30 2 * * * (cron-parser 5 semantics)', async (t) => {
  const s = compileSchedule({ cron: '30 2 * * *', timezone: 'Europe/Berlin' })
  // Spring forward 2026-03-29: 02:30 does not exist; it runs once, shifted to 03:30 CEST (01:30Z).
  t.same(iso(nextSlots(s, at('2026-03-28T12:00:00Z'), 3)), ['2026-03-29T01:30:00.000Z', '2026-03-30T00:30:00.000Z', '2026-03-31T00:30:00.000Z'])
  // Fall back 2026-10-25: 02:30 happens twice; it runs once, at the first (CEST) one, 00:30Z.
  t.same(iso(nextSlots(s, at('2026-10-24T12:00:00Z'), 3)), ['2026-10-25T00:30:00.000Z', '2026-10-26T01:30:00.000Z', '2026-10-27T01:30:00.000Z'])
  t.equal(slotsBetween(s, at('2026-10-24T23:00:00Z'), at('2026-10-25T23:00:00Z'), 10).length, 1, 'fall-back day: exactly once')
  t.equal(slotsBetween(s, at('2026-03-28T23:00:00Z'), at('2026-03-29T22:00:00Z'), 10).length, 1, 'spring-forward day: exactly once')
})

t.test('DST: an hourly schedule keeps every absolute hour', async (t) => {
  const s = compileSchedule({ cron: '0 * * * *', timezone: 'Europe/Berlin' })
  // Berlin local 2026-10-25 00:00 CEST (22:00Z) .. 2026-10-26 00:00 CET (23:00Z) is 25 hours long.
  t.equal(slotsBetween(s, at('2026-10-24T22:00:00Z'), at('2026-10-25T23:00:00Z'), 100).length, 25)
  t.same(iso(nextSlots(s, at('2026-10-24T23:30:00Z'), 3)), ['2026-10-25T00:00:00.000Z', '2026-10-25T01:00:00.000Z', '2026-10-25T02:00:00.000Z'], 'local 02:00 twice')
  // the repeated local hour gives two distinct run names (UTC minutes differ)
  t.not(slotName('t1', at('2026-10-25T00:00:00Z')), slotName('t1', at('2026-10-25T01:00:00Z')))
  // spring: 23-hour local day, 23 runs
  t.equal(slotsBetween(s, at('2026-03-28T23:00:00Z'), at('2026-03-29T22:00:00Z'), 100).length, 23)
})

t.test('DST America/New_York', async (t) => {
  const spring = compileSchedule({ cron: '30 2 * * *', timezone: 'America/New_York' })
  t.same(iso(nextSlots(spring, at('2026-03-07T12:00:00Z'), 2)), ['2026-03-08T07:30:00.000Z', '2026-03-09T06:30:00.000Z'], '02:30 -> 03:30 EDT on 2026-03-08')
  const fall = compileSchedule({ cron: '30 1 * * *', timezone: 'America/New_York' })
  t.same(iso(nextSlots(fall, at('2026-10-31T12:00:00Z'), 2)), ['2026-11-01T05:30:00.000Z', '2026-11-02T06:30:00.000Z'], 'once, at 01:30 EDT')
  const weekly = compileSchedule({ every: 'weekly', at: '09:00', dayOfWeek: 'mon', timezone: 'America/New_York' })
  t.same(iso(nextSlots(weekly, at('2026-02-28T00:00:00Z'), 2)), ['2026-03-02T14:00:00.000Z', '2026-03-09T13:00:00.000Z'], 'local 09:00 across the switch')
})

t.test('nextSlots: strictly after, count, end_at inclusive', async (t) => {
  const s = compileSchedule({ every: 'daily', at: '12:00' })
  t.same(iso(nextSlots(s, at('2026-01-01T12:00:00Z'), 2)), ['2026-01-02T12:00:00.000Z', '2026-01-03T12:00:00.000Z'], 'a slot equal to after is not returned')
  t.same(iso(nextSlots(s, at('2026-01-01T11:59:59.999Z'), 1)), ['2026-01-01T12:00:00.000Z'])
  t.same(nextSlots(s, at('2026-01-01T00:00:00Z'), 0), [])
  const endAt = at('2026-01-03T12:00:00Z')
  t.same(iso(nextSlots(s, at('2026-01-01T00:00:00Z'), 10, { endAt })), ['2026-01-01T12:00:00.000Z', '2026-01-02T12:00:00.000Z', '2026-01-03T12:00:00.000Z'], 'end_at is inclusive')
  t.same(nextSlots(s, at('2026-01-03T12:00:00Z'), 10, { endAt }), [], 'nothing after end_at')
  t.equal(nextSlot(s, at('2026-01-03T12:00:00Z'), { endAt }), undefined)
  t.same(iso(nextSlots(s, at('2026-01-01T00:00:00Z'), 1, { endAt: null })), ['2026-01-01T12:00:00.000Z'])
  t.throws(() => nextSlots(s, at('2026-01-01T00:00:00Z'), -1), RangeError)
  t.throws(() => nextSlots(s, at('2026-01-01T00:00:00Z'), 1e9), RangeError)
})

t.test('slotsBetween is (from, to], earliest first, bounded', async (t) => {
  const s: CompiledSchedule = compileSchedule({ cron: '*/10 * * * *' })
  t.same(iso(slotsBetween(s, at('2026-01-01T00:00:00Z'), at('2026-01-01T00:30:00Z'), 10)), ['2026-01-01T00:10:00.000Z', '2026-01-01T00:20:00.000Z', '2026-01-01T00:30:00.000Z'])
  t.same(iso(slotsBetween(s, at('2026-01-01T00:00:00Z'), at('2026-01-01T00:30:00Z'), 2)), ['2026-01-01T00:10:00.000Z', '2026-01-01T00:20:00.000Z'])
  t.same(slotsBetween(s, at('2026-01-01T00:30:00Z'), at('2026-01-01T00:30:00Z'), 10), [])
  t.same(slotsBetween(s, at('2026-01-01T00:31:00Z'), at('2026-01-01T00:30:00Z'), 10), [])
})

t.test('latestSlotBetween: one catch-up after an outage', async (t) => {
  const s = compileSchedule({ cron: '*/10 * * * *' })
  const r = latestSlotBetween(s, at('2026-01-01T00:00:00Z'), at('2026-01-01T01:05:00Z'))
  t.equal(r.latest?.toISOString(), '2026-01-01T01:00:00.000Z')
  t.equal(r.count, 6)
  t.equal(r.capped, false)
  const capped = latestSlotBetween(compileSchedule({ every: 'minute' }), at('2026-01-01T00:00:00Z'), at('2026-01-08T00:00:00Z'), 100)
  t.same(capped, { latest: undefined, count: 100, capped: true })
  t.same(latestSlotBetween(s, at('2026-01-01T00:01:00Z'), at('2026-01-01T00:09:00Z')), { latest: undefined, count: 0, capped: false })
})

t.test('slotName is deterministic, UTC, DNS-safe', async (t) => {
  t.equal(slotName('tsk-01h8x', at('2026-03-29T01:30:00Z')), 'tsk-01h8x-202603290130')
  t.equal(slotName('a', at('2026-12-31T23:59:00.000Z')), 'a-202612312359')
  t.equal(slotName('a', at('2026-01-01T00:00:00Z')), slotName('a', new Date(Date.parse('2026-01-01T00:00:00Z'))))
  t.throws(() => slotName('Task_1', at('2026-01-01T00:00:00Z')), TypeError)
  t.throws(() => slotName('-a', at('2026-01-01T00:00:00Z')), TypeError)
  t.throws(() => slotName('a'.repeat(241), at('2026-01-01T00:00:00Z')), TypeError)
  t.throws(() => slotName('a', at('2026-01-01T00:00:30Z')), TypeError, 'not minute-aligned')
  t.throws(() => slotName('a', new Date(Number.NaN)), TypeError)
  // every slot a schedule yields is nameable
  const s = compileSchedule({ cron: '30 2 * * *', timezone: 'Europe/Berlin' })
  for (const slot of nextSlots(s, at('2026-03-25T00:00:00Z'), 10)) t.match(slotName('x', slot), /^x-\d{12}$/)
})

t.test('slots answered from the memo of each schedule are those of a fresh cron iteration, in any order of asking', async (t) => {
  const { CronExpressionParser } = await import('cron-parser')
  const fresh = (s: CompiledSchedule, after: Date, count: number) => {
    const iterator = CronExpressionParser.parse(s.cron, { currentDate: after, tz: s.timezone })
    return Array.from({ length: count }, () => iterator.next().toDate().toISOString())
  }
  const schedules = [
    compileSchedule({ cron: '30 2 * * *', timezone: 'Europe/Berlin' }),
    compileSchedule({ cron: '0 * * * *', timezone: 'Europe/Berlin' }),
    compileSchedule({ cron: '30 1 * * *', timezone: 'America/New_York' }),
    compileSchedule({ cron: '*/7 * * * *', timezone: 'UTC' }),
  ]
  // Instants around both 2026 switches, asked backwards and forwards, so gaps are widened
  // downwards, answered from, and evicted.
  const starts = [Date.parse('2026-03-29T00:00:00Z'), Date.parse('2026-10-25T00:00:00Z'), Date.parse('2026-11-01T04:00:00Z')]
  let seed = 7
  const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647
  for (const s of schedules) {
    let mismatches = 0
    for (let i = 0; i < 300; i += 1) {
      const start = starts[i % starts.length] as number
      const after = new Date(start + Math.floor((random() - 0.3) * 6 * 3600_000))
      if (iso(nextSlots(s, after, 3)).join() !== fresh(s, after, 3).join()) mismatches += 1
      const to = new Date(after.getTime() + 3 * 3600_000)
      const between = slotsBetween(s, after, to, 100)
      const latest = latestSlotBetween(s, after, to)
      if (latest.count !== between.length || latest.latest?.getTime() !== between.at(-1)?.getTime()) mismatches += 1
    }
    t.equal(mismatches, 0, `${s.cron} ${s.timezone}`)
  }
})
