// Paths that leave a request (problem instance, logs, spans) lose their capabilities and query.
import t from 'tap'
import { redactPath } from '../../src/platform/redact-path.ts'

t.test('capability segments and query strings go; ids, addresses and hashes stay', async (t) => {
  const capability = 'A'.repeat(20) + '-_b'.repeat(10) + 'z'.repeat(14)
  t.equal(redactPath(`/reviews/${capability}/submission`), '/reviews/{capability}/submission')
  t.equal(redactPath(`/reviews/${capability}?x=1`), '/reviews/{capability}')
  t.equal(redactPath('/api/v1/tasks/tsk_abc123?page=2&token=secret'), '/api/v1/tasks/tsk_abc123')
  t.equal(redactPath('/dev/balances/0x70997970C51812dc3A010C7d01b50e0d17dc79C8'), '/dev/balances/0x70997970C51812dc3A010C7d01b50e0d17dc79C8')
  t.equal(redactPath(`/x/0x${'ab'.repeat(32)}`), `/x/0x${'ab'.repeat(32)}`)
  t.equal(redactPath('/'), '/')
  t.equal(redactPath(''), '')
  t.equal(redactPath('a'.repeat(39)), 'a'.repeat(39))
  t.equal(redactPath(`/${'a'.repeat(40)}`), '/{capability}')
})
