// Shared components in the OpenAPI documents (src/catalog/components.ts): a document with its
// `$ref`s resolved is exactly the document with everything inline, every component is used more
// than once, names are the same in every document, and the documents get smaller.
import t from 'tap'
import { Validator } from '@seriousme/openapi-schema-validator'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { operationObject, type CatalogOperation } from '../../src/catalog/openapi.ts'
import { componentNames, shareComponents, type JsonObject } from '../../src/catalog/components.ts'

const urls = { gateway: 'http://gw.test', scheduler: 'http://sched.test', memory: 'http://mem.test' }
const catalog = createCatalog(registry, { urls, implemented: new Set(['getAgentGuide', 'postAgentGuide']) })
const byId = new Map<string, CatalogOperation>(catalog.operations.map((entry) => [entry.spec.operationId, entry]))

type Doc = { paths: Record<string, Record<string, JsonObject>>; components: { schemas?: JsonObject; responses?: JsonObject } }

/** Replaces every `$ref` by (a resolved copy of) its target; throws on a dangling one. */
function resolve(doc: Doc, value: unknown): unknown {
  if (Array.isArray(value)) return value.map((item) => resolve(doc, item))
  if (value === null || typeof value !== 'object') return value
  const ref = (value as { $ref?: unknown }).$ref
  if (typeof ref === 'string') {
    const match = /^#\/components\/(schemas|responses)\/([^/]+)$/.exec(ref)
    const target = match ? doc.components[match[1] as 'schemas' | 'responses']?.[match[2] as string] : undefined
    if (target === undefined) throw new Error(`dangling ${ref}`)
    return resolve(doc, target)
  }
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, resolve(doc, item)]))
}

function refCounts(value: unknown, counts = new Map<string, number>()): Map<string, number> {
  if (Array.isArray(value)) for (const item of value) refCounts(item, counts)
  else if (value !== null && typeof value === 'object') {
    const ref = (value as { $ref?: unknown }).$ref
    if (typeof ref === 'string') counts.set(ref, (counts.get(ref) ?? 0) + 1)
    else for (const item of Object.values(value)) refCounts(item, counts)
  }
  return counts
}

const documents: [string, Doc][] = []
for (let page = 1; ; page += 1) {
  const result = catalog.openapiPage({ page })
  documents.push([`page ${page}`, result.document as unknown as Doc])
  if (!result.next) break
}
for (const q of ['song', 'task', 'memory']) documents.push([`q=${q}`, catalog.openapiPage({ q }).document as unknown as Doc])
for (const service of registry.services) documents.push([`service ${service.slug}`, catalog.serviceDocument(service.slug) as unknown as Doc])

t.test('resolving the $refs gives back every operation exactly as written inline', async (t) => {
  for (const [name, doc] of documents) {
    for (const item of Object.values(doc.paths)) {
      for (const operation of Object.values(item)) {
        const entry = byId.get(operation.operationId as string)
        t.ok(entry, `${name}: ${String(operation.operationId)} is a catalog operation`)
        if (entry) t.same(resolve(doc, operation), JSON.parse(JSON.stringify(operationObject(entry))), `${name}: ${entry.spec.operationId}`)
      }
    }
  }
})

t.test('every component is used more than once and every $ref resolves', async (t) => {
  for (const [name, doc] of documents) {
    const counts = refCounts({ paths: doc.paths, components: doc.components })
    for (const kind of ['schemas', 'responses'] as const) {
      for (const component of Object.keys(doc.components[kind] ?? {})) {
        t.ok((counts.get(`#/components/${kind}/${component}`) ?? 0) >= 2, `${name}: ${kind}/${component} is used at least twice`)
      }
    }
    t.doesNotThrow(() => resolve(doc, doc), `${name}: no dangling $ref`)
  }
})

t.test('a component name means the same schema or response in every document', async (t) => {
  const seen = new Map<string, string>()
  let shared = 0
  for (const [name, doc] of documents) {
    for (const kind of ['schemas', 'responses'] as const) {
      for (const [component, value] of Object.entries(doc.components[kind] ?? {})) {
        const key = `${kind}/${component}`
        // Inner parts may be shared in one document and inline in another: compare them resolved.
        const text = JSON.stringify(resolve(doc, value))
        const before = seen.get(key)
        if (before === undefined) seen.set(key, text)
        else {
          shared += 1
          t.equal(text, before, `${name}: ${key} is the same as elsewhere`)
        }
      }
    }
  }
  t.ok(shared > 10, `${shared} components recur across documents`)
  t.ok(seen.has('schemas/Problem') && seen.has('responses/Problem400'), 'problem+json parts are named after what they are')
})

t.test('documents stay valid OpenAPI 3.1 and get smaller', async (t) => {
  const validator = new Validator()
  for (const [name, doc] of documents) {
    const verdict = await validator.validate(doc as unknown as Parameters<typeof validator.validate>[0])
    t.ok(verdict.valid, `${name} validates`, { errors: verdict.errors })
  }
  const page2 = catalog.openapiPage({ page: 2 }).document as unknown as Doc
  const shared = JSON.stringify(page2).length
  const inline = JSON.stringify(resolve(page2, { ...page2, components: {} }))
  t.ok(shared < inline.length * 0.7, `page 2: ${shared} bytes with components, ${inline.length} inline`)
})

t.test('shareComponents only moves parts that recur, and only when that saves bytes', async (t) => {
  const big = { type: 'object', description: 'x'.repeat(200), properties: { a: { type: 'string' } } }
  const small = { type: 'string', minLength: 1 }
  const operations = ['one', 'two'].map((operationId) => ({
    operationId,
    operation: JSON.parse(
      JSON.stringify({
        responses: {
          200: {
            description: 'OK',
            content: {
              'application/json': { schema: { type: 'object', properties: { big, small, [operationId]: { type: 'object', description: `${operationId} `.repeat(50) } } } },
            },
          },
        },
      }),
    ) as JsonObject,
  }))
  const names = componentNames(operations, { type: 'object' })
  const { schemas, responses } = shareComponents(operations, names)
  t.same(Object.keys(schemas), ['one.200.big'], 'the recurring large schema is shared, named after its first place')
  t.same(responses, {}, 'responses that differ stay inline')
  const props = ((operations[1]?.operation.responses as JsonObject)['200'] as { content: { 'application/json': { schema: { properties: JsonObject } } } }).content[
    'application/json'
  ].schema.properties
  t.same(props.big, { $ref: '#/components/schemas/one.200.big' })
  t.same(props.small, small, 'a part smaller than its $ref stays inline')
  t.same(props.two, { type: 'object', description: 'two '.repeat(50) }, 'a part used once stays inline')
})
