// Route schemas compile on a route's first request (src/platform/http.ts), not at start. A schema
// ajv or fast-json-stringify refuses would then surface only when that route first answers: here
// every listener of every role is built as `npm start` builds them and every schema not compiled
// yet is compiled, so such a schema fails the suite instead.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/platform/config.ts'
import { compileRouteSchemas } from '../../src/platform/http.ts'
import { createLogger } from '../../src/platform/logger.ts'
import { ROLES, start } from '../../src/runtime.ts'
import { freePort } from '../helpers/cli.ts'

t.test('every route schema of every listener compiles', async (t) => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'agw-route-schemas-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const env: Record<string, string> = { DATA_DIR: dataDir, MEDIA_INTERNAL_TOKEN: 'route-schemas-media-token-0123456789abcdef' }
  for (const name of ['GATEWAY_PORT', 'SCHEDULER_PORT', 'MEMORY_PORT', 'MEDIA_PORT', 'CONTROLLER_PORT', 'REVIEWS_PORT']) env[name] = String(await freePort())
  const running = await start(loadConfig(env), [...ROLES], createLogger('warn'))
  t.teardown(() => running.stop())
  t.ok(running.listeners.length >= 4, `listeners built: ${running.listeners.map((l) => l.name).join(', ')}`)
  const before = compileRouteSchemas()
  t.ok(before > 100, `${before} validators and serializers were left to their first request`)
  t.equal(compileRouteSchemas(), 0, 'each compiled once')
  const openapi = await fetch(`${running.listeners.find((l) => l.name === 'gateway')?.url}/openapi.json`)
  t.equal(openapi.status, 200, 'the listener answers with what was compiled ahead')
})
