// Writes the Task and Run CRDs to crds/ and to the Helm chart's crds/ directory: their schemas are
// the scheduling contract's (src/scheduler/contract/resources.ts), assembled into CRDs by
// controllers/kubernetes/crds.ts. `npm run gen:crds`; test/unit/crds.test.ts fails when the
// checked-in copies drift.
// `--check` writes nothing and exits 1 listing the stale files (for CI without the test suite).
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { crdFiles } from '../controllers/kubernetes/crds.ts'

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..')
/** Every directory that holds a copy of the generated CRDs. */
export const CRD_DIRS = ['crds', join('charts', 'agent-gateway', 'crds')] as const

async function readOrEmpty(path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8')
  } catch {
    return ''
  }
}

async function main(check: boolean): Promise<number> {
  const stale: string[] = []
  for (const dir of CRD_DIRS) {
    for (const [file, content] of crdFiles()) {
      const path = join(REPO_ROOT, dir, file)
      if ((await readOrEmpty(path)) === content) continue
      stale.push(relative(REPO_ROOT, path))
      if (check) continue
      await mkdir(dirname(path), { recursive: true })
      await writeFile(path, content)
    }
  }
  if (check && stale.length > 0) {
    console.error(`CRDs out of date (run npm run gen:crds): ${stale.join(', ')}`)
    return 1
  }
  console.log(stale.length === 0 ? 'CRDs up to date' : `wrote ${stale.join(', ')}`)
  return 0
}

process.exitCode = await main(process.argv.includes('--check'))
