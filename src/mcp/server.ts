// POST /mcp: a stateless Streamable HTTP MCP endpoint (official SDK server) whose tools are the
// registry's operations. Stateless (no session id), so any replica answers any request: each POST
// gets its own SDK Server and transport (transport.ts), as the SDK requires of stateless transports;
// the tool table and list result are built once. A request marked as MCP 2026-07-28 (its _meta or its
// MCP-Protocol-Version header) is answered by modern.ts instead, without the SDK. GET and DELETE
// answer 405 (no server-initiated stream, no session to end).
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../platform/json-depth.ts'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import {
  CallToolRequestSchema,
  ErrorCode,
  InitializeRequestSchema,
  ListToolsRequestSchema,
  McpError,
  PingRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js'
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv'
import type { Catalog } from '../catalog/catalog.ts'
import type { Logger } from '../platform/logger.ts'
import { callTool, type CallContext, type ToolResult } from './calls.ts'
import type { OperationDispatcher } from './dispatcher.ts'
import { createModernHandler, isModernRequest } from './modern.ts'
import { buildToolTable, type ToolTable } from './tools.ts'
import { type HttpAnswer, PostTransport, type RequestSchema, jsonRpcError as rpcError } from './transport.ts'

export const MCP_PATH = '/mcp'

export interface McpDeps {
  catalog: Catalog
  dispatcher: OperationDispatcher
  bodyLimitBytes: number
  logger: Logger
}

const SERVER_INFO = { name: 'agent-gateway', version: '1.0.0' }
const INSTRUCTIONS =
  'Tools are the Agent Gateway operations (gateway, scheduler, memory), named by operationId. Paid tools follow the x402 v2 MCP transport ' +
  '(_meta["x402/payment"]) and, where the server offers it, MPP (_meta["org.paymentauth/credential"]); plan tools take Authorization: Bearer; owner tools take a SIGN-IN-WITH-X proof ' +
  '(_meta["agent-gateway/sign-in-with-x"]) signed for the operation URL in the 401 challenge.'
const CAPABILITIES = {
  tools: { listChanged: false },
  experimental: { payment: { methods: { tempo: { intents: ['charge'] } } }, x402: { version: 2 } },
}

/** Unparseable JSON reaches the handler as this, so the answer is JSON-RPC's parse error, not a problem. */
const PARSE_ERROR = Symbol('mcp parse error')
/** A body nesting past the shared JSON bound (with room for a batch, `params` and `arguments` above a tool's body) reaches the handler as this. */
const TOO_DEEP = Symbol('mcp body too deep')
const MCP_JSON_DEPTH = MAX_JSON_DEPTH + 3

function jsonRpcError(reply: FastifyReply, status: number, code: number, message: string): FastifyReply {
  return reply
    .code(status)
    .type('application/json')
    .send(rpcError(status, code, message).body)
}

function contextOf(request: FastifyRequest): CallContext {
  const prior = request.headers['x-forwarded-for']
  const remote = request.raw.socket?.remoteAddress ?? ''
  const chain = [typeof prior === 'string' ? prior : prior?.[0], remote].filter(Boolean).join(', ')
  return { headers: request.headers, forwardedFor: chain, requestId: request.id }
}

/**
 * The requests a Server here answers (the SDK's initialize and ping, our tools), by method: the
 * transport checks their params with the same schemas first, since the SDK answers params its
 * handler's parse refuses with an internal error and the parse's raw dump.
 */
const REQUESTS: ReadonlyMap<string, RequestSchema> = new Map(
  [InitializeRequestSchema, PingRequestSchema, ListToolsRequestSchema, CallToolRequestSchema].map((schema) => [schema.shape.method.value, schema]),
)

/**
 * One for every Server: a Server builds its own ajv instance otherwise (a fifth of a call's CPU),
 * and only uses it for elicitation, which this endpoint never sends.
 */
const validator = new AjvJsonSchemaValidator()

function serverFor(table: ToolTable, deps: McpDeps, context: CallContext): Server {
  const server = new Server(SERVER_INFO, { capabilities: CAPABILITIES, instructions: INSTRUCTIONS, jsonSchemaValidator: validator })
  server.setRequestHandler(ListToolsRequestSchema, () => table.list)
  server.setRequestHandler(CallToolRequestSchema, async (call): Promise<ToolResult> => {
    const { name } = call.params
    const tool = table.tools.get(name)
    if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}; tools/list names every tool`)
    return callTool(tool, call.params.arguments ?? {}, call.params._meta as Record<string, unknown> | undefined, context, deps)
  })
  return server
}

export function registerMcpRoute(app: FastifyInstance, deps: McpDeps): void {
  const table = buildToolTable(deps.catalog)
  const modern = createModernHandler({
    table,
    serverInfo: SERVER_INFO,
    capabilities: CAPABILITIES,
    instructions: INSTRUCTIONS,
    legacyVersions: SUPPORTED_PROTOCOL_VERSIONS,
    logger: deps.logger,
  })
  const methodNotAllowed = (_request: FastifyRequest, reply: FastifyReply) =>
    jsonRpcError(reply.header('allow', 'POST'), 405, -32000, 'Method not allowed: this MCP endpoint is stateless; use POST.')
  app.register(async (scope) => {
    // JSON-RPC bodies: a malformed one is JSON-RPC's parse error (-32700), not the API's problem+json.
    scope.removeContentTypeParser('application/json')
    scope.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: deps.bodyLimitBytes }, (_request, body, done) => {
      let value: unknown
      try {
        value = JSON.parse(body as string)
      } catch {
        done(null, { [PARSE_ERROR]: true })
        return
      }
      // What runs after (the SDK's schemas, re-encoding for the operation) recurses: refused here.
      done(null, nestsDeeperThan(value, MCP_JSON_DEPTH) ? { [TOO_DEEP]: true } : value)
    })
    const JsonRpcBody = { anyOf: [{ type: 'object' }, { type: 'array' }], description: 'A JSON-RPC 2.0 message or batch' }
    const JsonRpcAnswer = { anyOf: [{ type: 'object', additionalProperties: true }, { type: 'array' }, { type: 'null' }] }
    scope.post(
      MCP_PATH,
      { schema: { body: JsonRpcBody, response: { 200: JsonRpcAnswer, 202: { type: 'null' } } }, attachValidation: true, bodyLimit: deps.bodyLimitBytes },
      async (request, reply) => {
        // Not validated yet (attachValidation): whatever the parser above made of the bytes, its markers included.
        const body = request.body as Record<string | symbol, unknown> | undefined
        if (body?.[PARSE_ERROR]) return jsonRpcError(reply, 400, ErrorCode.ParseError, 'Parse error: the body is not JSON')
        if (body?.[TOO_DEEP]) {
          return jsonRpcError(
            reply,
            400,
            ErrorCode.InvalidRequest,
            `Invalid Request: the body nests objects and arrays more than ${MCP_JSON_DEPTH} levels deep (a tool's arguments may nest ${MAX_JSON_DEPTH - 1}, as an HTTP body's members may)`,
          )
        }
        if (request.validationError) return jsonRpcError(reply, 400, ErrorCode.InvalidRequest, 'Invalid Request: a JSON-RPC message (object) or batch (array) is required')
        const context = contextOf(request)
        let answer: HttpAnswer
        if (isModernRequest(request.headers, request.body, SUPPORTED_PROTOCOL_VERSIONS)) {
          answer = await modern(request.headers, request.body, (tool, args, meta) => callTool(tool, args, meta, context, deps))
        } else {
          const server = serverFor(table, deps, context)
          const transport = new PostTransport(REQUESTS)
          // Not closed afterwards: once it answered, the transport holds nothing, and a close only
          // builds a "connection closed" error for handlers that are all done.
          await server.connect(transport)
          answer = await transport.answer(request.headers, request.body)
        }
        reply.code(answer.status as 200)
        if (answer.body === undefined) return reply.send()
        return reply.type('application/json').send(answer.body)
      },
    )
    scope.get(MCP_PATH, { schema: { response: { 405: { type: 'object', additionalProperties: true } } } }, methodNotAllowed)
    scope.delete(MCP_PATH, { schema: { response: { 405: { type: 'object', additionalProperties: true } } } }, methodNotAllowed)
  })
}
