// The roles a process can run, in start order: a role opens after those whose services it uses (the
// gateway sells from the in-process media service). Each loads its own modules only when it runs
// here: a memory process never loads the scheduler or Chromium's driver, a media process never
// loads payments.
import type { RoleModule } from './context.ts'
import { gatewayRole } from './gateway.ts'
import { mediaRole } from './media.ts'
import { memoryRole } from './memory.ts'
import { schedulerRole } from './scheduler.ts'

export const ROLE_MODULES: readonly RoleModule[] = [schedulerRole, mediaRole, gatewayRole, memoryRole]

/** The order the listeners are listed in (README.md's ready lines), whichever role planned them. */
export const LISTENER_ORDER: readonly string[] = ['gateway', 'reviews', 'scheduler', 'memory', 'media', 'controller']
