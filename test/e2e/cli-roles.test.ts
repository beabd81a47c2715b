// One role per process, as the Helm chart runs them (`args: [ROLE]`): `agent-gateway memory` is
// the memory role, like every other role name, while `agent-gateway memory rotate-key` stays the
// key rotation.
import t from 'tap'
import { startCli } from '../helpers/cli.ts'

t.test('`agent-gateway memory` runs the memory role alone and answers its probes', async (t) => {
  const cli = await startCli({ args: ['memory'] })
  t.teardown(() => cli.stop('SIGKILL'))
  t.match(cli.output(), /^memory +http:\/\/127\.0\.0\.1:\d+/m, 'the memory listener')
  t.notMatch(cli.output(), /^gateway /m, 'and no other')
  t.match(cli.output(), /agent-gateway ready \(memory; database pglite, kv memory\)/)
  const ready = await fetch(`${cli.memory}/readyz`)
  t.equal(ready.status, 200)
  t.equal(await cli.stop('SIGTERM'), 0, 'SIGTERM: a clean exit')
})
