import t from 'tap'
import { formatUsd, parseMicros } from '../../src/platform/money.ts'

t.test('formatUsd renders six decimals exactly', async (t) => {
  t.equal(formatUsd(80_000n), '0.080000')
  t.equal(formatUsd(20_000n), '0.020000')
  t.equal(formatUsd(0n), '0.000000')
  t.equal(formatUsd(1_000_000n), '1.000000')
  t.equal(formatUsd(9_007_199_254_740_993n), '9007199254.740993')
  t.equal(formatUsd(-1n), '-0.000001')
})

t.test('parseMicros accepts integers and digit strings only', async (t) => {
  t.equal(parseMicros(5), 5n)
  t.equal(parseMicros('9007199254740993'), 9_007_199_254_740_993n)
  t.equal(parseMicros(0), 0n)
  for (const bad of [-1, 1.5, '1.5', '-3', '01', '', 'abc', null, undefined, {}, Number.MAX_SAFE_INTEGER + 2]) {
    t.equal(parseMicros(bad), undefined, `rejects ${JSON.stringify(bad)}`)
  }
})
