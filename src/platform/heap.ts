// One full garbage collection once the service has started.
//
// Start-up leaves a lot behind that nothing references any more: on a first start, PGlite's initdb
// (its own WebAssembly instance and memory) and the unpacked cluster files, about 250 MB; on every
// start, the sources and intermediate objects of module loading. With --no-memory-reducer (the
// launcher's flag, bin/agent-gateway.js) V8 never runs the idle-time collection that would free
// them, and an idle service sees no allocation that would: they stayed resident for good. One
// major collection after start frees them (and with the launcher's MALLOC_TRIM_THRESHOLD_ the C
// heap gives the pages back). It does not shrink the young generation (only the memory reducer
// does), so requests keep the heap the flag is there to keep.
import v8 from 'node:v8'
import vm from 'node:vm'

/**
 * Runs one full, synchronous garbage collection (tens of ms). `gc` is taken from a fresh context
 * (`--expose-gc` set at run time only exposes it to contexts created after it, and it is unset
 * again at once): the service's own global, its workers and other contexts never get a `gc`.
 * False when this V8 refuses.
 */
export function collectGarbage(): boolean {
  let gc: unknown
  try {
    v8.setFlagsFromString('--expose-gc')
    gc = vm.runInNewContext('gc')
  } catch {
    return false
  } finally {
    v8.setFlagsFromString('--no-expose-gc')
  }
  if (typeof gc !== 'function') return false
  gc()
  return true
}

/** process.memoryUsage() and V8's heap spaces, in MB (for a debug line). */
export function memoryMb(): Record<string, number> {
  const mb = (bytes: number) => Math.round(bytes / 2 ** 20)
  const usage = process.memoryUsage()
  const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((space) => [space.space_name, mb(space.space_size)]))
  return { rss: mb(usage.rss), heapTotal: mb(usage.heapTotal), heapUsed: mb(usage.heapUsed), external: mb(usage.external), arrayBuffers: mb(usage.arrayBuffers), ...spaces }
}
