// Reads the import graph from source text: module specifiers of static imports, re-exports,
// side-effect and dynamic imports (comments ignored), resolved to files. For tests that hold
// dependency rules (test/unit/import-boundaries.test.ts).
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

/** The source without comments; string and template literals kept as they are. */
export function stripComments(source: string): string {
  let out = ''
  let i = 0
  while (i < source.length) {
    const c = source[i] as string
    const next = source[i + 1]
    if (c === '/' && next === '/') {
      while (i < source.length && source[i] !== '\n') i += 1
    } else if (c === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2)
      i = end === -1 ? source.length : end + 2
    } else if (c === "'" || c === '"' || c === '`') {
      let j = i + 1
      while (j < source.length && source[j] !== c) j += source[j] === '\\' ? 2 : 1
      out += source.slice(i, j + 1)
      i = j + 1
    } else {
      out += c
      i += 1
    }
  }
  return out
}

/** Module specifiers of static imports, re-exports, side-effect and dynamic imports. */
export function importSpecifiers(source: string): string[] {
  const code = stripComments(source)
  const found: string[] = []
  for (const match of code.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?\bfrom\s*(['"])([^'"\n]+)\1/g)) found.push(match[2] as string)
  for (const match of code.matchAll(/(?:^|[^.\w])import\s*(?:\(\s*)?(['"])([^'"\n]+)\1/g)) found.push(match[2] as string)
  return [...new Set(found)]
}

/** Every .ts file under `dir` (absolute), recursively. */
export function tsFilesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : tsFilesUnder(full)
    return entry.name.endsWith('.ts') ? [full] : []
  })
}

/** The file a relative specifier names (absolute path), or undefined for a package import. */
export function resolveImport(from: string, specifier: string): string | undefined {
  if (!specifier.startsWith('.')) return undefined
  const target = path.resolve(path.dirname(from), specifier)
  for (const candidate of [target, `${target}.ts`, path.join(target, 'index.ts')]) if (existsSync(candidate) && candidate.endsWith('.ts')) return candidate
  return target
}

/** Each relative import of the files under `dir`: `{ from, specifier, target }`, paths relative to the repository. */
export function relativeImports(dir: string): Array<{ from: string; specifier: string; target: string }> {
  return tsFilesUnder(path.join(REPO_ROOT, dir)).flatMap((file) =>
    importSpecifiers(readFileSync(file, 'utf8')).flatMap((specifier) => {
      const target = resolveImport(file, specifier)
      return target === undefined ? [] : [{ from: path.relative(REPO_ROOT, file), specifier, target: path.relative(REPO_ROOT, target) }]
    }),
  )
}
