// Dependency rules of the scheduling wing, read from the import statements:
// - the controllers (controllers/**) use the scheduler only through its contract
//   (src/scheduler/contract): the resources, the ports, what a schedule means;
// - the contract is a leaf: it imports nothing of the scheduler outside itself (the platform and
//   packages only), so depending on it never pulls in the service;
// - nothing under src/ imports from test/ or bench/.
import path from 'node:path'
import t from 'tap'
import { importSpecifiers, relativeImports } from '../helpers/import-scan.ts'

const under = (file: string, dir: string): boolean => file === dir || file.startsWith(`${dir}${path.sep}`)
const SCHEDULER = path.join('src', 'scheduler')
const CONTRACT = path.join('src', 'scheduler', 'contract')

t.test('the scanner sees every kind of import, and none in comments', async (t) => {
  const source = [
    "import a from './a.ts'",
    "import type { B } from '../b.ts'",
    'import {',
    '  c,',
    '  d,',
    "} from './c.ts'",
    "export { e } from './e.ts'",
    "export * from './f.ts'",
    "import './g.ts'",
    "const h = await import('./h.ts')",
    "// import z from './commented.ts'",
    "/* export { y } from './block.ts' */",
    "const url = 'https://example.test/x' // from './not-an-import.ts'",
    "const dotted = thing.import('./not-either.ts')",
  ].join('\n')
  t.same(importSpecifiers(source).sort(), ['../b.ts', './a.ts', './c.ts', './e.ts', './f.ts', './g.ts', './h.ts'])
})

t.test('controllers/ imports nothing from src/scheduler except its contract', async (t) => {
  const imports = relativeImports('controllers')
  t.ok(
    imports.some((entry) => under(entry.target, CONTRACT)),
    'the controllers do use the contract (the scan sees their imports)',
  )
  const offending = imports.filter((entry) => under(entry.target, SCHEDULER) && !under(entry.target, CONTRACT))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
  )
})

t.test('the contract imports nothing of the scheduler outside itself', async (t) => {
  const imports = relativeImports(CONTRACT)
  t.ok(imports.length > 0, 'the contract modules were scanned')
  const offending = imports.filter((entry) => !under(entry.target, CONTRACT) && !under(entry.target, path.join('src', 'platform')))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
    'only the contract itself and src/platform',
  )
})

t.test('src/ never imports from test/ or bench/', async (t) => {
  const imports = relativeImports('src')
  t.ok(imports.length > 100, 'the src modules were scanned')
  const offending = imports.filter((entry) => under(entry.target, 'test') || under(entry.target, 'bench'))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
  )
})
