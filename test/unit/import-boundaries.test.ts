// Dependency rules, read from the import statements (dependencies point inward: roles → domain
// modules → platform):
// - the controllers (controllers/**) use the scheduler only through its contract
//   (src/scheduler/contract): the resources, the ports, what a schedule means;
// - the contract is a leaf: it imports nothing of the scheduler outside itself (the platform, the
//   catalog's scheduler vocabularies, which import nothing, and packages only), so depending on it
//   never pulls in the service;
// - src/platform imports only src/platform: never controllers/, a domain folder or the roles;
// - src/catalog imports only itself and src/platform: the catalog states the API and is below the
//   domain modules, which import it (the vocabularies and limits both sides need are the catalog's);
// - no import cycle among the files of src/media;
// - nothing under src/ imports from test/ or bench/.
import path from 'node:path'
import t from 'tap'
import { importSpecifiers, relativeImports } from '../helpers/import-scan.ts'

const under = (file: string, dir: string): boolean => file === dir || file.startsWith(`${dir}${path.sep}`)
const SCHEDULER = path.join('src', 'scheduler')
const CONTRACT = path.join('src', 'scheduler', 'contract')
const PLATFORM = path.join('src', 'platform')
const CATALOG = path.join('src', 'catalog')
const MEDIA = path.join('src', 'media')
/** The scheduler API's vocabularies, bounds and runtimes: the catalog's, re-exported by the contract. */
const SCHEDULER_VOCABULARIES = ['scheduler-vocabulary.ts', 'scheduler-limits.ts', 'scheduler-runtimes.ts'].map((name) => path.join(CATALOG, 'schemas', name))

type Edge = { from: string; target: string }

/** Every cycle a depth-first walk meets, each as `a → b → … → a`. */
function importCycles(edges: readonly Edge[]): string[] {
  const next = new Map<string, string[]>()
  for (const edge of edges) next.set(edge.from, [...(next.get(edge.from) ?? []), edge.target])
  const state = new Map<string, 'open' | 'done'>()
  const stack: string[] = []
  const cycles: string[] = []
  const visit = (file: string): void => {
    state.set(file, 'open')
    stack.push(file)
    for (const target of next.get(file) ?? []) {
      if (state.get(target) === 'open') cycles.push([...stack.slice(stack.indexOf(target)), target].join(' → '))
      else if (state.get(target) === undefined) visit(target)
    }
    stack.pop()
    state.set(file, 'done')
  }
  for (const file of [...next.keys()].sort()) if (state.get(file) === undefined) visit(file)
  return cycles
}

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
  const offending = imports.filter((entry) => !under(entry.target, CONTRACT) && !under(entry.target, PLATFORM) && !SCHEDULER_VOCABULARIES.includes(entry.target))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
    "only the contract itself, src/platform and the catalog's scheduler vocabularies",
  )
  const reached = relativeImports(path.join(CATALOG, 'schemas')).filter((entry) => SCHEDULER_VOCABULARIES.includes(entry.from))
  t.same(
    reached.filter((entry) => !SCHEDULER_VOCABULARIES.includes(entry.target)).map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
    'those vocabularies import nothing but each other, so the contract stays a leaf',
  )
})

t.test('src/platform imports nothing outside src/platform (controllers/, domain folders, roles)', async (t) => {
  const imports = relativeImports(PLATFORM)
  t.ok(imports.length > 30, 'the platform modules were scanned')
  t.ok(
    imports.some((entry) => entry.from === path.join(PLATFORM, 'page-shots.ts') && entry.target === path.join(PLATFORM, 'egress-proxy.ts')),
    'page-shots takes its egress proxy from the platform',
  )
  const offending = imports.filter((entry) => !under(entry.target, PLATFORM))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
  )
})

t.test('src/catalog imports nothing but itself and src/platform (no domain folder, no role, no controller)', async (t) => {
  const imports = relativeImports(CATALOG)
  t.ok(imports.length > 20, 'the catalog modules were scanned')
  const offending = imports.filter((entry) => !under(entry.target, CATALOG) && !under(entry.target, PLATFORM))
  t.same(
    offending.map((entry) => `${entry.from} → ${entry.specifier}`),
    [],
  )
})

t.test('the cycle finder reports a cycle, and only a cycle', async (t) => {
  t.same(
    importCycles([
      { from: 'a', target: 'b' },
      { from: 'b', target: 'c' },
      { from: 'c', target: 'a' },
      { from: 'c', target: 'd' },
    ]),
    ['a → b → c → a'],
  )
  t.same(
    importCycles([
      { from: 'a', target: 'b' },
      { from: 'a', target: 'c' },
      { from: 'b', target: 'c' },
    ]),
    [],
    'a diamond is not a cycle',
  )
})

t.test('no import cycle among the files of src/media', async (t) => {
  const imports = relativeImports(MEDIA).filter((entry) => under(entry.target, MEDIA))
  t.ok(imports.length > 50, 'the media modules were scanned')
  t.same(importCycles(imports), [])
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
