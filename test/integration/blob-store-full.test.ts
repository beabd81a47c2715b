// A full blob volume (ENOSPC, or a quota's EDQUOT) is an outage of the store, not a bug of the
// request: the write is answered 503 problem+json with Retry-After (the topology drill's disk-full
// fault found 500 `internal`), and once space is freed the same write succeeds.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { LocalBlobStore } from '../../src/platform/blobs.ts'
import { unavailableDependency } from '../../src/platform/dependency-errors.ts'
import { createHttpApp, toAppError } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'

t.test('ENOSPC and EDQUOT from the filesystem are 503 unavailable with Retry-After', async (t) => {
  for (const code of ['ENOSPC', 'EDQUOT']) {
    const error = Object.assign(new Error(`${code}: no space left on device, write`), { code, syscall: 'write' })
    t.equal(unavailableDependency(error), 'storage', `${code} is the store's outage`)
    const answer = toAppError(error)
    t.match({ status: answer.status, code: answer.code, retry: answer.headers['retry-after'] }, { status: 503, code: 'unavailable', retry: /^\d+$/ }, code)
  }
  t.equal(unavailableDependency(Object.assign(new Error('ENOENT'), { code: 'ENOENT' })), undefined, 'a missing file is not an outage')
})

/** A tmpfs of `kb` KiB on a fresh directory, or why not (mounting needs root). */
function smallVolume(kb: number): { dir: string; unmount(): void } | string {
  if (process.getuid?.() !== 0) return 'mounting a tmpfs needs root'
  const dir = mkdtempSync(path.join(os.tmpdir(), 'agw-blob-full-'))
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${kb}k`, 'tmpfs', dir], { stdio: 'pipe' })
  } catch (error) {
    rmSync(dir, { recursive: true, force: true })
    return `mount -t tmpfs failed: ${String((error as { stderr?: Buffer }).stderr ?? error).trim()}`
  }
  return {
    dir,
    unmount() {
      execFileSync('umount', [dir])
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const volume = smallVolume(256)
t.test('a blob write on a full volume: 503 with Retry-After, then 200 once space is freed', { skip: typeof volume === 'string' ? volume : false }, async (t) => {
  if (typeof volume === 'string') return
  t.teardown(() => volume.unmount())
  const blobs = new LocalBlobStore(volume.dir)
  const app = createHttpApp({ name: 'test', logger: createLogger('silent'), metrics: createMetrics({ defaultMetrics: false }), bodyLimitBytes: 1 << 16 })
  app.post('/store', async () => blobs.put('audio/probe.wav', Buffer.alloc(64 * 1024, 1), 'audio/wav'))
  t.teardown(() => app.close())
  const filler = path.join(volume.dir, 'filler')
  try {
    writeFileSync(filler, Buffer.alloc(512 * 1024)) // larger than the volume: stops at ENOSPC
  } catch {
    // the volume is full, as intended
  }
  const full = await app.inject({ method: 'POST', url: '/store' })
  t.equal(full.statusCode, 503, 'refused while full')
  t.match(full.headers['content-type'], /^application\/problem\+json/)
  t.match(full.headers['retry-after'], /^\d+$/)
  t.match(full.json(), { code: 'unavailable', retryable: true })
  rmSync(filler)
  const freed = await app.inject({ method: 'POST', url: '/store' })
  t.equal(freed.statusCode, 200, 'stored once there is room')
})
