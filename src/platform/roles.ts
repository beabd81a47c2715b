// The roles one agent-gateway process can run. A module of its own so that the command line
// (--help, argument checks) knows them without loading the composition root (src/runtime.ts).
export const ROLES = ['gateway', 'scheduler-api', 'controller', 'media', 'memory'] as const
export type Role = (typeof ROLES)[number]

export function isRole(name: string): name is Role {
  return (ROLES as readonly string[]).includes(name)
}
