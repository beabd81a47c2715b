// What the /mcp body parser hands the endpoint when a body is not a message: kept apart from the
// endpoint so the route is declared without loading the MCP SDK.
import { MAX_JSON_DEPTH } from '../platform/json-depth.ts'

/** Unparseable JSON reaches the handler as this, so the answer is JSON-RPC's parse error, not a problem. */
export const PARSE_ERROR = Symbol('mcp parse error')
/** A body nesting past the shared JSON bound (with room for a batch, `params` and `arguments` above a tool's body) reaches the handler as this. */
export const TOO_DEEP = Symbol('mcp body too deep')
export const MCP_JSON_DEPTH = MAX_JSON_DEPTH + 3
