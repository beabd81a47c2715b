import t from 'tap'
import { configTable, configVariables, loadConfig } from '../../src/platform/config.ts'

t.test('defaults', async (t) => {
  const config = loadConfig({}, '/srv')
  t.equal(config.gatewayPort, 4020)
  t.equal(config.schedulerPort, 4021)
  t.equal(config.host, '127.0.0.1')
  t.equal(config.dataDir, '/srv/.agent-gateway')
  t.equal(config.databaseUrl, undefined)
  t.equal(config.redisUrl, undefined)
  t.equal(config.publicBaseUrl, 'http://127.0.0.1:4020')
  t.equal(config.publicSchedulerUrl, 'http://127.0.0.1:4021')
  t.equal(config.otlpEndpoint, undefined)
})

t.test('overrides', async (t) => {
  const config = loadConfig({
    GATEWAY_PORT: '8080',
    SCHEDULER_PORT: '8081',
    DATA_DIR: '/data',
    DATABASE_URL: 'postgres://u@db:5432/x',
    REDIS_URL: 'redis://cache:6379',
    PUBLIC_BASE_URL: 'https://api.example.com/',
    PUBLIC_SCHEDULER_URL: 'https://scheduler.example.com',
  })
  t.equal(config.gatewayPort, 8080)
  t.equal(config.schedulerPort, 8081)
  t.equal(config.dataDir, '/data')
  t.equal(config.databaseUrl, 'postgres://u@db:5432/x')
  t.equal(config.redisUrl, 'redis://cache:6379')
  t.equal(config.publicBaseUrl, 'https://api.example.com', 'trailing slash dropped')
  t.equal(config.publicSchedulerUrl, 'https://scheduler.example.com')
})

t.test('a bad variable is named in the error', async (t) => {
  const cases: [Record<string, string>, string][] = [
    [{ GATEWAY_PORT: 'eighty' }, 'GATEWAY_PORT'],
    [{ SCHEDULER_PORT: '70000' }, 'SCHEDULER_PORT'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{ REDIS_URL: 'not a url' }, 'REDIS_URL'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ BODY_LIMIT_BYTES: '-1' }, 'BODY_LIMIT_BYTES'],
    [{ PAY_TO_ADDRESS: '0x123' }, 'PAY_TO_ADDRESS'],
  ]
  for (const [env, variable] of cases) {
    t.throws(() => loadConfig(env), { variable, message: new RegExp(variable) }, variable)
  }
})

t.test('the documented table lists every variable', async (t) => {
  const table = configTable()
  for (const variable of configVariables) t.match(table, `\`${variable.name}\``)
})
