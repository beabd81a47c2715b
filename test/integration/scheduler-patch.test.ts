// PATCH /api/v1/tasks/{id} through the scheduler service on a real database (PGlite and Postgres):
// each call changes only its own fields, in the row and (end_at, max_runtime_sec) in the Task
// resource; the fields fixed at create (source, runtime, schedule) are never rewritten; two PATCHes
// at once keep each other's changes; a refused PATCH changes nothing.
import t, { type Test } from 'tap'
import { openWorld, WORLD_OWNER, type World } from '../helpers/scheduler-world.ts'
import { throwawayDatabase } from '../helpers/servers.ts'

type Json = Record<string, any>

async function row(world: World, id: string): Promise<Json> {
  const [task] = await world.db.query<{ spec: Json }>(`select spec from scheduler_tasks where id = $1`, [id])
  return (task as { spec: Json }).spec
}

async function scenario(t: Test, world: World): Promise<void> {
  const id = await world.createTask('patch-1', { body: { notify_email: 'first@example.test', max_sibling_calls: 2, max_sibling_spend_micros: 1_000 } })
  const before = await row(world, id)

  const endAt = new Date(world.clock.now().getTime() + 86_400_000).toISOString()
  const view = (await world.service.patchTask(id, WORLD_OWNER, { end_at: endAt, max_runtime_sec: 20 })) as Json
  t.equal(view.task_id ?? view.id, id, 'the answer is the task')
  const after = await row(world, id)
  t.equal(after.max_runtime_sec, 20, 'the row holds the new max_runtime_sec')
  t.equal(new Date(after.end_at).toISOString(), endAt, 'and the new end_at')
  t.equal(after.notify_email, 'first@example.test', 'a field the PATCH did not name is kept')
  for (const field of ['source', 'runtime', 'entrypoint', 'schedule', 'max_amount_usdc_micros']) t.same(after[field], before[field], `${field} is untouched`)

  // Two PATCHes at once, each of its own field: both land.
  await Promise.all([
    world.service.patchTask(id, WORLD_OWNER, { notify_email: 'second@example.test' }),
    world.service.patchTask(id, WORLD_OWNER, { max_sibling_spend_micros: 5_000 }),
  ])
  const both = await row(world, id)
  t.equal(both.notify_email, 'second@example.test', 'the first concurrent PATCH kept its field')
  t.equal(String(both.max_sibling_spend_micros), '5000', 'and the second its own')
  t.equal(both.max_runtime_sec, 20, 'the earlier PATCH is still there')

  // end_at: null removes the end from both copies.
  await world.service.patchTask(id, WORLD_OWNER, { end_at: null })
  t.equal((await row(world, id)).end_at, null, 'end_at cleared in the row')

  // A refused PATCH writes nothing.
  await t.rejects(world.service.patchTask(id, WORLD_OWNER, { max_runtime_sec: -1 }), { code: 'VALIDATION_ERROR' })
  t.equal((await row(world, id)).max_runtime_sec, 20, 'a refused PATCH changed nothing')
  await t.rejects(world.service.patchTask(id, '0x2222222222222222222222222222222222222222', { notify_email: 'x@example.test' }), 'another owner cannot PATCH')
  t.equal((await row(world, id)).notify_email, 'second@example.test', "another owner's PATCH changed nothing")
}

t.test('PGlite', async (t) => {
  const world = await openWorld()
  try {
    await scenario(t, world)
  } finally {
    await world.close()
  }
})

t.test('Postgres', async (t) => {
  const url = await throwawayDatabase(t)
  if (url === undefined) return
  const world = await openWorld({ databaseUrl: url })
  try {
    await scenario(t, world)
  } finally {
    await world.close()
  }
})
