// A run's output as the service keeps it: each stream capped (the run is stopped past the cap),
// and how a sandbox's death is read (signals, out-of-memory signs on stderr).

import os from 'node:os'

export class Capture {
  private readonly chunks: Buffer[] = []
  private readonly cap: number
  private kept = 0
  total = 0
  constructor(cap: number) {
    this.cap = cap
  }
  /** Adds a chunk; true once the stream has gone past its cap. */
  push(chunk: Buffer): boolean {
    this.total += chunk.length
    if (this.kept < this.cap) {
      const part = chunk.length <= this.cap - this.kept ? chunk : chunk.subarray(0, this.cap - this.kept)
      this.chunks.push(part)
      this.kept += part.length
    }
    return this.total > this.cap
  }
  text(name: string): string {
    const s = Buffer.concat(this.chunks).toString('utf8')
    return this.total > this.cap ? `${s}\n[agent-gateway: ${name} truncated at ${this.cap} of ${this.total} bytes]\n` : s
  }
  tail(n: number): string {
    return Buffer.concat(this.chunks).subarray(-n).toString('utf8')
  }
}

/** What python, node and libc print when an allocation fails under RLIMIT_DATA / RLIMIT_AS. */
export const OOM_SIGNS = /MemoryError|JavaScript heap out of memory|Array buffer allocation failed|Cannot allocate memory|std::bad_alloc|out of memory/i

export function signalName(n: number): string | null {
  for (const [name, num] of Object.entries(os.constants.signals)) if (num === n) return name
  return null
}
