// Docs that are generated from code must not drift from it.
import t from 'tap'
import { readFileSync } from 'node:fs'
import { configTable } from '../../src/platform/config.ts'

t.test('README holds the current configuration table', async (t) => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  t.ok(readme.includes(configTable()), 'README configuration table matches src/platform/config.ts (regenerate with `agent-gateway config`)')
})
