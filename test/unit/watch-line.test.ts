// Reading a watch line's head without decoding it (controllers/kubernetes/watch-line.ts): exactly
// what JSON.parse would say of type and metadata's namespace, name and resourceVersion, whatever
// the key order, and never a "resourceVersion" of another object; undefined whenever unsure.
import t from 'tap'
import { firstResourceVersion, readWatchLineHead } from '../../controllers/kubernetes/watch-line.ts'

const run = {
  apiVersion: 'jobs.agent-gateway.dev/v1alpha1',
  kind: 'Run',
  metadata: {
    name: 't-00001-202601010000',
    namespace: 'bench',
    labels: { 'jobs.agent-gateway.dev/task': 't-00001' },
    ownerReferences: [{ apiVersion: 'jobs.agent-gateway.dev/v1alpha1', kind: 'Task', name: 't-00001', uid: 'u-1', controller: true }],
    uid: 'u-2',
    generation: 1,
    managedFields: [{ manager: 'm', fieldsV1: { 'f:status': { 'f:phase': {} }, 'k:{"name":"x"}': {} }, time: '2026-01-01T00:00:00Z' }],
    resourceVersion: '42',
  },
  spec: { taskRef: { name: 't-00001' } },
  status: { phase: 'Pending' },
}

t.test('the head of an event as the fake and the API server write it', async (t) => {
  const line = JSON.stringify({ type: 'MODIFIED', object: run })
  t.same(readWatchLineHead(line), { type: 'MODIFIED', namespace: 'bench', name: 't-00001-202601010000', resourceVersion: '42' })
  t.equal(firstResourceVersion(line), '42')
  // Sorted keys (Go's encoding of an unstructured object) and whitespace.
  const sorted = `{ "type" : "ADDED" , "object" : { "apiVersion":"v","kind":"Run","metadata":{"managedFields":[],"name":"a","namespace":"n","resourceVersion":"7","uid":"u"},"spec":{} } }`
  t.same(readWatchLineHead(sorted), { type: 'ADDED', namespace: 'n', name: 'a', resourceVersion: '7' })
  // type after object; a cluster-scoped object.
  t.same(readWatchLineHead(JSON.stringify({ object: { metadata: { name: 'c', resourceVersion: '9' } }, type: 'DELETED' })), {
    type: 'DELETED',
    namespace: '',
    name: 'c',
    resourceVersion: '9',
  })
})

t.test("another object's resourceVersion is never taken for metadata's", async (t) => {
  // Before metadata, in spec, and in a string that spells the key out.
  const early = {
    type: 'MODIFIED',
    object: {
      spec: { ref: { name: 'other', namespace: 'x', resourceVersion: '1' }, note: '"resourceVersion":"2"' },
      metadata: { annotations: { a: '{"resourceVersion":"3","name":"z"}' }, name: 'real', namespace: 'ns', resourceVersion: '77' },
    },
  }
  const line = JSON.stringify(early)
  t.equal(firstResourceVersion(line), '1', 'the guess is only a guess')
  t.same(readWatchLineHead(line), { type: 'MODIFIED', namespace: 'ns', name: 'real', resourceVersion: '77' })
  // Escaped backslashes before a closing quote.
  const tricky = JSON.stringify({
    type: 'MODIFIED',
    object: { metadata: { annotations: { a: 'ends in \\', b: '\\"resourceVersion\\":\\"5\\"' }, name: 'n', resourceVersion: '8' } },
  })
  t.same(readWatchLineHead(tricky), { type: 'MODIFIED', namespace: '', name: 'n', resourceVersion: '8' })
})

t.test('undefined when the head cannot be read for sure', async (t) => {
  t.equal(readWatchLineHead(''), undefined)
  t.equal(readWatchLineHead('not json'), undefined)
  t.equal(readWatchLineHead('{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"1"'), undefined, 'cut short')
  t.equal(readWatchLineHead(JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'a' } } })), undefined, 'no resourceVersion')
  t.equal(readWatchLineHead(JSON.stringify({ type: 'MODIFIED', object: { spec: {} } })), undefined, 'no metadata')
  t.equal(readWatchLineHead(JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'a\u00e9\n', resourceVersion: '1' } } })), undefined, 'an escape in a value')
  t.equal(readWatchLineHead(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410 } })), undefined, 'an error has no metadata')
  t.equal(firstResourceVersion('{"type":"BOOKMARK"}'), undefined)
})
