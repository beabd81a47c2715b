// Plain JSON as client-node hands it over (CustomObjectsApi answers untyped objects, ApiException
// bodies are raw text): the narrowing the Kubernetes modules share.

export type Json = unknown
export type JsonRecord = Record<string, unknown>

export function isRecord(value: Json): value is JsonRecord {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
