// Shared parts of an OpenAPI document. Operations repeat the same schemas and responses (the
// problem+json answers of every operation, the task object of every task operation, …); a document
// carries each such part once, under `components`, and every use refers to it with `$ref`. Only
// parts used more than once in the document move, so a document holds exactly what its operations
// need and no operation pays a `$ref` for a part it alone uses.
//
// Component names are the same in every document (pages, searches, per-service documents): a part
// is named after the first place it occurs in the registry (`createTask.201`, `createTask.request`,
// `createTask.201.schedule`), problem+json parts after their status (`Problem`, `Problem404`).

type Json = null | boolean | number | string | Json[] | JsonObject
export interface JsonObject {
  [key: string]: Json
}

type Kind = 'schemas' | 'responses'

/** Keywords whose value is a schema, an array of schemas, or a map of name → schema (JSON Schema 2020-12). */
const SUBSCHEMA = ['items', 'additionalProperties', 'not', 'if', 'then', 'else', 'contains', 'propertyNames', 'unevaluatedItems', 'unevaluatedProperties']
const SUBSCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf', 'prefixItems']
const SUBSCHEMA_MAPS = ['properties', 'patternProperties', 'dependentSchemas']

/** Parts smaller than this stay inline: a `$ref` would save next to nothing. */
const MIN_SHARED_BYTES = 96

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * The schema-valued children of a schema. Each comes with the tail of its component name: a
 * property's name, or the keyword (`items`, `anyOf1`) after the tail of the schema holding it.
 */
function* subschemas(schema: JsonObject, tail: string): Generator<[string, JsonObject, (replacement: Json) => void]> {
  const after = (keyword: string) => (tail === '' ? keyword : `${tail}.${keyword}`)
  for (const keyword of SUBSCHEMA) {
    const child = schema[keyword]
    if (isObject(child)) yield [after(keyword), child, (replacement) => (schema[keyword] = replacement)]
  }
  for (const keyword of SUBSCHEMA_LISTS) {
    const list = schema[keyword]
    if (Array.isArray(list)) {
      for (let i = 0; i < list.length; i++) {
        const child = list[i]
        if (isObject(child)) yield [after(`${keyword}${i}`), child, (replacement) => (list[i] = replacement)]
      }
    }
  }
  for (const keyword of SUBSCHEMA_MAPS) {
    const map = schema[keyword]
    if (isObject(map)) {
      for (const [name, child] of Object.entries(map)) {
        if (isObject(child)) yield [keyword === 'properties' ? name : after(`${keyword}.${name}`), child, (replacement) => (map[name] = replacement)]
      }
    }
  }
}

/** Schemas of a response's or request body's media types. */
function* contentSchemas(holder: JsonObject): Generator<[JsonObject, (replacement: Json) => void]> {
  const content = holder.content
  if (!isObject(content)) return
  for (const media of Object.values(content)) {
    if (isObject(media) && isObject(media.schema)) {
      const target = media
      yield [media.schema, (replacement) => (target.schema = replacement)]
    }
  }
}

/**
 * A place in an operation where a shareable part sits, with a function that puts a `$ref` there.
 * Its component name is `root` (`createTask.201`, `createTask.request`), then `tail` if any.
 */
interface Slot {
  kind: Kind
  node: JsonObject
  root: string
  tail: string
  replace: (replacement: Json) => void
}

const nameOf = (slot: Slot): string => (slot.tail === '' ? slot.root : `${slot.root}.${slot.tail}`)

/** The top-level shareable parts of an operation object: its responses and its request body schemas. */
function* operationSlots(operationId: string, operation: JsonObject): Generator<Slot> {
  const responses = operation.responses
  if (isObject(responses)) {
    for (const [status, response] of Object.entries(responses)) {
      if (isObject(response)) yield { kind: 'responses', node: response, root: `${operationId}.${status}`, tail: '', replace: (replacement) => (responses[status] = replacement) }
    }
  }
  const body = operation.requestBody
  if (isObject(body)) {
    for (const [schema, replace] of contentSchemas(body)) yield { kind: 'schemas', node: schema, root: `${operationId}.request`, tail: '', replace }
  }
}

/** The shareable parts inside a part: a response's schemas, a schema's subschemas. */
function* childSlots(slot: Slot): Generator<Slot> {
  if (slot.kind === 'responses') {
    for (const [schema, replace] of contentSchemas(slot.node)) yield { kind: 'schemas', node: schema, root: slot.root, tail: '', replace }
    return
  }
  for (const [tail, child, replace] of subschemas(slot.node, slot.tail)) yield { kind: 'schemas', node: child, root: slot.root, tail, replace }
}

const keyOf = (kind: Kind, node: JsonObject): string => `${kind === 'schemas' ? 's' : 'r'}${JSON.stringify(node)}`

/** Registry-wide names of shareable parts, by content key. */
export type ComponentNames = ReadonlyMap<string, string>

/**
 * Names every shareable part of `operations` (in registry order) after the first place it occurs;
 * `problemSchema` is `Problem` and the responses holding only it are `Problem<status>`. Names are
 * unique within components.schemas and within components.responses.
 */
export function componentNames(operations: readonly { operationId: string; operation: JsonObject }[], problemSchema: JsonObject): ComponentNames {
  const names = new Map<string, string>()
  const taken = { schemas: new Set<string>(), responses: new Set<string>() }
  const problemKey = keyOf('schemas', problemSchema)
  const assign = (kind: Kind, key: string, wanted: string) => {
    let name = wanted
    for (let n = 2; taken[kind].has(name); n++) name = `${wanted}_${n}`
    names.set(key, name)
    taken[kind].add(name)
  }
  assign('schemas', problemKey, 'Problem')
  const visit = (slot: Slot) => {
    const key = keyOf(slot.kind, slot.node)
    if (key.length < MIN_SHARED_BYTES || names.has(key)) return
    let wanted = nameOf(slot)
    if (slot.kind === 'responses') {
      const status = slot.root.slice(slot.root.lastIndexOf('.') + 1)
      const schemas = [...contentSchemas(slot.node)].map(([schema]) => keyOf('schemas', schema))
      if (schemas.length > 0 && schemas.every((schema) => schema === problemKey)) wanted = `Problem${status}`
    }
    assign(slot.kind, key, wanted)
    for (const child of childSlots(slot)) visit(child)
  }
  for (const { operationId, operation } of operations) for (const slot of operationSlots(operationId, operation)) visit(slot)
  return names
}

interface Vertex {
  kind: Kind
  name: string
  /** Length of the part's JSON text. */
  size: number
  /** Each place the part occurs: inside another part (a vertex) or directly in an operation (null), with how often. */
  parents: Map<Vertex | null, number>
  /** How many times the part is written out in the document (inline, or as a `$ref` when shared). */
  uses: number
  shared: boolean
}

/**
 * Moves the parts that `operations` use more than once into components, when that makes the
 * document smaller: rewrites the operation objects in place (every use of a shared part becomes a
 * `$ref`) and returns the components. The operation objects must not share objects with each
 * other or with anything else.
 */
export function shareComponents(operations: readonly { operationId: string; operation: JsonObject }[], names: ComponentNames): { schemas: JsonObject; responses: JsonObject } {
  const vertices = new Map<string, Vertex>()
  let anonymous = 0
  const add = (slot: Slot, parent: Vertex | null) => {
    const key = keyOf(slot.kind, slot.node)
    if (key.length < MIN_SHARED_BYTES) return
    let vertex = vertices.get(key)
    if (vertex === undefined) {
      const name = names.get(key) ?? `Shared${++anonymous}`
      vertex = { kind: slot.kind, name, size: key.length - 1, parents: new Map(), uses: 0, shared: false }
      vertices.set(key, vertex)
      // The insides of a part are counted once per distinct part; the part's own uses multiply them.
      for (const child of childSlots(slot)) add(child, vertex)
    }
    vertex.parents.set(parent, (vertex.parents.get(parent) ?? 0) + 1)
  }
  for (const { operationId, operation } of operations) for (const slot of operationSlots(operationId, operation)) add(slot, null)

  // The text of a part contains the text of each part inside it, so in order of decreasing length
  // every part comes after all the parts that hold it: their uses are known when it is reached.
  const ordered = [...vertices.values()].sort((a, b) => b.size - a.size)
  for (const vertex of ordered) {
    let uses = 0
    for (const [parent, count] of vertex.parents) uses += count * (parent === null || parent.shared ? 1 : parent.uses)
    vertex.uses = uses
    // Written once plus a `$ref` per use, instead of once per use.
    const ref = `{"$ref":"#/components/${vertex.kind}/${vertex.name}"}`.length
    vertex.shared = uses >= 2 && (uses - 1) * vertex.size > uses * ref + vertex.name.length + 3
  }

  const schemas: JsonObject = {}
  const responses: JsonObject = {}
  const place = (slot: Slot): void => {
    // The key is read before the part's insides are rewritten.
    const key = keyOf(slot.kind, slot.node)
    const vertex = key.length < MIN_SHARED_BYTES ? undefined : vertices.get(key)
    if (vertex?.shared) {
      const target = vertex.kind === 'schemas' ? schemas : responses
      if (!(vertex.name in target)) {
        target[vertex.name] = slot.node
        for (const child of childSlots(slot)) place(child)
      }
      slot.replace({ $ref: `#/components/${vertex.kind}/${vertex.name}` })
      return
    }
    for (const child of childSlots(slot)) place(child)
  }
  for (const { operationId, operation } of operations) for (const slot of operationSlots(operationId, operation)) place(slot)
  return { schemas, responses }
}
