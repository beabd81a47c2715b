// Who a run is on the host, and what that identity can reach. When the service is root each
// concurrent run gets its own host uid, so RLIMIT_NPROC counts that run only; otherwise runs share
// the service's uid.

import { stat } from 'node:fs/promises'
import path from 'node:path'
import { SandboxUnavailableError } from './sandbox-tools.ts'

export const DEFAULT_UID_BASE = 1_600_000

/** Slots (offsets from the uid base) of the runs and probes in flight in this process. */
const usedSlots = new Set<number>()

export interface RunIdentity {
  uid: number
  gid: number
  /** The sandbox is spawned as uid/gid (the service is root); else it runs as the service. */
  setuid: boolean
  release(): void
}

/** The lowest free uid slot from `base`; release() frees it when the run is over. */
export function acquireIdentity(base: number): RunIdentity {
  const uid = process.getuid?.() ?? 0
  if (uid !== 0) return { uid, gid: process.getgid?.() ?? uid, setuid: false, release() {} }
  let slot = 0
  while (usedSlots.has(slot)) slot++
  usedSlots.add(slot)
  return { uid: base + slot, gid: base + slot, setuid: true, release: () => usedSlots.delete(slot) }
}

/**
 * bwrap runs as the run's uid and resolves its bind sources by path, so every directory from /
 * down to a bound path must be searchable by others (o+x): /tmp and /usr are, /root is not.
 * Returns the first directory that is not, or null.
 */
export async function notSearchable(target: string): Promise<string | null> {
  if ((process.getuid?.() ?? 0) !== 0) return null // bwrap runs as the service's own uid
  for (let dir = path.resolve(target); ; dir = path.dirname(dir)) {
    const st = await stat(dir)
    if (st.isDirectory() && (st.mode & 0o001) === 0) return dir
    if (dir === path.dirname(dir)) return null
  }
}

/** Rejects with SandboxUnavailableError when the sandbox uids cannot reach `workRoot`. */
export async function checkWorkRoot(workRoot: string): Promise<void> {
  const blocked = await notSearchable(workRoot)
  if (blocked) {
    throw new SandboxUnavailableError(`sandbox workRoot ${workRoot}: ${blocked} is not searchable by the sandbox uids (chmod o+x ${blocked}, or use a workRoot under /tmp)`)
  }
}
