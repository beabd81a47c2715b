// x402 `bazaar` discovery metadata of one operation (specs/extensions/bazaar.md), built with the
// extension's own declareDiscoveryExtension from the registry entry and checked with its own
// validators. Built once per operation and cached: only the concrete path parameters change per
// request. Payers echo every declared extension in PAYMENT-SIGNATURE, so the declaration is kept
// under a size budget: descriptions, patterns and formats are dropped and deep schemas flattened
// (the full schemas stay in /openapi.json).
import { declareDiscoveryExtension, isValidRouteTemplate, validateDiscoveryExtension, validateDiscoveryExtensionSpec } from '@x402/extensions/bazaar'
import type { DiscoveryExtension } from '@x402/extensions/bazaar'
import type { CatalogOperation } from '../../catalog/openapi.ts'
import type { QuoteDiscovery } from '../types.ts'

export const BAZAAR_KEY = 'bazaar'
/** JSON bytes a declaration may take (it travels in PAYMENT-REQUIRED and back in PAYMENT-SIGNATURE). */
export const BAZAAR_BUDGET_BYTES = 3072
const DROPPED = new Set(['description', 'title', 'pattern', 'format', 'examples', '$id', 'errorMessage'])

type Schema = Record<string, unknown>

/** A JSON-Schema copy without documentation and text constraints; below `depth` only the type. */
function compact(schema: unknown, depth: number): Schema {
  const plain = JSON.parse(JSON.stringify(schema ?? {})) as Schema
  const walk = (node: Schema, level: number): Schema => {
    if (level >= depth) return typeof node.type === 'string' ? { type: node.type } : {}
    const out: Schema = {}
    for (const [key, value] of Object.entries(node)) {
      if (DROPPED.has(key)) continue
      if (key === 'properties' && value && typeof value === 'object') {
        out.properties = Object.fromEntries(Object.entries(value as Record<string, Schema>).map(([name, child]) => [name, walk(child, level + 1)]))
      } else if ((key === 'items' || key === 'additionalProperties') && value && typeof value === 'object') {
        out[key] = walk(value as Schema, level + 1)
      } else if ((key === 'anyOf' || key === 'oneOf' || key === 'allOf') && Array.isArray(value)) {
        out[key] = value.map((child) => walk(child as Schema, level + 1))
      } else {
        out[key] = value
      }
    }
    return out
  }
  return walk(plain, 0)
}

/** The smallest value a (compacted) schema accepts: the example a declaration must carry. */
export function exampleOf(schema: Schema): unknown {
  if ('const' in schema) return schema.const
  if (Array.isArray(schema.enum)) return schema.enum[0]
  if ('default' in schema) return schema.default
  const choices = (schema.anyOf ?? schema.oneOf) as Schema[] | undefined
  if (choices?.[0]) return exampleOf(choices[0])
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type
  switch (type) {
    case 'string':
      return 'x'.repeat(Math.max(1, Number(schema.minLength ?? 1)))
    case 'integer':
    case 'number': {
      const min = typeof schema.minimum === 'number' ? schema.minimum : typeof schema.exclusiveMinimum === 'number' ? schema.exclusiveMinimum + 1 : 0
      return type === 'integer' ? Math.ceil(min) : min
    }
    case 'boolean':
      return false
    case 'null':
      return null
    case 'array':
      return Array.from({ length: Number(schema.minItems ?? 0) }, () => exampleOf((schema.items as Schema) ?? {}))
    default: {
      const properties = (schema.properties ?? {}) as Record<string, Schema>
      const required = (schema.required as string[] | undefined) ?? []
      return Object.fromEntries(required.filter((name) => properties[name]).map((name) => [name, exampleOf(properties[name] as Schema)]))
    }
  }
}

/** `/plans/{planId}/purchase` → `/plans/:planId/purchase` (the template form bazaar indexes). */
function routeTemplateOf(path: string): string | undefined {
  const template = path.replace(/\{([A-Za-z_][A-Za-z0-9_]*)\}/g, ':$1')
  return template !== path && isValidRouteTemplate(template) ? template : undefined
}

function successSchema(entry: CatalogOperation): Schema | undefined {
  const status = Object.keys(entry.spec.schemas.response)
    .map(Number)
    .filter((code) => code >= 200 && code < 300)
    .sort()[0]
  return status === undefined ? undefined : (entry.spec.schemas.response[status] as Schema)
}

function declare(entry: CatalogOperation, depth: number, withOutput: boolean): DiscoveryExtension {
  const { spec } = entry
  const bodyMethod = spec.method === 'POST' || spec.method === 'PUT' || spec.method === 'PATCH'
  const source = bodyMethod ? spec.schemas.body : spec.schemas.querystring
  const inputSchema = source ? compact(source, depth) : { properties: {} }
  const output = withOutput ? successSchema(entry) : undefined
  const outputSchema = output ? compact(output, depth) : undefined
  const common = {
    input: exampleOf({ type: 'object', ...inputSchema }) as Record<string, unknown>,
    inputSchema,
    ...(outputSchema ? { output: { example: exampleOf(outputSchema), schema: outputSchema } } : {}),
  }
  const declared = (bodyMethod ? declareDiscoveryExtension({ ...common, bodyType: 'json' }) : declareDiscoveryExtension(common))[BAZAAR_KEY] as DiscoveryExtension
  // What bazaarResourceServerExtension.enrichDeclaration adds at request time: the method (in info
  // and schema) and, for templated paths, the route template and a pathParams slot.
  const template = routeTemplateOf(spec.path)
  const input = declared.schema.properties.input as { properties: Record<string, unknown>; required: string[] }
  const extension = {
    ...declared,
    ...(template ? { routeTemplate: template } : {}),
    info: { ...declared.info, input: { ...declared.info.input, method: spec.method } },
    schema: {
      ...declared.schema,
      properties: {
        ...declared.schema.properties,
        input: {
          ...input,
          properties: { ...input.properties, method: { type: 'string', enum: [spec.method] }, ...(template ? { pathParams: { type: 'object' } } : {}) },
          required: input.required.includes('method') ? input.required : [...input.required, 'method'],
        },
      },
    },
  }
  return extension as DiscoveryExtension
}

function problems(extension: DiscoveryExtension): string[] {
  const own = validateDiscoveryExtension(extension)
  const spec = validateDiscoveryExtensionSpec(extension as unknown as Record<string, unknown>)
  return [...(own.errors ?? []), ...(spec.errors ?? [])]
}

/**
 * The operation's bazaar declaration within the budget: full depth with its output first, then
 * shallower, then without the output schema. Throws when even the smallest is invalid (a registry
 * schema the extension cannot express): caught by tests, never at request time.
 */
export function bazaarDeclaration(entry: CatalogOperation): DiscoveryExtension {
  let last: DiscoveryExtension | undefined
  for (const [depth, withOutput] of [
    [6, true],
    [3, true],
    [2, true],
    [3, false],
    [2, false],
    [1, false],
  ] as const) {
    const extension = declare(entry, depth, withOutput)
    const errors = problems(extension)
    if (errors.length > 0) throw new Error(`${entry.spec.operationId}: invalid bazaar declaration: ${errors.join('; ')}`)
    last = extension
    if (Buffer.byteLength(JSON.stringify(extension)) <= BAZAAR_BUDGET_BYTES) return extension
  }
  return last as DiscoveryExtension
}

/** bazaar `resource` tags: at most 5 printable-ASCII strings of ≤ 32 characters. */
function tagsOf(entry: CatalogOperation): string[] | undefined {
  const tags = [...new Set([...entry.spec.tags, entry.service.slug])].filter((tag) => /^[\x20-\x7e]{1,32}$/.test(tag)).slice(0, 5)
  return tags.length > 0 ? tags : undefined
}

const cache = new WeakMap<CatalogOperation, QuoteDiscovery | null>()

/**
 * Per-operation discovery parts of its quotes, computed once; undefined for an operation whose
 * schemas bazaar cannot express (its 402 then simply declares no bazaar; a unit test keeps every
 * registry operation declarable).
 */
export function discoveryOf(entry: CatalogOperation): QuoteDiscovery | undefined {
  let found = cache.get(entry)
  if (found === undefined) {
    const name = entry.service.title.length <= 32 ? entry.service.title : entry.service.slug.slice(0, 32)
    try {
      found = { bazaar: bazaarDeclaration(entry), serviceName: name, tags: tagsOf(entry) }
    } catch {
      found = null
    }
    cache.set(entry, found)
  }
  return found ?? undefined
}

/** The declaration of one request: the cached one plus the concrete path parameters. */
export function bazaarFor(discovery: QuoteDiscovery, pathParams: Record<string, string> | undefined): DiscoveryExtension {
  const { bazaar } = discovery
  if (!('routeTemplate' in bazaar) || !bazaar.routeTemplate || !pathParams) return bazaar
  return { ...bazaar, info: { ...bazaar.info, input: { ...bazaar.info.input, pathParams } } } as DiscoveryExtension
}

const v1Cache = new WeakMap<QuoteDiscovery, Record<string, unknown>>()

/**
 * x402 v1's discovery slot, the `outputSchema` of an accepts[] entry, in the shape the extension's
 * extractDiscoveryInfoV1 reads (`input: {type: "http", method, discoverable, bodyType, bodyFields}`,
 * `output`: an example). Derived once from the v2 declaration.
 */
export function bazaarOutputSchemaV1(discovery: QuoteDiscovery): Record<string, unknown> {
  let found = v1Cache.get(discovery)
  if (!found) {
    const { info, schema } = discovery.bazaar as unknown as {
      info: { input: { method?: string; bodyType?: string }; output?: { example?: unknown } }
      schema: { properties: { input: { properties: Record<string, Schema> } } }
    }
    const fields = schema.properties.input.properties
    const input: Record<string, unknown> = { type: 'http', method: info.input.method, discoverable: true }
    if (info.input.bodyType) Object.assign(input, { bodyType: info.input.bodyType, bodyFields: fields.body?.properties ?? {} })
    else if (fields.queryParams?.properties) input.queryParams = fields.queryParams.properties
    found = { input, ...(info.output?.example !== undefined ? { output: info.output.example } : {}) }
    v1Cache.set(discovery, found)
  }
  return found
}
