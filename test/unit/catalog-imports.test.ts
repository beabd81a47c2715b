// Dependencies point one way: src/payments imports the catalog (registry types, operations, the
// network constants it advertises), never the other way round. Scans the import statements of
// every module under src/catalog, and of every module they reach through relative imports (so
// the rule cannot be dodged through src/platform), for a path into src/payments. The scanner
// (test/helpers/import-scan.ts) is tested in import-boundaries.test.ts.
import t from 'tap'
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { importSpecifiers, REPO_ROOT, resolveImport, tsFilesUnder } from '../helpers/import-scan.ts'

const SRC = path.join(REPO_ROOT, 'src')
const CATALOG = path.join(SRC, 'catalog')
const PAYMENTS = path.join(SRC, 'payments')
const under = (file: string, dir: string): boolean => file === dir || file.startsWith(dir + path.sep)

t.test('src/catalog imports nothing from src/payments, directly or through what it imports', async (t) => {
  const catalogFiles = tsFilesUnder(CATALOG)
  t.ok(catalogFiles.length > 5, 'the catalog modules were found')
  const seen = new Set<string>()
  const queue = [...catalogFiles]
  const offending: string[] = []
  while (queue.length > 0) {
    const file = queue.pop() as string
    if (seen.has(file)) continue
    seen.add(file)
    if (!existsSync(file)) continue
    for (const specifier of importSpecifiers(readFileSync(file, 'utf8'))) {
      const target = resolveImport(file, specifier)
      if (target === undefined) continue
      if (under(target, PAYMENTS)) offending.push(`${path.relative(REPO_ROOT, file)} → ${specifier}`)
      else if (under(target, SRC)) queue.push(target)
    }
  }
  t.same(offending, [], 'no import path leads from src/catalog into src/payments')
  t.ok(
    [...seen].some((file) => under(file, path.join(SRC, 'platform'))),
    'the scan followed imports out of the catalog (into src/platform)',
  )
  t.ok(seen.has(path.join(CATALOG, 'networks.ts')), 'the network constants are on the catalog side')
})
