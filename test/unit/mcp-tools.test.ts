// The MCP tool table is derived from the registry: every built operation is a tool named by its
// operationId, with its arguments placed by the registry's schemas; and a tool call maps to the
// operation's request (path, query, headers, body, the payment and proof _meta) and back.
import t from 'tap'
import { Type } from '@sinclair/typebox'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import { decodePaymentSignatureHeader, encodePaymentRequiredHeader, encodePaymentResponseHeader } from '@x402/core/http'
import type { PaymentPayload, PaymentRequired } from '@x402/core/types'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { registry } from '../../src/catalog/registry.ts'
import type { Registry } from '../../src/catalog/types.ts'
import { META, problemResult, requestOf, resultOf, type CallContext } from '../../src/mcp/calls.ts'
import { buildToolTable, type McpTool } from '../../src/mcp/tools.ts'
import { AppError } from '../../src/platform/errors.ts'
import { IMPLEMENTED_OPERATIONS } from '../../src/runtime.ts'

const urls = { gateway: 'https://gw.test', scheduler: 'https://sched.test', memory: 'https://mem.test' }
const context: CallContext = { headers: { authorization: 'Bearer agw_abc', host: 'gw.test' }, forwardedFor: '203.0.113.7', requestId: 'req-1' }

t.test('every built operation of the registry is a tool, and only those', async (t) => {
  const catalog = createCatalog(registry, { urls, implemented: IMPLEMENTED_OPERATIONS })
  const table = buildToolTable(catalog)
  const built = catalog.operations.filter((entry) => entry.implemented).map((entry) => entry.spec.operationId)
  t.same([...table.tools.keys()], built)
  // tools (2026-07-28): "Servers SHOULD return tools in a deterministic order": by name, not by registry position.
  t.same(
    table.list.tools.map((tool) => tool.name),
    [...built].sort(),
  )
  t.same(
    buildToolTable(createCatalog({ services: [...registry.services].reverse() }, { urls, implemented: IMPLEMENTED_OPERATIONS })).list.tools.map((tool) => tool.name),
    [...built].sort(),
    'the order does not follow the registry',
  )
  for (const tool of table.list.tools) {
    t.equal(tool.inputSchema.type, 'object', `${tool.name} takes an object`)
    t.match(tool.description, /Price: /, `${tool.name} says its price`)
    if (tool.outputSchema) t.equal(tool.outputSchema.type, 'object', `${tool.name} outputs an object`)
  }
  // The official client compiles each output schema with its own ajv and checks every result with it.
  const validator = new AjvJsonSchemaValidator()
  for (const tool of table.list.tools) {
    if (!tool.outputSchema) continue
    const check = validator.getValidator(tool.outputSchema)
    t.ok(check({ type: 'https://x/p', title: 'Bad', status: 400, detail: 'd', code: 'validation_error' }).valid, `${tool.name}: a problem is a valid result`)
    t.ok(check({ x402Version: 2, accepts: [] }).valid, `${tool.name}: a PaymentRequired is a valid result`)
  }
  const unbuilt = createCatalog(registry, { urls, implemented: new Set(['registerAgent']) })
  t.same([...buildToolTable(unbuilt).tools.keys()], ['registerAgent'], 'a tool appears when its operation is built')
})

function syntheticTool(body: ReturnType<typeof Type.Object>): McpTool {
  const synthetic: Registry = {
    services: [
      {
        slug: 'things',
        title: 'Things',
        description: 'Things',
        server: 'scheduler',
        access: 'payg',
        meter: { name: 'things', unit: 'thing', unitPriceMicros: 5_000n, includedUnits: 0 },
        plans: [],
        operations: [
          {
            operationId: 'makeThing',
            service: 'things',
            server: 'scheduler',
            method: 'POST',
            path: '/things/{id}/parts',
            summary: 'Make a thing',
            description: 'Makes a thing',
            tags: [],
            access: 'payg',
            proof: 'payment',
            pricing: { kind: 'per-unit' },
            schemas: {
              params: Type.Object({ id: Type.String() }),
              querystring: Type.Object({ tag: Type.Optional(Type.Array(Type.String())) }),
              headers: Type.Object({ 'idempotency-key': Type.String() }),
              body,
              response: { 201: Type.Object({ ok: Type.Boolean() }) },
            },
          },
        ],
      },
    ],
  }
  const table = buildToolTable(createCatalog(synthetic, { urls, implemented: new Set(['makeThing']) }))
  return table.tools.get('makeThing') as McpTool
}

t.test('arguments: path, query, header and body fields in one object; the body nested when a name collides', async (t) => {
  const flat = syntheticTool(Type.Object({ size: Type.Integer(), colour: Type.Optional(Type.String()) }, { additionalProperties: false }))
  t.match(flat.definition.inputSchema, {
    type: 'object',
    properties: { id: { type: 'string' }, tag: { type: 'array' }, 'idempotency-key': {}, size: { type: 'integer' }, colour: {} },
    required: ['id', 'idempotency-key', 'size'],
    additionalProperties: false,
  })
  t.match(flat.definition.description, /Price: 0\.005000 USD per thing \(x402\/MPP\)/)
  t.match(flat.definition.annotations, { readOnlyHint: false, destructiveHint: false, idempotentHint: false })
  const request = requestOf(flat, { id: 'a/b', tag: ['x', 'y'], 'idempotency-key': 'k1', size: 3 }, undefined, context)
  t.match(request, { server: 'scheduler', method: 'POST', url: '/things/a%2Fb/parts?tag=x&tag=y', body: '{"size":3}' })
  t.match(request.headers, { 'idempotency-key': 'k1', authorization: 'Bearer agw_abc', 'x-forwarded-for': '203.0.113.7', 'content-type': 'application/json' })
  t.notOk('host' in request.headers, 'only the credential headers are carried over')

  const nested = syntheticTool(Type.Object({ id: Type.String(), size: Type.Integer() }))
  t.same(nested.args.body, { mode: 'nested' })
  t.match(nested.definition.inputSchema, { properties: { body: { type: 'object' } }, required: ['id', 'idempotency-key', 'body'] })
  t.equal(requestOf(nested, { id: 'p', 'idempotency-key': 'k', body: { id: 'inner', size: 1 } }, undefined, context).body, '{"id":"inner","size":1}')
  t.throws(() => requestOf(nested, { id: 'p', 'idempotency-key': 'k', body: [] }, undefined, context), { message: /arguments.body/ })
  t.throws(() => requestOf(nested, { 'idempotency-key': 'k' }, undefined, context), { message: /arguments.id/ })
  for (const dots of ['.', '..'])
    t.throws(
      () => requestOf(nested, { id: dots, 'idempotency-key': 'k', body: {} }, undefined, context),
      { message: /arguments.id cannot be/ },
      `"${dots}" would reach another route`,
    )
  t.throws(() => requestOf(nested, { id: 'p', other: 1 }, undefined, context), { message: /arguments.other/ })
  t.throws(() => requestOf(nested, { id: 'p', 'idempotency-key': 'k\r\nx-evil: 1', body: {} }, undefined, context), { message: /arguments.idempotency-key/ })
  t.throws(() => requestOf(nested, { id: 'p', 'idempotency-key': 'k', body: {} }, { 'agent-gateway/authorization': 'Bearer a\nb' }, context), {
    message: /_meta.agent-gateway\/authorization/,
  })
})

t.test('_meta: x402 payloads become PAYMENT-SIGNATURE (v2) or X-PAYMENT (v1); bearer and wallet proof per call', async (t) => {
  const tool = syntheticTool(Type.Object({ size: Type.Integer() }))
  const payload = { x402Version: 2, accepted: { scheme: 'exact' }, payload: { signature: '0x01' } } as unknown as PaymentPayload
  const v2 = requestOf(
    tool,
    { id: 'a', size: 1 },
    { 'x402/payment': payload, 'agent-gateway/authorization': 'Bearer agw_other', 'agent-gateway/sign-in-with-x': 'c2l3eA==' },
    context,
  )
  t.same(decodePaymentSignatureHeader(v2.headers['payment-signature'] as string), payload)
  t.equal(v2.headers.authorization, 'Bearer agw_other', 'the per-call bearer wins')
  t.equal(v2.headers['sign-in-with-x'], 'c2l3eA==')
  const v1 = requestOf(tool, { id: 'a', size: 1 }, { 'x402/payment': { ...payload, x402Version: 1 } }, context)
  t.ok(v1.headers['x-payment'])
  t.notOk(v1.headers['payment-signature'])
  t.throws(() => requestOf(tool, { id: 'a', size: 1 }, { 'x402/payment': 'nope' }, context), { code: 'payment_malformed' })
  t.throws(() => requestOf(tool, { id: 'a', size: 1 }, { 'org.paymentauth/credential': { nope: true } }, context), { code: 'payment_malformed' })
})

t.test('results: 2xx with receipts, the 402 as the x402 payment-required result, problems as they are', async (t) => {
  const settled = { success: true, transaction: `0x${'a'.repeat(64)}`, network: 'eip155:8453', payer: '0x0000000000000000000000000000000000000001' }
  const ok = resultOf({ status: 201, headers: { 'payment-response': encodePaymentResponseHeader(settled as never), 'x-plan-id': 'p1' }, body: '{"ok":true}' }, undefined)
  t.same(ok.structuredContent, { ok: true })
  t.notOk(ok.isError)
  t.same(ok._meta?.['x402/payment-response'], settled)
  t.same(ok._meta?.['agent-gateway/http'], { status: 201, headers: { 'x-plan-id': 'p1' } })

  const required = { x402Version: 2, resource: { url: 'https://sched.test/things/a/parts' }, accepts: [{ scheme: 'exact', amount: '5000' }] } as unknown as PaymentRequired
  const problem = { type: 't', title: 'Payment Required', status: 402, detail: 'Pay 0.005 USD', code: 'payment_required' }
  const unpaid = resultOf({ status: 402, headers: { 'payment-required': encodePaymentRequiredHeader(required) }, body: JSON.stringify(problem) }, undefined)
  t.equal(unpaid.isError, true)
  t.same(unpaid.structuredContent, required)
  t.same(JSON.parse(unpaid.content[0]?.text ?? ''), { 'x402/error': { code: 402, message: 'Pay 0.005 USD', data: required } })
  t.same(unpaid._meta?.['agent-gateway/problem'], problem)

  const refused = resultOf({ status: 400, headers: {}, body: JSON.stringify({ status: 400, code: 'validation_error', field: 'body.size' }) }, undefined)
  t.match(refused, { isError: true, structuredContent: { field: 'body.size' } })
  const notJson = resultOf({ status: 502, headers: {}, body: 'bad gateway' }, undefined)
  t.match(notJson.structuredContent, { status: 502, detail: 'bad gateway' })
  const early = problemResult(new AppError('validation_error', 'arguments.id is required', { field: 'arguments.id' }), 'mcp://tool/x')
  t.match(early, { isError: true, structuredContent: { code: 'validation_error', field: 'arguments.id', instance: 'mcp://tool/x' } })
  // A role out of reach (the tool's request never answered) is a 503 that says when to come back, as a route's 503 does.
  const unreachable = problemResult(new AppError('unavailable', 'createTask could not be reached'), 'mcp://tool/createTask')
  t.same(unreachable._meta?.[META.http], { status: 503, headers: { 'retry-after': '5' } }, 'the 503 carries its Retry-After in _meta')
})

t.test('results: the payment and plan headers of the answer pass through in _meta, a payment-identifier replay marker included', async (t) => {
  const settled = { success: true, transaction: `0x${'b'.repeat(64)}`, network: 'eip155:8453', payer: '0x0000000000000000000000000000000000000002' }
  const replay = resultOf(
    {
      status: 200,
      headers: {
        'x-payment-identifier-replay': 'true',
        'payment-response': encodePaymentResponseHeader(settled as never),
        'x-payment-response': encodePaymentResponseHeader(settled as never),
        'x-plan-calls-remaining': '4',
        'cache-control': 'no-store',
      },
      body: '{"ok":true}',
    },
    undefined,
  )
  t.same(
    replay._meta?.['agent-gateway/http'],
    { status: 200, headers: { 'x-payment-identifier-replay': 'true', 'x-plan-calls-remaining': '4' } },
    'the receipt is decoded in its own key, not repeated',
  )
  t.same(replay._meta?.['x402/payment-response'], settled)
  const pending = resultOf({ status: 200, headers: { 'x-payment-status': 'pending', 'x-payment-reference': 'ref-1' }, body: '{"status":"pending"}' }, undefined)
  t.same(pending._meta?.['agent-gateway/http'], { status: 200, headers: { 'x-payment-status': 'pending', 'x-payment-reference': 'ref-1' } })
})
