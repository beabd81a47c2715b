// The blind index: term MACs are per-owner (another key gives disjoint MACs), word forms that stem
// alike share a MAC, filter values are bound to their kind and normalised; the packed form round
// trips, is canonical, and any malformed buffer is refused.
import { createHmac, randomBytes } from 'node:crypto'
import t from 'tap'
import { blindQueryTerms, blindTerms, blindValue, packBlindTerms, termMac, unpackBlindTerms } from '../../src/memory/search/blind-index.ts'
import { termsOf } from '../../src/memory/search/text.ts'
import type { BlindTerms } from '../../src/memory/types.ts'

const keyA = Buffer.alloc(32, 1)
const keyB = Buffer.alloc(32, 2)

t.test('different keys give disjoint MACs for the same words', async (t) => {
  const words = termsOf('the user prefers dark mode in the code editor and runs every morning')
  const a = new Set(blindTerms(keyA, words).terms.keys())
  const b = new Set(blindTerms(keyB, words).terms.keys())
  t.equal(a.size, new Set(words).size)
  t.equal([...a].filter((mac) => b.has(mac)).length, 0, 'no MAC in common')
  for (const mac of a) t.match(mac, /^[0-9a-f]{24}$/, '12-byte lowercase hex')
  t.equal(termMac(keyA, 'run'), termMac(keyA, 'run'), 'deterministic')
  t.not(termMac(keyA, 'run'), termMac(keyB, 'run'))
})

t.test('running and runs share one MAC; tf and length count occurrences', async (t) => {
  const blind = blindTerms(keyA, termsOf('Running daily: she runs, he ran, they run'))
  const run = termMac(keyA, 'run')
  t.equal(blind.terms.get(run), 3, 'running, runs, run (ran is another word)')
  t.equal(blind.length, 5, 'run, daili, run, ran, run (she/he/they are stopwords)')
  t.same(blindQueryTerms(keyA, termsOf('runs running')), [run, run], 'query MACs keep repeats')
  t.same(blindTerms(keyA, []), { terms: new Map(), length: 0 })
})

t.test('blindValue: 16 bytes, bound to its kind, normalised, case-sensitive', async (t) => {
  const tag = blindValue(keyA, 'tag', 'work')
  t.equal(tag.length, 16)
  t.ok(tag.equals(blindValue(keyA, 'tag', '  ｗｏｒｋ ')), 'NFKC and trim')
  t.notOk(tag.equals(blindValue(keyA, 'context', 'work')), 'a tag never equals a context of the same text')
  t.notOk(tag.equals(blindValue(keyB, 'tag', 'work')), 'per key')
  t.notOk(tag.equals(blindValue(keyA, 'tag', 'Work')), 'exact-match fields keep case')
})

t.test('pack/unpack round trip, canonical bytes', async (t) => {
  const blind = blindTerms(keyA, termsOf('alpha beta beta gamma gamma gamma delta'))
  const packed = packBlindTerms(blind)
  t.equal(packed.length, 5 + blind.terms.size * 14, 'header + 14 bytes per term')
  t.same(unpackBlindTerms(packed), blind)
  // The same index built in another order packs to the same bytes.
  const reversed: BlindTerms = { terms: new Map([...blind.terms].reverse()), length: blind.length }
  t.ok(packBlindTerms(reversed).equals(packed))
  t.same(unpackBlindTerms(packBlindTerms({ terms: new Map(), length: 0 })), { terms: new Map(), length: 0 }, 'empty')
  // A tf above 65,535 is stored clamped (the length still bounds the sum).
  const mac = termMac(keyA, 'x')
  t.same(unpackBlindTerms(packBlindTerms({ terms: new Map([[mac, 70_000]]), length: 70_000 })).terms.get(mac), 65_535)
  // A subarray of a larger buffer (as pg returns bytea) unpacks.
  const padded = Buffer.concat([Buffer.from('junk'), packed])
  t.same(unpackBlindTerms(padded.subarray(4)), blind)
  // Random indexes of many terms round trip.
  const big = new Map<string, number>()
  for (let i = 0; i < 500; i++) big.set(randomBytes(12).toString('hex'), 1 + (i % 9))
  const length = [...big.values()].reduce((a, b) => a + b, 0) + 7
  t.same(unpackBlindTerms(packBlindTerms({ terms: big, length })), { terms: big, length })
})

t.test('packBlindTerms refuses what it cannot represent', async (t) => {
  const mac = termMac(keyA, 'x')
  t.throws(() => packBlindTerms({ terms: new Map([['XYZ', 1]]), length: 1 }), RangeError, 'not a MAC')
  t.throws(() => packBlindTerms({ terms: new Map([[mac.toUpperCase(), 1]]), length: 1 }), RangeError, 'uppercase hex')
  t.throws(() => packBlindTerms({ terms: new Map([[mac, 0]]), length: 1 }), RangeError, 'zero tf')
  t.throws(() => packBlindTerms({ terms: new Map([[mac, 1.5]]), length: 2 }), RangeError, 'fractional tf')
  t.throws(() => packBlindTerms({ terms: new Map(), length: -1 }), RangeError, 'negative length')
  t.throws(() => packBlindTerms({ terms: new Map(), length: 2 ** 32 }), RangeError, 'length over u32')
})

t.test('unpackBlindTerms refuses malformed buffers', async (t) => {
  const good = packBlindTerms(blindTerms(keyA, termsOf('alpha beta gamma')))
  const mutate = (fn: (b: Buffer) => void): Buffer => {
    const copy = Buffer.from(good)
    fn(copy)
    return copy
  }
  const cases: [string, Uint8Array][] = [
    ['empty', Buffer.alloc(0)],
    ['header only, truncated', good.subarray(0, 4)],
    ['a partial entry', good.subarray(0, good.length - 1)],
    ['an extra byte', Buffer.concat([good, Buffer.alloc(1)])],
    ['unknown version', mutate((b) => b.writeUInt8(2, 0))],
    ['zero tf', mutate((b) => b.writeUInt16BE(0, 5 + 12))],
    ['tf sum over the length', mutate((b) => b.writeUInt32BE(2, 1))],
    ['entries out of order', Buffer.concat([good.subarray(0, 5), good.subarray(19, 33), good.subarray(5, 19), good.subarray(33)])],
    [
      'a duplicated entry',
      (() => {
        const dup = Buffer.concat([good.subarray(0, 19), good.subarray(5, 19)])
        dup.writeUInt32BE(10, 1)
        return dup
      })(),
    ],
  ]
  for (const [name, buf] of cases) t.throws(() => unpackBlindTerms(buf), RangeError, name)
  t.same(unpackBlindTerms(good).terms.size, 3, 'the original still unpacks')
})

t.test('term MACs are HMAC-SHA256 (RFC 2104) for keys of any length', async (t) => {
  for (const length of [1, 16, 32, 63, 64, 65, 100]) {
    const k = randomBytes(length)
    for (const term of ['run', 'naïve', '東京', '']) {
      t.equal(termMac(k, term), createHmac('sha256', k).update(term, 'utf8').digest().subarray(0, 12).toString('hex'), `${length}-byte key, ${JSON.stringify(term)}`)
    }
  }
  // The pads are cached per key Buffer: a copy of the key gives the same MACs.
  const k = Buffer.alloc(32, 9)
  t.equal(termMac(Buffer.from(k), 'x'), termMac(k, 'x'))
})
