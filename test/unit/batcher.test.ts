// Group commit (src/platform/batcher.ts) fails per item: a batch the database refuses for its data
// is written again in halves until the items at fault fail alone; their neighbours succeed. Errors
// that are not an item's fault (connection, timeout) still reach the whole batch, unretried.
import t from 'tap'
import { Batcher, isItemFault } from '../../src/platform/batcher.ts'
import { DbError } from '../../src/platform/db/errors.ts'

const nulError = () => new DbError('unsupported Unicode escape sequence', '22P05')

/** A write that refuses (atomically) any batch holding a poison item, recording every batch. */
function fakeDb(isPoison: (item: string) => boolean, error: () => unknown = nulError) {
  const batches: string[][] = []
  const written: string[] = []
  const write = async (items: string[]): Promise<string[]> => {
    batches.push([...items])
    await new Promise((resolve) => setImmediate(resolve))
    if (items.some(isPoison)) throw error()
    written.push(...items)
    return items.map((item) => `ok:${item}`)
  }
  return { batches, written, write }
}

async function outcomes(promises: Promise<string>[]): Promise<string[]> {
  return (await Promise.allSettled(promises)).map((r) => (r.status === 'fulfilled' ? r.value : `err:${(r.reason as { code?: string }).code ?? String(r.reason)}`))
}

t.test('isItemFault: data errors only', async (t) => {
  for (const code of ['22P05', '22021', '22P02', '22003', '23505', '23503', '23514', '21000', '54000']) t.ok(isItemFault(new DbError('x', code)), code)
  for (const code of ['08006', '57014', '57P01', '53300', '40001', '40P01', 'XX000', '25P02', '42P01']) t.notOk(isItemFault(new DbError('x', code)), code)
  t.notOk(isItemFault(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' })))
  t.notOk(isItemFault(new Error('timeout')))
  t.notOk(isItemFault(undefined))
})

t.test('1 poison among 12 valid items: only its caller fails', async (t) => {
  const db = fakeDb((item) => item === 'poison')
  const batcher = new Batcher<string, string>(db.write, (item) => item, 500)
  const items = ['v0', 'v1', 'v2', 'v3', 'v4', 'v5', 'poison', 'v6', 'v7', 'v8', 'v9', 'v10', 'v11']
  const results = await outcomes(items.map((item) => batcher.submit(item)))
  t.same(
    results,
    items.map((item) => (item === 'poison' ? 'err:22P05' : `ok:${item}`)),
  )
  t.same(db.written.sort(), items.filter((item) => item !== 'poison').sort(), 'every valid item written exactly once')
  t.same(db.batches[1], items.slice(1), 'the neighbours shared a batch with the poison')
  t.ok(db.batches.length <= 2 + 2 * Math.ceil(Math.log2(12)), `${db.batches.length} writes in all`)
})

t.test('several poisons, submission order kept', async (t) => {
  const db = fakeDb((item) => item.startsWith('p'))
  const batcher = new Batcher<string, string>(db.write, (item) => item, 500)
  const items = ['first', ...Array.from({ length: 40 }, (_, i) => (i % 7 === 3 ? `p${i}` : `v${i}`))]
  const results = await outcomes(items.map((item) => batcher.submit(item)))
  t.same(
    results,
    items.map((item) => (item.startsWith('p') ? 'err:22P05' : `ok:${item}`)),
  )
  t.same(
    db.written,
    items.filter((item) => !item.startsWith('p')),
    'written in submission order',
  )
})

t.test('every item poisoned: each fails alone, 2n − 1 writes at most', async (t) => {
  const db = fakeDb(() => true)
  const batcher = new Batcher<string, string>(db.write, (item) => item, 500)
  const items = Array.from({ length: 17 }, (_, i) => `p${i}`)
  const results = await outcomes(items.map((item) => batcher.submit(item)))
  t.same(
    results,
    items.map(() => 'err:22P05'),
  )
  t.ok(db.batches.length <= 1 + (2 * 16 - 1), `${db.batches.length} writes`)
})

t.test('errors that are not an item fault reach the whole batch, unretried', async (t) => {
  const lost = Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' })
  const db = fakeDb(
    (item) => item === 'trigger',
    () => lost,
  )
  const batcher = new Batcher<string, string>(db.write, (item) => item, 500)
  const items = ['a', 'b', 'trigger', 'c']
  const results = await outcomes(items.map((item) => batcher.submit(item)))
  t.same(results, ['ok:a', 'err:ECONNRESET', 'err:ECONNRESET', 'err:ECONNRESET'])
  t.equal(db.batches.length, 2, 'no retry')
})

t.test('a custom isolate predicate', async (t) => {
  const db = fakeDb(
    (item) => item === 'bad',
    () => new Error('app-level refusal'),
  )
  const batcher = new Batcher<string, string>(db.write, (item) => item, 500, { isolate: (error) => (error as Error).message === 'app-level refusal' })
  const results = await outcomes(['x', 'y', 'bad', 'z'].map((item) => batcher.submit(item)))
  t.same(results, ['ok:x', 'ok:y', 'err:Error: app-level refusal', 'ok:z'])
  const never = new Batcher<string, string>(fakeDb((item) => item === 'bad').write, (item) => item, 500, { isolate: () => false })
  t.same(await outcomes(['x', 'y', 'bad', 'z'].map((item) => never.submit(item))), ['ok:x', 'err:22P05', 'err:22P05', 'err:22P05'], 'isolation can be turned off')
})

t.test('items of one key still never share a batch while isolating', async (t) => {
  const db = fakeDb((item) => item.endsWith('!'))
  const batcher = new Batcher<string, string>(db.write, (item) => item.slice(0, 1), 500)
  const items = ['a1', 'b1', 'c!', 'a2', 'b2', 'a3']
  const results = await outcomes(items.map((item) => batcher.submit(item)))
  t.same(results, ['ok:a1', 'ok:b1', 'err:22P05', 'ok:a2', 'ok:b2', 'ok:a3'])
  for (const batch of db.batches) t.equal(new Set(batch.map((item) => item.slice(0, 1))).size, batch.length, `batch ${batch.join(',')} has distinct keys`)
  t.same(db.written, ['a1', 'b1', 'a2', 'b2', 'a3'])
})
