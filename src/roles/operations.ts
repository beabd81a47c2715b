// Every operation with a handler in this build, whichever roles run in a process: the catalog marks
// the rest of the registry 501. Read from the operation lists, not the apps, so that listing them
// loads no role.
import { GATEWAY_OPERATIONS } from '../gateway/operations.ts'
import { MEMORY_OPERATIONS } from '../memory/operations.ts'
import { SCHEDULER_OPERATIONS } from '../scheduler/operations.ts'

export const IMPLEMENTED_OPERATIONS: ReadonlySet<string> = new Set([...GATEWAY_OPERATIONS, ...SCHEDULER_OPERATIONS, ...MEMORY_OPERATIONS])
