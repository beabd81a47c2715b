// POST /mcp: a stateless Streamable HTTP MCP endpoint (official SDK server) whose tools are the
// registry's operations. Stateless (no session id), so any replica answers any request: each POST
// gets its own SDK Server and transport (transport.ts), as the SDK requires of stateless transports;
// the tool table and list result are built once. A request marked as MCP 2026-07-28 (its _meta or its
// MCP-Protocol-Version header) is answered by modern.ts instead, without the SDK. GET and DELETE
// answer 405 (no server-initiated stream, no session to end). The route is declared here; what
// answers it (endpoint.ts, with the SDK) loads on the first request to it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { nestsDeeperThan } from '../platform/json-depth.ts'
import { MCP_JSON_DEPTH, PARSE_ERROR, TOO_DEEP } from './body-markers.ts'
import type { McpDeps, McpEndpoint } from './endpoint.ts'
import { buildToolTable } from './tools.ts'

export type { McpDeps } from './endpoint.ts'

export const MCP_PATH = '/mcp'

export function registerMcpRoute(app: FastifyInstance, deps: McpDeps): void {
  // Built at start, so a registry that cannot be tools fails the start, not the first call.
  const table = buildToolTable(deps.catalog)
  // Loaded once, on the first request; a failed load is tried again by the next.
  let loading: Promise<McpEndpoint> | undefined
  const endpoint = (): Promise<McpEndpoint> => {
    loading ??= import('./endpoint.ts').then(({ createMcpEndpoint }) => createMcpEndpoint(deps, table))
    loading.catch(() => {
      loading = undefined
    })
    return loading
  }
  const methodNotAllowed = async (request: FastifyRequest, reply: FastifyReply) => (await endpoint()).methodNotAllowed(request, reply)
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
      async (request, reply) => (await endpoint()).post(request, reply),
    )
    scope.get(MCP_PATH, { schema: { response: { 405: { type: 'object', additionalProperties: true } } } }, methodNotAllowed)
    scope.delete(MCP_PATH, { schema: { response: { 405: { type: 'object', additionalProperties: true } } } }, methodNotAllowed)
  })
}
