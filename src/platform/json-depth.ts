// How deep a JSON body may nest, defined once. JSON.parse builds any depth the body limit allows
// (100,000 levels fit in 200 KB), but what runs after it may recurse: JSON.stringify (the memory
// write's canonical body, jsonb parameters, the MCP dispatcher's re-encoding) throws a RangeError
// a few thousand levels down, after the 402 was answered. A body nested deeper than this is
// refused at parsing (createHttpApp's JSON parser, src/platform/http.ts) as a 400 naming its
// outermost member, before any schema, access rule, 402 or handler. No typed body in the catalogue
// nests past 4 levels (a review's submission); 64 leaves the free-form fields (memory metadata, a
// helper call's body) ample room.
import { AppError } from './errors.ts'

/** Levels of objects and arrays a JSON body may nest, the body itself being level 1. */
export const MAX_JSON_DEPTH = 64

/**
 * true when `value` (parsed JSON) nests objects and arrays more than `levels` deep, counting
 * `value` itself as level 1 (a scalar has none). Walks with an explicit stack, so no depth can
 * overflow the call stack, and stops at the first container past the limit.
 */
export function nestsDeeperThan(value: unknown, levels: number): boolean {
  if (value === null || typeof value !== 'object') return false
  if (levels < 1) return true
  // Parallel stacks rather than a frame object per container: this runs on every JSON body.
  const containers: object[] = [value]
  const depths: number[] = [1]
  for (let container = containers.pop(); container !== undefined; container = containers.pop()) {
    const depth = depths.pop() as number
    if (Array.isArray(container)) {
      for (const item of container) {
        if (item === null || typeof item !== 'object') continue
        if (depth === levels) return true
        containers.push(item)
        depths.push(depth + 1)
      }
      continue
    }
    for (const key in container) {
      const item = (container as Record<string, unknown>)[key]
      if (item === null || typeof item !== 'object') continue
      if (depth === levels) return true
      containers.push(item)
      depths.push(depth + 1)
    }
  }
  return false
}

function tooDeep(field: string): AppError {
  const message = `must not nest objects and arrays more than ${MAX_JSON_DEPTH} levels deep`
  return new AppError(
    'validation_error',
    `${field} is nested too deeply: a JSON body may nest objects and arrays at most ${MAX_JSON_DEPTH} levels deep (the body itself is level 1)`,
    {
      field,
      extensions: { errors: [{ field, message }] },
    },
  )
}

/** The 400 for `value`, a member of a body (level 2), when it nests past the body's limit; undefined when it does not. */
export function memberDepthError(value: unknown, field: string): AppError | undefined {
  return nestsDeeperThan(value, MAX_JSON_DEPTH - 1) ? tooDeep(field) : undefined
}

/** The 400 for a parsed JSON body nesting deeper than MAX_JSON_DEPTH, naming its outermost member that does; undefined when it does not. */
export function bodyDepthError(body: unknown): AppError | undefined {
  if (!nestsDeeperThan(body, MAX_JSON_DEPTH)) return undefined
  // Rare: walk again per member to name the one to blame.
  for (const [key, member] of Object.entries(body as object)) {
    const error = memberDepthError(member, `body.${key}`)
    if (error !== undefined) return error
  }
  return tooDeep('body')
}
