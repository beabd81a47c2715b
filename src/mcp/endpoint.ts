// The /mcp endpoint itself, loaded on the first MCP request (server.ts declares the route): the
// official SDK and zod are 15 MiB and ~75 ms of every start that never serves MCP.
import type { FastifyReply, FastifyRequest } from 'fastify'
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
import { MAX_JSON_DEPTH } from '../platform/json-depth.ts'
import { MCP_JSON_DEPTH, PARSE_ERROR, TOO_DEEP } from './body-markers.ts'
import { callTool, type CallContext, type ToolResult } from './calls.ts'
import { createModernHandler, isModernRequest } from './modern.ts'
import type { Catalog } from '../catalog/catalog.ts'
import type { Logger } from '../platform/logger.ts'
import type { OperationDispatcher } from './dispatcher.ts'
import type { ToolTable } from './tools.ts'
import { type HttpAnswer, PostTransport, type RequestSchema, jsonRpcError as rpcError } from './transport.ts'

const SERVER_INFO = { name: 'agent-gateway', version: '1.0.0' }
const INSTRUCTIONS =
  'Tools are the Agent Gateway operations (gateway, scheduler, memory), named by operationId. Paid tools follow the x402 v2 MCP transport ' +
  '(_meta["x402/payment"]) and, where the server offers it, MPP (_meta["org.paymentauth/credential"]); plan tools take Authorization: Bearer; owner tools take a SIGN-IN-WITH-X proof ' +
  '(_meta["agent-gateway/sign-in-with-x"]) signed for the operation URL in the 401 challenge.'
const CAPABILITIES = {
  tools: { listChanged: false },
  experimental: { payment: { methods: { tempo: { intents: ['charge'] } } }, x402: { version: 2 } },
}

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

export interface McpDeps {
  catalog: Catalog
  dispatcher: OperationDispatcher
  bodyLimitBytes: number
  logger: Logger
}

export interface McpEndpoint {
  post(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply>
  methodNotAllowed(request: FastifyRequest, reply: FastifyReply): FastifyReply
}

export function createMcpEndpoint(deps: McpDeps, table: ToolTable): McpEndpoint {
  const modern = createModernHandler({
    table,
    serverInfo: SERVER_INFO,
    capabilities: CAPABILITIES,
    instructions: INSTRUCTIONS,
    legacyVersions: SUPPORTED_PROTOCOL_VERSIONS,
    logger: deps.logger,
  })
  return {
    async post(request, reply) {
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
    methodNotAllowed: (_request, reply) => jsonRpcError(reply.header('allow', 'POST'), 405, -32000, 'Method not allowed: this MCP endpoint is stateless; use POST.'),
  }
}
