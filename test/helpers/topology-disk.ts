// The topology drill's blob volume: the shared BLOB_DIR on a small tmpfs of its own (the chart's
// blobStore claim is a volume of fixed size), so that the disk-full fault can fill it to ENOSPC
// without touching the machine's disks. Mounting needs root (CAP_SYS_ADMIN); without it the drill
// runs on a plain directory and skips the fault, saying why.
import { execFile } from 'node:child_process'
import { rmSync, statfsSync, statSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
const FILLER = 'drill-filler.bin'

export interface BlobVolume {
  dir: string
  /** Undefined when `dir` is a tmpfs of `sizeMb`; else why not (the disk-full fault is skipped). */
  unavailable: string | undefined
  /** Fills the volume to ENOSPC with one file; resolves with the bytes written. */
  fill(): Promise<number>
  /** Removes the filler. */
  free(): void
  /** Bytes free right now. */
  freeBytes(): number
  unmount(): Promise<void>
}

/** Mounts a tmpfs of `sizeMb` MiB on `dir` (an existing, empty directory). */
export async function mountBlobVolume(dir: string, sizeMb: number): Promise<BlobVolume> {
  let unavailable: string | undefined
  if (process.getuid?.() !== 0) unavailable = 'mounting a tmpfs needs root'
  else {
    try {
      await run('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m,mode=0777`, 'tmpfs', dir])
    } catch (error) {
      unavailable = `mount -t tmpfs failed: ${String((error as { stderr?: string }).stderr ?? error).trim()}`
    }
  }
  const filler = path.join(dir, FILLER)
  let mounted = unavailable === undefined
  return {
    dir,
    unavailable,
    async fill() {
      if (!mounted) throw new Error(unavailable)
      // dd stops at ENOSPC (its exit status 1 is the point); the last partial block fills the rest.
      await run('dd', ['if=/dev/zero', `of=${filler}`, 'bs=1M'], { maxBuffer: 1 << 16 }).catch(() => undefined)
      await run('dd', ['if=/dev/zero', `of=${filler}`, 'bs=4k', 'oflag=append', 'conv=notrunc'], { maxBuffer: 1 << 16 }).catch(() => undefined)
      return statSync(filler).size
    },
    free() {
      rmSync(filler, { force: true })
    },
    freeBytes() {
      const stats = statfsSync(dir)
      return stats.bavail * stats.bsize
    },
    async unmount() {
      if (!mounted) return
      mounted = false
      await run('umount', [dir]).catch(() => run('umount', ['-l', dir]))
    },
  }
}
