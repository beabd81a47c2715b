// Per-run work dirs left behind by a service that died mid-run: each run dir names its owner
// (pid, host, boot, pid namespace), so a later process removes the dirs of dead owners and never
// a live process's (several services and parallel tests may share one temp dir).
import { lstat, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'

/** File in each run's work dir naming the process that owns it (the dir itself is never bound). */
export const OWNER_FILE = 'owner.json'
/** A run lasts at most maxRuntimeSec (≤ 24 h) + the install budget (default 300 s): 25 h is past any. */
export const MAX_RUN_AGE_MS = 25 * 3600_000

export interface OwnerMarker {
  pid: number
  host: string
  /** /proc/sys/kernel/random/boot_id: pids of another boot are all dead. */
  bootId: string | null
  /** /proc/self/ns/pid: a pid means something only in the same pid namespace. */
  pidNamespace: string | null
}

let ownerMarkerCache: Promise<OwnerMarker> | undefined

/** Writes the owner marker into a new run's work dir (first, before anything else goes there). */
export async function writeOwnerMarker(workDir: string): Promise<void> {
  await writeFile(path.join(workDir, OWNER_FILE), `${JSON.stringify(await ownerMarker())}\n`, { mode: 0o644 })
}

/** This process's marker (what its run dirs record). */
export function ownerMarker(): Promise<OwnerMarker> {
  ownerMarkerCache ??= (async () => ({
    pid: process.pid,
    host: os.hostname(),
    bootId: await readFile('/proc/sys/kernel/random/boot_id', 'utf8').then(
      (text) => text.trim(),
      () => null,
    ),
    pidNamespace: await readlink('/proc/self/ns/pid').catch(() => null),
  }))()
  return ownerMarkerCache
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM' // alive, someone else's
  }
}

/**
 * Whether the process that made a work dir is gone: 'dead', 'alive', or 'unknown' when its marker
 * is missing or unreadable (an older service, or a dir being set up right now) or it was written in
 * another pid namespace or on another host (a /tmp shared with containers), where its pid cannot be
 * judged from here.
 */
async function ownerState(dir: string): Promise<'dead' | 'alive' | 'unknown'> {
  const raw = await readFile(path.join(dir, OWNER_FILE), 'utf8').catch(() => null)
  if (raw === null) return 'unknown'
  let marker: Partial<OwnerMarker>
  try {
    marker = JSON.parse(raw) as Partial<OwnerMarker>
  } catch {
    return 'unknown'
  }
  const self = await ownerMarker()
  if (typeof marker.pid !== 'number' || !Number.isInteger(marker.pid) || marker.pid <= 0 || marker.host !== self.host) return 'unknown'
  if (self.bootId !== null && typeof marker.bootId === 'string' && marker.bootId !== self.bootId) return 'dead' // made before a reboot
  if (marker.pidNamespace !== self.pidNamespace) return 'unknown'
  if (marker.pid === process.pid) return 'alive'
  return processAlive(marker.pid) ? 'alive' : 'dead'
}

/**
 * Removes per-run work dirs (`agw-run-*` in `workRoot`) left behind by a service that died mid-run
 * (the sandboxes themselves die with it: --die-with-parent). Several service processes (and
 * parallel tests) may share the workRoot, so a dir goes only when no live process can own it:
 * - its owner marker (OWNER_FILE, written first in every run dir) names a pid of this host, boot
 *   and pid namespace that no longer runs, or a previous boot; or
 * - it is older than `olderThanMs` (default MAX_RUN_AGE_MS, longer than any run can last), which
 *   covers dirs without a readable marker, owners in other pid namespaces, and a dead owner's pid
 *   taken by a new process.
 * Called at startup of the controller role (local executor). Returns how many dirs were removed.
 */
export async function removeStaleWorkDirs(workRoot = os.tmpdir(), olderThanMs = MAX_RUN_AGE_MS, now = Date.now()): Promise<number> {
  let removed = 0
  for (const name of await readdir(workRoot).catch(() => [] as string[])) {
    if (!name.startsWith('agw-run-')) continue
    const dir = path.join(workRoot, name)
    const st = await lstat(dir).catch(() => null)
    if (!st?.isDirectory()) continue
    if (now - st.mtimeMs < olderThanMs && (await ownerState(dir)) !== 'dead') continue
    if (
      await rm(dir, { recursive: true, force: true }).then(
        () => true,
        () => false,
      )
    )
      removed++
  }
  return removed
}
