// Shared by the Task controller's integration tests: a store with some methods replaced, and the
// wait for a controller to settle after its watches delivered.
import type { TaskController } from '../../controllers/task-controller.ts'
import type { ResourceStore, RunResource, TaskResource } from '../../src/scheduler/contract/index.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** `store` with some methods replaced (the others bound to it: the stores have private fields). */
export function overriding<R extends TaskResource | RunResource>(store: ResourceStore<R>, methods: Partial<ResourceStore<R>>): ResourceStore<R> {
  const out: Record<string, unknown> = {}
  for (const name of ['get', 'list', 'create', 'replaceSpec', 'patchStatus', 'delete', 'watch'] as const) {
    out[name] = (store[name] as (...args: unknown[]) => unknown).bind(store)
  }
  return Object.assign(out, { kind: store.kind }, methods) as unknown as ResourceStore<R>
}

/** Lets the watches deliver, then waits for the queue to be quiet. */
export async function quiet(c: TaskController): Promise<void> {
  await sleep(150)
  await c.idle()
  await sleep(150)
  await c.idle()
}
