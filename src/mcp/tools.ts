// The MCP tool table, derived from the catalog: one tool per built registry operation, named by its
// operationId, with its input schema (path, query, header and body fields in one object), its
// success schema as output, and its price. Built once per process; nothing here does I/O.
import type { Catalog } from '../catalog/catalog.ts'
import { plainSchema, type CatalogOperation } from '../catalog/openapi.ts'
import { ProblemSchema } from '../catalog/schemas/common.ts'
import { formatUsd } from '../platform/money.ts'

type JsonSchema = Record<string, unknown>

/** Where each tool argument goes in the operation's HTTP request. */
export interface ArgumentMap {
  path: string[]
  query: string[]
  headers: string[]
  /** `flat`: body properties are top-level arguments; `nested`: the body is the `body` argument. */
  body: { mode: 'flat'; names: string[]; open: boolean } | { mode: 'nested' } | undefined
}

export interface ToolDefinition {
  name: string
  title: string
  description: string
  inputSchema: JsonSchema & { type: 'object' }
  outputSchema?: JsonSchema & { type: 'object' }
  annotations: { title: string; readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: boolean }
  _meta: Record<string, unknown>
}

export interface McpTool {
  definition: ToolDefinition
  entry: CatalogOperation
  args: ArgumentMap
}

export interface ToolTable {
  readonly tools: ReadonlyMap<string, McpTool>
  /** The `tools/list` result, built once. */
  readonly list: { tools: ToolDefinition[] }
}

/** The argument that carries the whole body when its fields cannot be flattened. */
export const BODY_ARGUMENT = 'body'

function propertiesOf(schema: JsonSchema | undefined): { properties: Record<string, JsonSchema>; required: string[] } {
  return { properties: (schema?.properties ?? {}) as Record<string, JsonSchema>, required: (schema?.required as string[] | undefined) ?? [] }
}

/**
 * The x402 PaymentRequired object of a payment-required result (x402 v2 transport), described only
 * as far as a client needs to tell it from the success object.
 */
const PAYMENT_REQUIRED_OUTPUT: JsonSchema = {
  type: 'object',
  required: ['x402Version', 'accepts'],
  properties: { x402Version: { type: 'integer' }, accepts: { type: 'array' } },
  description: 'x402 PaymentRequired (the tool call was not paid; pay one of accepts and retry with _meta["x402/payment"])',
}

/** Every 2xx schema of the operation when they are one object schema; MCP allows objects only. */
function successSchema(entry: CatalogOperation): JsonSchema | undefined {
  const schemas = Object.entries(entry.spec.schemas.response)
    .filter(([status]) => Number(status) >= 200 && Number(status) < 300)
    .map(([, schema]) => schema)
  const [first] = schemas
  if (first === undefined || schemas.some((schema) => schema !== first)) return undefined
  const plain = plainSchema(first)
  return plain.type === 'object' ? plain : undefined
}

function inputOf(entry: CatalogOperation): { schema: JsonSchema & { type: 'object' }; args: ArgumentMap } {
  const { schemas } = entry.spec
  const path = propertiesOf(schemas.params ? plainSchema(schemas.params) : undefined)
  const query = propertiesOf(schemas.querystring ? plainSchema(schemas.querystring) : undefined)
  const headers = propertiesOf(schemas.headers ? plainSchema(schemas.headers) : undefined)
  const properties: Record<string, JsonSchema> = { ...path.properties, ...query.properties, ...headers.properties }
  const required = [...Object.keys(path.properties), ...query.required, ...headers.required]
  const args: ArgumentMap = { path: Object.keys(path.properties), query: Object.keys(query.properties), headers: Object.keys(headers.properties), body: undefined }
  if (schemas.body) {
    const body = plainSchema(schemas.body)
    const fields = propertiesOf(body)
    const names = Object.keys(fields.properties)
    // Flattened only when every body field keeps its own name among the other arguments.
    if (body.type === 'object' && names.length > 0 && !names.some((name) => name in properties) && !(BODY_ARGUMENT in properties)) {
      Object.assign(properties, fields.properties)
      required.push(...fields.required)
      args.body = { mode: 'flat', names, open: body.additionalProperties !== false }
    } else {
      properties[BODY_ARGUMENT] = body
      required.push(BODY_ARGUMENT)
      args.body = { mode: 'nested' }
    }
  }
  const open = args.body?.mode === 'flat' && args.body.open
  const schema: JsonSchema & { type: 'object' } = { type: 'object', properties }
  if (required.length > 0) schema.required = [...new Set(required)]
  if (!open) schema.additionalProperties = false
  return { schema, args }
}

/** "Price: …" for a tool description, from the same payment info /openapi.json carries. */
export function priceText(entry: CatalogOperation, catalog: Catalog): string {
  const { spec, service, paymentInfo } = entry
  const pricing = spec.pricing
  const meter = service.meter
  const plans = paymentInfo.plans.length > 0 ? ` or plan ${paymentInfo.plans.join(' / ')}` : ''
  switch (pricing.kind) {
    case 'free':
      return spec.proof === 'wallet' ? 'Price: free (0 USD); owner tool: needs a wallet proof (SIGN-IN-WITH-X).' : 'Price: free (0 USD).'
    case 'per-unit':
      return `Price: ${formatUsd(meter?.unitPriceMicros ?? 0n)} USD per ${meter?.unit ?? 'call'} (x402/MPP)${plans}.`
    case 'amount-header':
      return `Price: the amount you name in the ${pricing.header} argument, in micros (x402/MPP)${plans}.`
    case 'plan-credit':
      return `Price: ${formatUsd(meter?.unitPriceMicros ?? 0n)} USD per ${meter?.unit ?? 'call'} debited from plan ${paymentInfo.plans.join(' / ')} (bearer token; never a payment).`
    case 'plan-price': {
      const sold = catalog.plans.filter((plan) => plan.purchasable).map((plan) => `${plan.spec.id} ${formatUsd(plan.spec.priceMicros)} USD`)
      return `Price: the plan's price (x402/MPP): ${sold.join(', ')}.`
    }
  }
}

const MCP_HOW =
  'Over MCP: a paid tool called without payment returns isError with the x402 PaymentRequired (structuredContent) and, where MPP is offered, its challenges (_meta["org.paymentauth/payment-required"]); ' +
  'retry with _meta["x402/payment"] (x402 PaymentPayload) or _meta["org.paymentauth/credential"] (MPP, where offered). Plan tools take the MCP request\'s Authorization: Bearer (or _meta["agent-gateway/authorization"]).'

function definitionOf(entry: CatalogOperation, catalog: Catalog): { definition: ToolDefinition; args: ArgumentMap } {
  const { spec } = entry
  const { schema, args } = inputOf(entry)
  const method = spec.method
  const price = priceText(entry, catalog)
  const paid = entry.paymentInfo.protocols.length > 0 || spec.proof === 'plan-bearer'
  const definition: ToolDefinition = {
    name: spec.operationId,
    title: spec.summary,
    description: `${spec.summary}. ${price}\n\n${spec.description}${paid ? `\n\n${MCP_HOW}` : ''}`,
    inputSchema: schema,
    annotations: {
      title: spec.summary,
      readOnlyHint: method === 'GET',
      destructiveHint: method === 'DELETE',
      idempotentHint: method === 'GET' || method === 'PUT' || method === 'DELETE',
      openWorldHint: true,
    },
    _meta: {
      'agent-gateway/payment-info': entry.paymentInfo,
      'agent-gateway/price': price,
      'agent-gateway/http': { server: spec.server, method, path: spec.path, url: entry.serverUrl + spec.path },
    },
  }
  const success = successSchema(entry)
  // A tool with an output schema has every structuredContent checked against it by the official
  // client, errors included: so the schema names the three shapes a result can take.
  if (success) definition.outputSchema = { type: 'object', anyOf: [success, PAYMENT_REQUIRED_OUTPUT, plainSchema(ProblemSchema)] }
  return { definition, args }
}

/**
 * The tools of every built operation of the catalog, sorted by name (code points): the same order
 * on every request and replica, whatever the registry's order (tools: "SHOULD return tools in a
 * deterministic order").
 */
export function buildToolTable(catalog: Catalog): ToolTable {
  const tools = new Map<string, McpTool>()
  for (const entry of catalog.operations) {
    if (!entry.implemented) continue
    const { definition, args } = definitionOf(entry, catalog)
    tools.set(definition.name, { definition, entry, args })
  }
  const names = [...tools.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  return { tools, list: { tools: names.map((name) => (tools.get(name) as McpTool).definition) } }
}
