// Process groups a drill started (each CLI leads its own): killed with SIGKILL, and all of them
// when the drill's own process exits, since nothing else would kill them if the drill dies first.

const owned = new Set<number>()
let exitHook = false

export function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL')
  } catch {
    // already gone
  }
}

/** Remembers `pgid` to be killed when this process exits. */
export function ownGroup(pgid: number): void {
  owned.add(pgid)
  if (exitHook) return
  exitHook = true
  process.on('exit', killOwnedGroups)
}

/** Forgets `pgid` (it was stopped or killed on purpose). */
export function disownGroup(pgid: number): void {
  owned.delete(pgid)
}

export function killOwnedGroups(): void {
  for (const group of owned) killGroup(group)
}
