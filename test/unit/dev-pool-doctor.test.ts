// The dev chain's pool doctor decides from two observations a poll apart; a transaction seen once
// is in flight, not stuck.
import t from 'tap'
import { diagnose, observePool, type PoolContent } from '../../src/payments/chain/dev-pool-doctor.ts'

const A = '0x00000000000000000000000000000000000000aa'
const tx = (hash: string) => ({ hash })

t.test('a queued transaction whose nonce is the sender next is promotable; one behind a real gap is not', async (t) => {
  const content: PoolContent = { pending: {}, queued: { [A]: { '5': tx('0x5'), '7': tx('0x7') } } }
  const seen = observePool(content, new Map([[A, 5]]))
  t.same([...seen.promotable], ['0x5'])
  t.same([...seen.ready], [])
})

t.test('ready transactions of the same sender count toward the next nonce', async (t) => {
  const content: PoolContent = { pending: { [A]: { '5': tx('0x5') } }, queued: { [A]: { '6': tx('0x6'), '8': tx('0x8') } } }
  const seen = observePool(content, new Map([[A, 5]]))
  t.same([...seen.promotable], ['0x6'])
  t.same([...seen.ready], ['0x5'])
})

t.test('only what two polls both saw is acted on, re-import before mining', async (t) => {
  const first = { ready: new Set(['0xr']), promotable: new Set(['0xq']) }
  t.same(diagnose(undefined, first), { kind: 'none' })
  t.same(diagnose(first, { ready: new Set(['0xr2']), promotable: new Set(['0xq2']) }), { kind: 'none' })
  t.same(diagnose(first, { ready: new Set(['0xr']), promotable: new Set() }), { kind: 'mine', hashes: ['0xr'] })
  t.same(diagnose(first, first), { kind: 'reimport', hashes: ['0xq'] })
})
