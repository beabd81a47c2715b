// A fake Kubernetes API server (node:http, plain http) for offline tests of the operator. It serves
// what kubectl 1.35, helm 4 and @kubernetes/client-node 2.0.1 need, with the semantics a
// controller depends on (as a real API server behaves):
// - discovery (/version, /api, /apis, per group-version; not the aggregated form, so clients fall
//   back to the legacy lists) and a minimal /openapi/v3, so kubectl validates on the server;
// - CRUD for the given CRDs (schema-driven: pruning of unknown fields with fieldValidation
//   Strict/Warn/Ignore, defaults, ajv validation, the CEL subset our CRDs use) and for opaque
//   built-ins (BUILT_INS: core, batch, apps, coordination, networking, rbac, policy, CRDs — a CRD
//   created through the API is served at once);
// - ObjectMeta validation (names, labels, complete ownerReferences), MicroTime on Leases;
// - one resourceVersion counter; 409 Conflict on a stale resourceVersion, 409 AlreadyExists, 404,
//   422 Invalid, all as metav1.Status; generation bumps on spec changes only; the /status
//   subresource (status writes ignore spec and metadata, main writes ignore status, create drops
//   status); no-op writes keep the resourceVersion;
// - PATCH: merge (RFC 7386), JSON Patch (RFC 6902), strategic merge (built-ins; approximated, see
//   strategicMergePatch) and server-side apply (approximated as create-or-merge recording
//   managedFields; no conflicts, no removal of fields a manager stopped applying);
// - watches (chunked JSON lines) resuming from a resourceVersion within a bounded history, else an
//   ERROR event with a 410 Status; selectors applied per event (leaving the selection = DELETED);
//   sendInitialEvents with the initial-events-end bookmark; Table watches;
// - label and field selectors (metadata.name, metadata.namespace, the CRD's selectableFields, the
//   built-ins' usual ones), anything else 400 as on the real server;
// - finalizers (deletionTimestamp, no new finalizers while deleting), ownerReference garbage
//   collection (Background, Foreground, Orphan; batch/v1 Jobs default to Orphan), namespace deletion;
// - Table output from printer columns (Name/Age for built-ins); pod logs (tail, limit, follow);
// - protobuf request bodies for Secrets and ConfigMaps (helm's release storage).
// Test-control methods play kubelet and the Job controller (startJob, writeLog, completeJob,
// failPod); stop()/listen()/restart() take the server away and bring it back on the same port with
// the same objects and a compacted watch history (resumed watches get 410), as an apiserver restart.
// Not emulated: authentication beyond one bearer token (kubectl sends none over http), RBAC,
// admission webhooks, CEL beyond the subset below, ttlSecondsAfterFinished, activeDeadlineSeconds,
// list pagination (all items, no continue token).
import { randomBytes, randomUUID } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Ajv, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml'
import { RUN_CRD, TASK_CRD, type PrinterColumn, type SchemaNode } from '../../controllers/kubernetes/crds.ts'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

// ---------------------------------------------------------------- types

export interface OwnerRef {
  apiVersion: string
  kind: string
  name: string
  uid: string
  controller?: boolean
  blockOwnerDeletion?: boolean
}

export interface ObjectMetadata {
  name: string
  namespace?: string
  uid: string
  resourceVersion: string
  generation?: number
  creationTimestamp: string
  deletionTimestamp?: string
  deletionGracePeriodSeconds?: number
  generateName?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
  ownerReferences?: OwnerRef[]
  finalizers?: string[]
  managedFields?: Array<Record<string, unknown>>
  [field: string]: unknown
}

export interface KubeObject {
  apiVersion: string
  kind: string
  metadata: ObjectMetadata
  [field: string]: unknown
}

export interface RequestRecord {
  method: string
  /** Path with the query string. */
  path: string
  contentType: string | undefined
  /** The response status, once the response ended (a watch answered 410 is a 200 with an ERROR event). */
  status?: number
}

export interface FakeKubeApiServerOptions {
  /** CustomResourceDefinition objects to serve; default TASK_CRD and RUN_CRD. */
  crds?: object[]
  /** Watch events retained for resume; a watch from an older resourceVersion gets 410. Default 1000. */
  watchWindow?: number
  /** Clock for timestamps and Table ages; default the system clock. */
  now?: () => Date
  /** Namespaces that exist from the start (creating in a missing namespace is 404, as with the NamespaceLifecycle admission). Default ['default']. */
  namespaces?: string[]
  /** Bearer token of the kubeconfig; a request with another token gets 401 (none is accepted: kubectl sends none over http). Default 'fake-token'. */
  token?: string
  /** Port on 127.0.0.1; default a free one. It is kept across stop()/listen(). */
  port?: number
}

export interface JobResult {
  exitCode: number
  logs: string
  /** Container termination reason (OOMKilled, Error, …); DeadlineExceeded fails the Job with that reason. */
  reason?: string
}

export type WaitingReason = 'ImagePullBackOff' | 'ErrImagePull' | 'CreateContainerConfigError'

export interface FakeKubeApiServer {
  url: string
  port: number
  kubeconfigPath: string
  token: string
  close(): Promise<void>
  get(apiVersion: string, kind: string, namespace: string | undefined, name: string): KubeObject | undefined
  list(apiVersion: string, kind: string, namespace?: string): KubeObject[]
  /** Kubelet + Job controller: the Job's Pod runs (created if needed), Job status.active = 1. */
  startJob(namespace: string, jobName: string): void
  /**
   * Kubelet: the running container writes `text` to its log now. Each line is stamped with the
   * clock, so a `timestamps=true` read gets the kubelet's RFC 3339 prefixes; followers get it at once.
   */
  writeLog(namespace: string, jobName: string, text: string): void
  /** The Pod terminates with exitCode and logs (appended verbatim after what writeLog wrote); the Job becomes Complete (0) or Failed. */
  completeJob(namespace: string, jobName: string, result: JobResult): void
  /** The Pod's container is stuck waiting (the Job controller never fails such a Job). */
  failPod(namespace: string, jobName: string, waitingReason: WaitingReason, message: string): void
  /** Every request, in order. */
  readonly requests: RequestRecord[]
  /** Drops the whole watch history: any watch from an earlier resourceVersion then gets 410. */
  compact(): void
  /** The current resourceVersion (the counter). */
  resourceVersion(): string
  /** Ends every open watch stream, as an API server restart or a load balancer idle timeout does. */
  closeWatches(): void
  /** The API server goes away: open watches and log follows end, connections close, new ones are refused. State is kept. */
  stop(): Promise<void>
  /** Back on the same port with the same objects; the watch history starts at the current resourceVersion (older resumes get 410). */
  listen(): Promise<void>
  /** stop(), `downMs` without a server, listen(). */
  restart(downMs?: number): Promise<void>
  /** Whether it is listening now. */
  isUp(): boolean
  /** Watches answered with 410 Gone (too old resourceVersion), for tests. */
  readonly stats: { expiredWatches: number; restarts: number }
}

interface ResourceType {
  group: string
  version: string
  apiVersion: string
  kind: string
  listKind: string
  plural: string
  singular: string
  namespaced: boolean
  shortNames: string[]
  categories: string[]
  /** Status is a subresource: main writes keep the stored status, status writes only change status. */
  statusSubresource: boolean
  /** Has a generation counting spec changes. */
  generation: boolean
  /** Custom resource (no strategic merge patch, no unconditional update). */
  custom: boolean
  schema?: SchemaNode
  validate?: ValidateFunction
  celRules: CelRule[]
  columns: PrinterColumn[]
  /** Field selector keys besides metadata.name/namespace, e.g. spec.taskRef.name. */
  selectableFields: string[]
  /** Default deletion propagation when the client sends none. */
  defaultPropagation: 'Background' | 'Orphan'
}

class ApiError extends Error {
  readonly code: number
  readonly reason: string
  readonly details: Record<string, unknown> | undefined
  constructor(code: number, reason: string, message: string, details?: Record<string, unknown>) {
    super(message)
    this.code = code
    this.reason = reason
    this.details = details
  }
}

function statusBody(code: number, reason: string, message: string, details?: Record<string, unknown>): Record<string, unknown> {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, ...(details ? { details } : {}), code }
}

// ---------------------------------------------------------------- JSON helpers

type Json = unknown
type JsonRecord = Record<string, unknown>

function isRecord(value: Json): value is JsonRecord {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/**
 * Deep copy. The objects here are JSON values (parsed request bodies and what the fake builds), for
 * which this is what structuredClone gives (undefined values and `__proto__` keys kept as own
 * properties) at a fraction of its cost: structuredClone serializes and deserializes, and it was a
 * fifth of the fake's CPU under bench/k8s-reconcile.bench.ts. Anything that is not a plain object,
 * an array or a primitive goes to structuredClone.
 */
function clone<T>(value: T): T {
  if (typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) {
    const out = new Array<unknown>(value.length)
    for (let i = 0; i < value.length; i += 1) out[i] = clone(value[i])
    return out as T
  }
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) return structuredClone(value)
  const out: JsonRecord = {}
  for (const key of Object.keys(value)) {
    const copy = clone((value as JsonRecord)[key])
    if (key === '__proto__') Object.defineProperty(out, key, { value: copy, enumerable: true, writable: true, configurable: true })
    else out[key] = copy
  }
  return out as T
}

function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, i) => deepEqual(item, b[i]))
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a).filter((k) => a[k] !== undefined)
    return keys.length === Object.keys(b).filter((k) => b[k] !== undefined).length && keys.every((k) => deepEqual(a[k], b[k]))
  }
  return false
}

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: Json, patch: Json): Json {
  if (!isRecord(patch)) return clone(patch)
  const out: JsonRecord = isRecord(target) ? { ...target } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key]
    else out[key] = mergePatch(out[key], value)
  }
  return out
}

/** Keys that identify list elements in strategic merge patches (patchMergeKey of the built-in types). */
const MERGE_KEYS = ['uid', 'name', 'type', 'containerPort', 'port', 'mountPath', 'devicePath', 'ip', 'topologyKey']

/**
 * Strategic merge patch, approximated: a JSON merge patch whose lists of objects merge element-wise
 * by their merge key (name, type, uid, …) honouring `$patch: delete|replace`, whose
 * metadata.finalizers is a union (`$deleteFromPrimitiveList/finalizers` removes), and whose other
 * `$` directives ($setElementOrder, $retainKeys) are dropped. Enough for kubectl apply and
 * client-node's default generic patch on built-ins; not the per-field patch strategies of the real one.
 */
export function strategicMergePatch(target: Json, patch: Json, path: string[] = []): Json {
  if (!isRecord(patch)) return clone(patch)
  if (patch.$patch === 'replace') {
    const { $patch: _, ...rest } = patch
    return clone(rest)
  }
  const out: JsonRecord = isRecord(target) ? { ...target } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (key.startsWith('$deleteFromPrimitiveList/')) {
      const field = key.slice('$deleteFromPrimitiveList/'.length)
      if (Array.isArray(out[field]) && Array.isArray(value)) out[field] = (out[field] as Json[]).filter((item) => !value.includes(item))
      continue
    }
    if (key.startsWith('$')) continue
    const current = out[key]
    if (value === null) delete out[key]
    else if (Array.isArray(value) && Array.isArray(current)) out[key] = mergeList(current, value, [...path, key])
    else if (isRecord(value)) out[key] = strategicMergePatch(current, value, [...path, key])
    else out[key] = clone(value)
  }
  return out
}

function mergeList(current: Json[], patch: Json[], path: string[]): Json[] {
  if (path.join('.') === 'metadata.finalizers') return [...current, ...patch.filter((item) => !current.includes(item))]
  const key = MERGE_KEYS.find((k) => patch.length > 0 && patch.every((item) => isRecord(item) && item[k] !== undefined))
  if (key === undefined) return clone(patch)
  const out = [...current]
  for (const item of patch as JsonRecord[]) {
    const index = out.findIndex((existing) => isRecord(existing) && existing[key] === item[key])
    if (item.$patch === 'delete') {
      if (index >= 0) out.splice(index, 1)
    } else if (index >= 0) out[index] = strategicMergePatch(out[index], item, path)
    else out.push(strategicMergePatch({}, item, path))
  }
  return out
}

function pointerTokens(pointer: string): string[] {
  if (pointer === '') return []
  if (!pointer.startsWith('/')) throw new ApiError(422, 'Invalid', `invalid JSON pointer ${JSON.stringify(pointer)}`)
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'))
}

function pointerGet(doc: Json, tokens: string[]): Json {
  let node = doc
  for (const token of tokens) {
    if (Array.isArray(node)) node = node[Number(token)]
    else if (isRecord(node)) node = node[token]
    else return undefined
  }
  return node
}

/** RFC 6902 JSON Patch: add, remove, replace, move, copy, test. */
export function jsonPatch(doc: Json, operations: Json): Json {
  if (!Array.isArray(operations)) throw new ApiError(400, 'BadRequest', 'a JSON patch must be an array of operations')
  let result = clone(doc)
  const fail = (message: string): never => {
    throw new ApiError(422, 'Invalid', message)
  }
  const parentOf = (tokens: string[], op: string): { parent: Json; key: string } => {
    if (tokens.length === 0) return fail(`${op} operation on the document root is not supported`)
    const parent = pointerGet(result, tokens.slice(0, -1))
    if (!isRecord(parent) && !Array.isArray(parent)) return fail(`${op} operation does not apply: doc is missing path: /${tokens.join('/')}`)
    return { parent, key: tokens[tokens.length - 1] as string }
  }
  const remove = (tokens: string[], op: string): Json => {
    const { parent, key } = parentOf(tokens, op)
    if (Array.isArray(parent)) {
      const index = Number(key)
      if (!Number.isInteger(index) || index < 0 || index >= parent.length) fail(`${op} operation does not apply: doc is missing path: /${tokens.join('/')}`)
      return parent.splice(index, 1)[0]
    }
    const record = parent as JsonRecord
    if (!(key in record)) fail(`${op} operation does not apply: doc is missing path: /${tokens.join('/')}`)
    const old = record[key]
    delete record[key]
    return old
  }
  const add = (tokens: string[], value: Json, op: string): void => {
    if (tokens.length === 0) {
      result = clone(value)
      return
    }
    const { parent, key } = parentOf(tokens, op)
    if (Array.isArray(parent)) {
      const index = key === '-' ? parent.length : Number(key)
      if (!Number.isInteger(index) || index < 0 || index > parent.length) fail(`${op} operation does not apply: index out of bounds: /${tokens.join('/')}`)
      parent.splice(index, 0, clone(value))
    } else (parent as JsonRecord)[key] = clone(value)
  }
  for (const operation of operations) {
    if (!isRecord(operation) || typeof operation.op !== 'string' || typeof operation.path !== 'string') fail('invalid JSON patch operation')
    const op = operation as { op: string; path: string; from?: string; value?: Json }
    const tokens = pointerTokens(op.path)
    switch (op.op) {
      case 'add':
        add(tokens, op.value, 'add')
        break
      case 'remove':
        remove(tokens, 'remove')
        break
      case 'replace': {
        if (tokens.length === 0) {
          result = clone(op.value)
          break
        }
        remove(tokens, 'replace')
        add(tokens, op.value, 'replace')
        break
      }
      case 'move':
        add(tokens, remove(pointerTokens(op.from ?? ''), 'move'), 'move')
        break
      case 'copy':
        add(tokens, pointerGet(result, pointerTokens(op.from ?? '')), 'copy')
        break
      case 'test':
        if (!deepEqual(pointerGet(result, tokens), op.value)) fail(`testing value ${op.path} failed: test failed`)
        break
      default:
        fail(`Unexpected kind: ${op.op}`)
    }
  }
  return result
}

// ---------------------------------------------------------------- JSONPath (printer columns)

type PathStep = { field: string } | { index: number } | { all: true } | { filter: { path: string[]; value: string } }

/** Parses the simple JSONPaths of printer columns: .a.b, [0], [*], [?(@.type=="Ready")]. */
export function parseJsonPath(path: string): PathStep[] {
  const steps: PathStep[] = []
  let rest = path.trim()
  while (rest.length > 0) {
    let match: RegExpMatchArray | null
    if ((match = rest.match(/^\.([A-Za-z0-9_-]+)/))) steps.push({ field: match[1] as string })
    else if ((match = rest.match(/^\[(\d+)\]/))) steps.push({ index: Number(match[1]) })
    else if ((match = rest.match(/^\[\*\]/))) steps.push({ all: true })
    else if ((match = rest.match(/^\[\?\(@((?:\.[A-Za-z0-9_-]+)+)\s*==\s*["']([^"']*)["']\)\]/))) {
      steps.push({ filter: { path: (match[1] as string).slice(1).split('.'), value: match[2] as string } })
    } else throw new Error(`unsupported JSONPath ${JSON.stringify(path)} at ${JSON.stringify(rest)}`)
    rest = rest.slice(match[0].length)
  }
  return steps
}

/** Every value the path selects, in document order. */
export function evaluateJsonPath(doc: Json, path: string): Json[] {
  let nodes: Json[] = [doc]
  for (const step of parseJsonPath(path)) {
    const next: Json[] = []
    for (const node of nodes) {
      if ('field' in step) {
        if (isRecord(node) && node[step.field] !== undefined) next.push(node[step.field])
      } else if ('index' in step) {
        if (Array.isArray(node) && step.index < node.length) next.push(node[step.index])
      } else if ('all' in step) {
        if (Array.isArray(node)) next.push(...node)
        else if (isRecord(node)) next.push(...Object.values(node))
      } else if (Array.isArray(node)) {
        for (const item of node) {
          const value = step.filter.path.reduce<Json>((v, key) => (isRecord(v) ? v[key] : undefined), item)
          if (value !== undefined && String(value) === step.filter.value) next.push(item)
        }
      }
    }
    nodes = next
  }
  return nodes
}

// ---------------------------------------------------------------- a CEL subset

// The rules our CRDs use: self/oldSelf paths, has(), ==, !=, !, &&, ||, parentheses and literals.
// A rule outside this subset makes startFakeKubeApiServer throw, so a CRD never carries a rule the
// fake silently skips.
type CelExpr =
  | { kind: 'literal'; value: Json }
  | { kind: 'path'; root: 'self' | 'oldSelf'; fields: string[] }
  | { kind: 'has'; path: { root: 'self' | 'oldSelf'; fields: string[] } }
  | { kind: 'not'; expr: CelExpr }
  | { kind: 'binary'; op: '==' | '!=' | '&&' | '||'; left: CelExpr; right: CelExpr }

interface CelRule {
  rule: string
  message: string
  expr: CelExpr
  usesOldSelf: boolean
  /** Where the rule sits in the object, e.g. ['spec', 'taskRef']. */
  at: string[]
}

export function parseCel(source: string): CelExpr {
  const tokens = source.match(/\s*(==|!=|&&|\|\||[!().]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_]*)/gy)
  if (tokens === null || tokens.join('').trim() !== source.trim()) throw new Error(`fake apiserver: cannot tokenize CEL ${JSON.stringify(source)}`)
  const list = tokens.map((t) => t.trim())
  let position = 0
  const peek = (): string | undefined => list[position]
  const take = (expected?: string): string => {
    const token = list[position++]
    if (token === undefined || (expected !== undefined && token !== expected))
      throw new Error(`fake apiserver: unsupported CEL ${JSON.stringify(source)} (expected ${expected ?? 'more'} at token ${position})`)
    return token
  }
  const path = (): { root: 'self' | 'oldSelf'; fields: string[] } => {
    const root = take()
    if (root !== 'self' && root !== 'oldSelf') throw new Error(`fake apiserver: unsupported CEL ${JSON.stringify(source)} (identifier ${root})`)
    const fields: string[] = []
    while (peek() === '.') {
      take('.')
      fields.push(take())
    }
    return { root, fields }
  }
  const primary = (): CelExpr => {
    const token = peek()
    if (token === '(') {
      take('(')
      const inner = or()
      take(')')
      return inner
    }
    if (token === '!') {
      take('!')
      return { kind: 'not', expr: primary() }
    }
    if (token === 'has') {
      take('has')
      take('(')
      const target = path()
      take(')')
      return { kind: 'has', path: target }
    }
    if (token === 'true' || token === 'false' || token === 'null') {
      take()
      return { kind: 'literal', value: token === 'null' ? null : token === 'true' }
    }
    if (token !== undefined && /^["'\d-]/.test(token)) {
      take()
      return { kind: 'literal', value: /^["']/.test(token) ? token.slice(1, -1) : Number(token) }
    }
    return { kind: 'path', ...path() }
  }
  const equality = (): CelExpr => {
    const left = primary()
    const op = peek()
    if (op === '==' || op === '!=') {
      take()
      return { kind: 'binary', op, left, right: primary() }
    }
    return left
  }
  const and = (): CelExpr => {
    let left = equality()
    while (peek() === '&&') {
      take()
      left = { kind: 'binary', op: '&&', left, right: equality() }
    }
    return left
  }
  const or = (): CelExpr => {
    let left = and()
    while (peek() === '||') {
      take()
      left = { kind: 'binary', op: '||', left, right: and() }
    }
    return left
  }
  const expr = or()
  if (position !== list.length) throw new Error(`fake apiserver: unsupported CEL ${JSON.stringify(source)} (trailing tokens)`)
  return expr
}

function evaluateCel(expr: CelExpr, self: Json, oldSelf: Json): Json {
  const resolve = (root: 'self' | 'oldSelf', fields: string[]): Json => {
    let node = root === 'self' ? self : oldSelf
    for (const field of fields) {
      if (!isRecord(node) || !(field in node)) throw new Error(`no such key: ${field}`)
      node = node[field]
    }
    return node
  }
  switch (expr.kind) {
    case 'literal':
      return expr.value
    case 'path':
      return resolve(expr.root, expr.fields)
    case 'has': {
      const parent = resolve(expr.path.root, expr.path.fields.slice(0, -1))
      const last = expr.path.fields[expr.path.fields.length - 1]
      return last !== undefined && isRecord(parent) && parent[last] !== undefined
    }
    case 'not':
      return evaluateCel(expr.expr, self, oldSelf) !== true
    case 'binary':
      if (expr.op === '&&') return evaluateCel(expr.left, self, oldSelf) === true && evaluateCel(expr.right, self, oldSelf) === true
      if (expr.op === '||') return evaluateCel(expr.left, self, oldSelf) === true || evaluateCel(expr.right, self, oldSelf) === true
      return deepEqual(evaluateCel(expr.left, self, oldSelf), evaluateCel(expr.right, self, oldSelf)) === (expr.op === '==')
  }
}

function usesOldSelf(expr: CelExpr): boolean {
  switch (expr.kind) {
    case 'literal':
      return false
    case 'path':
      return expr.root === 'oldSelf'
    case 'has':
      return expr.path.root === 'oldSelf'
    case 'not':
      return usesOldSelf(expr.expr)
    case 'binary':
      return usesOldSelf(expr.left) || usesOldSelf(expr.right)
  }
}

function collectCelRules(schema: SchemaNode, at: string[] = []): CelRule[] {
  const rules: CelRule[] = []
  const validations = schema['x-kubernetes-validations']
  if (Array.isArray(validations)) {
    for (const validation of validations as Array<{ rule: string; message?: string }>) {
      const expr = parseCel(validation.rule)
      rules.push({ rule: validation.rule, message: validation.message ?? `failed rule: ${validation.rule}`, expr, usesOldSelf: usesOldSelf(expr), at })
    }
  }
  if (isRecord(schema.properties)) {
    for (const [key, child] of Object.entries(schema.properties)) rules.push(...collectCelRules(child as SchemaNode, [...at, key]))
  }
  // Rules inside array items would need list correlation; our CRDs have none, so refuse them.
  if (isRecord(schema.items) && collectCelRules(schema.items as SchemaNode).length > 0) {
    throw new Error(`fake apiserver: CEL rules inside array items (${at.join('.')}) are not supported`)
  }
  return rules
}

// ---------------------------------------------------------------- schema: prune, default, validate

/** Drops fields the structural schema does not list; returns their paths (for warnings). */
function prune(value: Json, schema: SchemaNode | undefined, path: string, unknown: string[]): void {
  if (schema === undefined || schema['x-kubernetes-preserve-unknown-fields'] === true) return
  if (Array.isArray(value) && isRecord(schema.items)) {
    for (const [i, item] of value.entries()) prune(item, schema.items as SchemaNode, `${path}[${i}]`, unknown)
    return
  }
  if (!isRecord(value) || schema.type !== 'object') return
  const properties = isRecord(schema.properties) ? (schema.properties as Record<string, SchemaNode>) : undefined
  const additional = isRecord(schema.additionalProperties) ? (schema.additionalProperties as SchemaNode) : undefined
  if (properties === undefined && additional === undefined) return
  for (const key of Object.keys(value)) {
    const child = properties?.[key] ?? additional
    const childPath = path === '' ? key : `${path}.${key}`
    if (child === undefined) {
      unknown.push(childPath)
      delete value[key]
    } else if (!(path === '' && key === 'metadata')) prune(value[key], child, childPath, unknown)
  }
}

function applyDefaults(value: Json, schema: SchemaNode | undefined): void {
  if (schema === undefined) return
  if (Array.isArray(value) && isRecord(schema.items)) for (const item of value) applyDefaults(item, schema.items as SchemaNode)
  if (!isRecord(value) || !isRecord(schema.properties)) return
  for (const [key, child] of Object.entries(schema.properties as Record<string, SchemaNode>)) {
    if (value[key] === undefined && child.default !== undefined) value[key] = clone(child.default)
    applyDefaults(value[key], child)
  }
}

function compileSchema(schema: SchemaNode): ValidateFunction {
  const ajv = new Ajv({ strict: false, allErrors: true, formats: { int64: true, int32: true, double: true, float: true, byte: true } })
  addFormats(ajv)
  // metadata is validated by the server itself, not by the CRD schema.
  const withoutMetadata = { ...schema, properties: { ...(schema.properties as JsonRecord), metadata: { type: 'object' } } }
  return ajv.compile(withoutMetadata)
}

function fieldPath(instancePath: string): string {
  return instancePath
    .replace(/^\//, '')
    .split('/')
    .map((s) => (/^\d+$/.test(s) ? `[${s}]` : `.${s}`))
    .join('')
    .replace(/^\./, '')
    .replace(/\.\[/g, '[')
}

// ---------------------------------------------------------------- selectors

type LabelRequirement = { key: string; op: 'in' | 'notin' | 'exists' | '!exists'; values: string[] }

export function parseLabelSelector(selector: string): LabelRequirement[] {
  const parts = selector
    .split(/,(?![^(]*\))/)
    .map((p) => p.trim())
    .filter((p) => p.length > 0)
  return parts.map((part): LabelRequirement => {
    let match: RegExpMatchArray | null
    if ((match = part.match(/^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/))) {
      return { key: match[1] as string, op: match[2] as 'in' | 'notin', values: (match[3] as string).split(',').map((v) => v.trim()) }
    }
    if ((match = part.match(/^([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)$/))) {
      return { key: match[1] as string, op: match[2] === '!=' ? 'notin' : 'in', values: [match[3] as string] }
    }
    if ((match = part.match(/^!\s*([^\s!=]+)$/))) return { key: match[1] as string, op: '!exists', values: [] }
    if ((match = part.match(/^([^\s!=(),]+)$/))) return { key: match[1] as string, op: 'exists', values: [] }
    throw new ApiError(400, 'BadRequest', `unable to parse requirement: ${part}`)
  })
}

function matchesLabels(labels: Record<string, string> | undefined, requirements: LabelRequirement[]): boolean {
  return requirements.every(({ key, op, values }) => {
    const value = labels?.[key]
    if (op === 'exists') return value !== undefined
    if (op === '!exists') return value === undefined
    if (op === 'in') return value !== undefined && values.includes(value)
    return value === undefined || !values.includes(value)
  })
}

type FieldRequirement = { path: string; equals: boolean; value: string }

function parseFieldSelector(selector: string, type: ResourceType): FieldRequirement[] {
  return selector
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0)
    .map((part) => {
      const match = part.match(/^([^=!]+?)\s*(==|=|!=)\s*(.*)$/)
      if (match === null) throw new ApiError(400, 'BadRequest', `invalid selector: '${part}'; can't understand '${part}'`)
      const path = match[1] as string
      if (path !== 'metadata.name' && path !== 'metadata.namespace' && !type.selectableFields.includes(path)) {
        throw new ApiError(
          400,
          'BadRequest',
          `"${path}" is not a known field selector: only "metadata.name", "metadata.namespace"${type.selectableFields.map((f) => `, "${f}"`).join('')}`,
        )
      }
      return { path, equals: match[2] !== '!=', value: match[3] as string }
    })
}

function matchesFields(object: KubeObject, requirements: FieldRequirement[]): boolean {
  return requirements.every(({ path, equals, value }) => {
    const actual = path.split('.').reduce<Json>((node, key) => (isRecord(node) ? node[key] : undefined), object)
    const text = actual === undefined || actual === null ? '' : String(actual)
    return (text === value) === equals
  })
}

// ---------------------------------------------------------------- time

function rfc3339(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z')
}

/** k8s.io/apimachinery/pkg/util/duration.HumanDuration, as kubectl's AGE column shows it. */
export function humanDuration(ms: number): string {
  const seconds = Math.trunc(ms / 1000)
  if (seconds < -1) return '<invalid>'
  if (seconds < 0) return '0s'
  if (seconds < 120) return `${seconds}s`
  const minutes = Math.trunc(seconds / 60)
  if (minutes < 10) return seconds % 60 === 0 ? `${minutes}m` : `${minutes}m${seconds % 60}s`
  if (minutes < 180) return `${minutes}m`
  const hours = Math.trunc(minutes / 60)
  if (hours < 8) return minutes % 60 === 0 ? `${hours}h` : `${hours}h${minutes % 60}m`
  if (hours < 48) return `${hours}h`
  if (hours < 24 * 8) return hours % 24 === 0 ? `${hours / 24}d` : `${Math.trunc(hours / 24)}d${hours % 24}h`
  if (hours < 24 * 365 * 2) return `${Math.trunc(hours / 24)}d`
  if (hours < 24 * 365 * 8) {
    const days = Math.trunc(hours / 24) % 365
    return days === 0 ? `${Math.trunc(hours / 24 / 365)}y` : `${Math.trunc(hours / 24 / 365)}y${days}d`
  }
  return `${Math.trunc(hours / 24 / 365)}y`
}

// ---------------------------------------------------------------- resource types

interface BuiltInOptions {
  clusterScoped?: boolean
  shortNames?: string[]
  categories?: string[]
  /** Has a status subresource (status is kept apart from spec writes). */
  status?: boolean
  /** Has metadata.generation. */
  generation?: boolean
  selectableFields?: string[]
  defaultPropagation?: 'Background' | 'Orphan'
}

function builtIn(apiVersion: string, kind: string, plural: string, options: BuiltInOptions = {}): ResourceType {
  const [group, version] = apiVersion.includes('/') ? (apiVersion.split('/') as [string, string]) : ['', apiVersion]
  return {
    group,
    version,
    apiVersion,
    kind,
    listKind: `${kind}List`,
    plural,
    singular: kind.toLowerCase(),
    namespaced: options.clusterScoped !== true,
    shortNames: options.shortNames ?? [],
    categories: options.categories ?? [],
    statusSubresource: options.status === true,
    generation: options.generation === true,
    custom: false,
    celRules: [],
    columns: [],
    selectableFields: options.selectableFields ?? [],
    defaultPropagation: options.defaultPropagation ?? 'Background',
  }
}

/** Built-ins, stored opaquely: what the controller, the Job executor and a Helm install touch. */
const BUILT_INS: ResourceType[] = [
  builtIn('v1', 'Namespace', 'namespaces', { clusterScoped: true, shortNames: ['ns'], status: true, selectableFields: ['status.phase'] }),
  builtIn('v1', 'Pod', 'pods', {
    shortNames: ['po'],
    categories: ['all'],
    status: true,
    generation: true,
    selectableFields: ['spec.nodeName', 'spec.restartPolicy', 'spec.serviceAccountName', 'status.phase', 'status.podIP'],
  }),
  builtIn('v1', 'Secret', 'secrets', { selectableFields: ['type'] }),
  builtIn('v1', 'ConfigMap', 'configmaps', { shortNames: ['cm'] }),
  builtIn('v1', 'Event', 'events', {
    shortNames: ['ev'],
    selectableFields: ['involvedObject.kind', 'involvedObject.name', 'involvedObject.namespace', 'involvedObject.uid', 'reason', 'type'],
  }),
  builtIn('v1', 'Service', 'services', { shortNames: ['svc'], categories: ['all'], status: true }),
  builtIn('v1', 'ServiceAccount', 'serviceaccounts', { shortNames: ['sa'] }),
  builtIn('v1', 'PersistentVolumeClaim', 'persistentvolumeclaims', { shortNames: ['pvc'], status: true }),
  builtIn('v1', 'ResourceQuota', 'resourcequotas', { shortNames: ['quota'], status: true }),
  builtIn('v1', 'LimitRange', 'limitranges', { shortNames: ['limits'] }),
  builtIn('apps/v1', 'Deployment', 'deployments', { shortNames: ['deploy'], categories: ['all'], status: true, generation: true }),
  builtIn('apps/v1', 'StatefulSet', 'statefulsets', { shortNames: ['sts'], categories: ['all'], status: true, generation: true }),
  builtIn('batch/v1', 'Job', 'jobs', { categories: ['all'], status: true, generation: true, selectableFields: ['status.successful'], defaultPropagation: 'Orphan' }),
  builtIn('batch/v1', 'CronJob', 'cronjobs', { shortNames: ['cj'], categories: ['all'], status: true, generation: true }),
  builtIn('coordination.k8s.io/v1', 'Lease', 'leases'),
  builtIn('networking.k8s.io/v1', 'NetworkPolicy', 'networkpolicies', { shortNames: ['netpol'], generation: true }),
  builtIn('networking.k8s.io/v1', 'Ingress', 'ingresses', { shortNames: ['ing'], status: true, generation: true }),
  builtIn('policy/v1', 'PodDisruptionBudget', 'poddisruptionbudgets', { shortNames: ['pdb'], status: true, generation: true }),
  builtIn('rbac.authorization.k8s.io/v1', 'Role', 'roles'),
  builtIn('rbac.authorization.k8s.io/v1', 'RoleBinding', 'rolebindings'),
  builtIn('rbac.authorization.k8s.io/v1', 'ClusterRole', 'clusterroles', { clusterScoped: true }),
  builtIn('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding', 'clusterrolebindings', { clusterScoped: true }),
  builtIn('node.k8s.io/v1', 'RuntimeClass', 'runtimeclasses', { clusterScoped: true }),
  builtIn('autoscaling/v2', 'HorizontalPodAutoscaler', 'horizontalpodautoscalers', { shortNames: ['hpa'], categories: ['all'], status: true, generation: true }),
  builtIn('apiextensions.k8s.io/v1', 'CustomResourceDefinition', 'customresourcedefinitions', {
    clusterScoped: true,
    shortNames: ['crd', 'crds'],
    categories: ['api-extensions'],
    status: true,
    generation: true,
  }),
]

interface CrdShape {
  spec: {
    group: string
    scope: string
    names: { kind: string; listKind?: string; plural: string; singular?: string; shortNames?: string[]; categories?: string[] }
    versions: Array<{
      name: string
      served: boolean
      storage: boolean
      schema?: { openAPIV3Schema?: SchemaNode }
      subresources?: { status?: object }
      additionalPrinterColumns?: PrinterColumn[]
      selectableFields?: Array<{ jsonPath: string }>
    }>
  }
}

function customTypes(crd: CrdShape): ResourceType[] {
  const { group, names, scope } = crd.spec
  return crd.spec.versions
    .filter((version) => version.served)
    .map((version) => {
      const schema = version.schema?.openAPIV3Schema
      const columns = version.additionalPrinterColumns ?? [{ name: 'Age', type: 'date' as const, jsonPath: '.metadata.creationTimestamp' }]
      for (const column of columns) parseJsonPath(column.jsonPath) // unsupported paths fail at start-up
      return {
        group,
        version: version.name,
        apiVersion: `${group}/${version.name}`,
        kind: names.kind,
        listKind: names.listKind ?? `${names.kind}List`,
        plural: names.plural,
        singular: names.singular ?? names.kind.toLowerCase(),
        namespaced: scope === 'Namespaced',
        shortNames: names.shortNames ?? [],
        categories: names.categories ?? [],
        statusSubresource: version.subresources?.status !== undefined,
        generation: true,
        custom: true,
        ...(schema ? { schema, validate: compileSchema(schema) } : {}),
        celRules: schema ? collectCelRules(schema) : [],
        columns,
        selectableFields: (version.selectableFields ?? []).map((f) => f.jsonPath.replace(/^\./, '')),
        defaultPropagation: 'Background' as const,
      }
    })
}

// ---------------------------------------------------------------- the state machine

interface HistoryEvent {
  rv: number
  typeKey: string
  type: 'ADDED' | 'MODIFIED' | 'DELETED'
  object: KubeObject
  /** The object before a MODIFIED event, to turn selector (non-)matches into ADDED/DELETED. */
  previous?: KubeObject
}

interface Watcher {
  typeKey: string
  namespace: string | undefined
  labels: LabelRequirement[]
  fields: FieldRequirement[]
  send(type: string, object: KubeObject): void
  close(): void
}

/** A pod log chunk: written by the container at `at` (stamped per line on timestamps=true), or verbatim as a test gave it. */
interface LogEntry {
  at?: string
  text: string
}

/** Kubelet's RFC 3339 with nanoseconds (our clock has milliseconds). */
function logStamp(date: Date): string {
  return date.toISOString().replace(/Z$/, '000000Z')
}

function renderLog(entries: LogEntry[], timestamps: boolean): string {
  let out = ''
  for (const entry of entries) {
    if (!timestamps || entry.at === undefined) out += entry.text
    else
      out += entry.text
        .split(/(?<=\n)/)
        .map((line) => `${entry.at} ${line}`)
        .join('')
  }
  return out
}

interface WriteContext {
  fieldManager?: string
  operation: 'Apply' | 'Update'
  subresource?: 'status'
  dryRun: boolean
  fieldValidation: 'Strict' | 'Warn' | 'Ignore'
  warnings: string[]
  /** The request body, for managedFields. */
  applied?: Json
}

/** Byte order, as etcd keys sort (not locale order). */
function compareKeys(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

function typeKey(type: Pick<ResourceType, 'group' | 'plural'>): string {
  return `${type.group}/${type.plural}`
}

function objectKey(namespace: string | undefined, name: string): string {
  return `${namespace ?? ''}/${name}`
}

/** fieldsV1 of an object: every key as f:<key>, leaves as {}. */
function fieldSet(value: Json): JsonRecord {
  if (!isRecord(value)) return {}
  return Object.fromEntries(Object.entries(value).map(([key, child]) => [`f:${key}`, isRecord(child) ? fieldSet(child) : {}]))
}

const GENERATE_NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789'
const NAME_PATTERN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const MICRO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/

class ApiState {
  readonly types: ResourceType[] = []
  readonly objects = new Map<string, Map<string, KubeObject>>()
  /** Retained watch events, oldest first, from index #historyStart on (see #commit). */
  readonly #history: HistoryEvent[] = []
  #historyStart = 0
  readonly watchers = new Set<Watcher>()
  readonly podLogs = new Map<string, LogEntry[]>()
  rv = 0
  /** Watches from a resourceVersion below this get 410. */
  floor = 0
  readonly now: () => Date
  readonly window: number

  constructor(now: () => Date, window: number) {
    this.now = now
    this.window = window
    for (const type of BUILT_INS) this.register({ ...type })
  }

  register(type: ResourceType): void {
    const existing = this.types.findIndex((t) => t.group === type.group && t.version === type.version && t.plural === type.plural)
    if (existing >= 0) this.types[existing] = type
    else this.types.push(type)
    if (!this.objects.has(typeKey(type))) this.objects.set(typeKey(type), new Map())
  }

  registerCrd(crd: CrdShape): void {
    for (const type of customTypes(crd)) this.register(type)
  }

  /** Deleting a CRD removes its resources (and their objects) from the API. */
  unregisterCrd(crd: CrdShape): void {
    const key = typeKey({ group: crd.spec.group, plural: crd.spec.names.plural })
    for (let i = this.types.length - 1; i >= 0; i -= 1) if (typeKey(this.types[i] as ResourceType) === key) this.types.splice(i, 1)
    this.objects.delete(key)
  }

  findType(group: string, version: string, plural: string): ResourceType | undefined {
    return this.types.find((t) => t.group === group && t.version === version && t.plural === plural)
  }

  typeOf(apiVersion: string, kind: string): ResourceType {
    const type = this.types.find((t) => t.apiVersion === apiVersion && t.kind === kind)
    if (type === undefined) throw new Error(`fake apiserver: no resource type ${apiVersion} ${kind}`)
    return type
  }

  bucket(type: ResourceType): Map<string, KubeObject> {
    return this.objects.get(typeKey(type)) as Map<string, KubeObject>
  }

  read(type: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const object = this.bucket(type).get(objectKey(namespace, name))
    if (object === undefined) throw notFound(type, name)
    return object
  }

  list(type: ResourceType, namespace: string | undefined, labels: LabelRequirement[] = [], fields: FieldRequirement[] = []): KubeObject[] {
    return [...this.bucket(type).values()]
      .filter((o) => (namespace === undefined || o.metadata.namespace === namespace) && matchesLabels(o.metadata.labels, labels) && matchesFields(o, fields))
      .sort((a, b) => compareKeys(objectKey(a.metadata.namespace, a.metadata.name), objectKey(b.metadata.namespace, b.metadata.name)))
  }

  // ---- writes

  #commit(type: ResourceType, event: 'ADDED' | 'MODIFIED' | 'DELETED', object: KubeObject, previous?: KubeObject): void {
    this.rv += 1
    object.metadata.resourceVersion = String(this.rv)
    const key = objectKey(object.metadata.namespace, object.metadata.name)
    if (event === 'DELETED') this.bucket(type).delete(key)
    else this.bucket(type).set(key, object)
    const record: HistoryEvent = { rv: this.rv, typeKey: typeKey(type), type: event, object: clone(object), ...(previous ? { previous: clone(previous) } : {}) }
    // A ring, as the API server's watch cache: the oldest event leaves by moving the start, and the
    // dropped ones are cut off once they are as many as the window (Array.shift is O(n) per call).
    this.#history.push(record)
    if (this.#history.length - this.#historyStart > this.window) {
      this.floor = (this.#history[this.#historyStart] as HistoryEvent).rv
      this.#historyStart += 1
      if (this.#historyStart >= Math.max(this.window, 64)) {
        this.#history.splice(0, this.#historyStart)
        this.#historyStart = 0
      }
    }
    for (const watcher of this.watchers) deliver(watcher, record)
    if (type.kind === 'CustomResourceDefinition' && type.group === 'apiextensions.k8s.io') {
      if (event === 'DELETED') this.unregisterCrd(object as unknown as CrdShape)
      else this.registerCrd(object as unknown as CrdShape)
    }
    if (event === 'DELETED') this.#collectGarbage(object)
  }

  /** Schema work on a custom resource body: prune unknown fields, default, validate, CEL. */
  #admit(type: ResourceType, object: KubeObject, old: KubeObject | undefined, context: WriteContext): void {
    validateMetadata(type, object.metadata)
    if (type.kind === 'Lease') this.#checkLease(object)
    if (type.schema === undefined) return
    const unknown: string[] = []
    prune(object, type.schema, '', unknown)
    if (unknown.length > 0 && context.fieldValidation === 'Strict') {
      throw new ApiError(
        400,
        'BadRequest',
        `${type.kind} in version "${type.version}" cannot be handled as a ${type.kind}: strict decoding error: ${unknown.map((u) => `unknown field "${u}"`).join(', ')}`,
      )
    }
    if (context.fieldValidation === 'Warn') context.warnings.push(...unknown.map((u) => `unknown field "${u}"`))
    applyDefaults(object, type.schema)
    const causes: Array<{ reason: string; message: string; field: string }> = []
    if (type.validate !== undefined && !type.validate(object)) {
      for (const error of type.validate.errors ?? []) {
        const field = fieldPath(error.instancePath) || '<root>'
        const missing = error.keyword === 'required' ? `${field === '<root>' ? '' : `${field}.`}${String(error.params.missingProperty)}` : undefined
        causes.push({
          reason: missing ? 'FieldValueRequired' : error.keyword === 'enum' ? 'FieldValueNotSupported' : 'FieldValueInvalid',
          message: missing
            ? 'Required value'
            : error.keyword === 'enum'
              ? `Unsupported value: ${JSON.stringify(pointerGet(object, pointerTokens(error.instancePath)))}: supported values: ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`
              : `Invalid value: ${JSON.stringify(pointerGet(object, pointerTokens(error.instancePath)))}: ${error.message ?? 'invalid'}`,
          field: missing ?? field,
        })
      }
    }
    for (const rule of type.celRules) {
      const self = rule.at.reduce<Json>((node, key) => (isRecord(node) ? node[key] : undefined), object)
      if (self === undefined) continue
      const oldSelf = old === undefined ? undefined : rule.at.reduce<Json>((node, key) => (isRecord(node) ? node[key] : undefined), old)
      if (rule.usesOldSelf && oldSelf === undefined) continue // transition rules run on updates only
      let ok: boolean
      try {
        ok = evaluateCel(rule.expr, self, oldSelf) === true
      } catch {
        ok = false
      }
      if (!ok)
        causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: "${isRecord(self) ? 'object' : typeof self}": ${rule.message}`, field: rule.at.join('.') || '<root>' })
    }
    if (causes.length > 0) {
      throw new ApiError(422, 'Invalid', `${type.kind}.${type.group} "${object.metadata.name}" is invalid: ${causes.map((c) => `${c.field}: ${c.message}`).join(', ')}`, {
        name: object.metadata.name,
        group: type.group,
        kind: type.kind,
        causes,
      })
    }
  }

  /** Lease times are MicroTime: exactly 6 fractional digits, or the real server answers 400. */
  #checkLease(object: KubeObject): void {
    const spec = isRecord(object.spec) ? object.spec : {}
    for (const field of ['acquireTime', 'renewTime'] as const) {
      const value = spec[field]
      if (value !== undefined && value !== null && (typeof value !== 'string' || !MICRO_TIME.test(value))) {
        throw new ApiError(
          400,
          'BadRequest',
          `Lease in version "v1" cannot be handled as a Lease: parsing time ${JSON.stringify(value)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse (spec.${field} must be a MicroTime with 6 fractional digits)`,
        )
      }
    }
  }

  #recordManager(object: KubeObject, type: ResourceType, context: WriteContext, manager: string | undefined): void {
    if (manager === undefined) return
    const entries = (object.metadata.managedFields ?? []).filter(
      (e) => !(e.manager === manager && e.operation === context.operation && (e.subresource ?? undefined) === context.subresource),
    )
    const applied = isRecord(context.applied) ? { ...context.applied } : {}
    delete applied.apiVersion
    delete applied.kind
    if (isRecord(applied.metadata)) {
      const { name: _n, namespace: _ns, resourceVersion: _rv, uid: _u, creationTimestamp: _c, generation: _g, managedFields: _m, ...rest } = applied.metadata
      applied.metadata = rest
      if (Object.keys(rest).length === 0) delete applied.metadata
    }
    entries.push({
      manager,
      operation: context.operation,
      apiVersion: type.apiVersion,
      time: rfc3339(this.now()),
      fieldsType: 'FieldsV1',
      fieldsV1: fieldSet(applied),
      ...(context.subresource ? { subresource: context.subresource } : {}),
    })
    object.metadata.managedFields = entries
  }

  create(type: ResourceType, namespace: string | undefined, body: Json, context: WriteContext): KubeObject {
    if (!isRecord(body) || !isRecord(body.metadata)) throw new ApiError(400, 'BadRequest', 'the object has no metadata')
    const object = clone(body) as KubeObject
    const meta = object.metadata
    if (type.namespaced) {
      if (meta.namespace !== undefined && meta.namespace !== '' && meta.namespace !== namespace) {
        throw new ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request')
      }
      meta.namespace = namespace
      if (!this.bucket(this.typeOf('v1', 'Namespace')).has(objectKey(undefined, namespace as string))) {
        throw new ApiError(404, 'NotFound', `namespaces "${namespace}" not found`, { name: namespace, kind: 'namespaces' })
      }
    } else delete meta.namespace
    if ((meta.name === undefined || meta.name === '') && typeof meta.generateName === 'string') {
      do {
        meta.name = meta.generateName + Array.from(randomBytes(5), (b) => GENERATE_NAME_ALPHABET[b % GENERATE_NAME_ALPHABET.length]).join('')
      } while (this.bucket(type).has(objectKey(meta.namespace, meta.name)))
    }
    if (typeof meta.name !== 'string' || meta.name === '')
      throw new ApiError(422, 'Invalid', `${type.kind} "" is invalid: metadata.name: Required value: name or generateName is required`)
    if (meta.name.length > 253 || !NAME_PATTERN.test(meta.name)) {
      throw new ApiError(
        422,
        'Invalid',
        `${type.kind} "${meta.name}" is invalid: metadata.name: Invalid value: "${meta.name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`,
      )
    }
    if (this.bucket(type).has(objectKey(meta.namespace, meta.name))) {
      throw new ApiError(409, 'AlreadyExists', `${type.plural}${type.group ? `.${type.group}` : ''} "${meta.name}" already exists`, {
        name: meta.name,
        group: type.group,
        kind: type.plural,
      })
    }
    object.apiVersion = type.apiVersion
    object.kind = type.kind
    meta.uid = randomUUID()
    meta.creationTimestamp = rfc3339(this.now())
    delete meta.deletionTimestamp
    delete (meta as Partial<ObjectMetadata>).resourceVersion
    delete meta.managedFields
    if (type.generation) meta.generation = 1
    else delete meta.generation
    if (type.statusSubresource) delete object.status
    if (type.kind === 'Pod') object.status = { phase: 'Pending', qosClass: 'BestEffort' }
    if (type.kind === 'Job') defaultJob(object)
    if (type.kind === 'CustomResourceDefinition') object.status = establishedCrdStatus(object as unknown as CrdShape, rfc3339(this.now()))
    this.#admit(type, object, undefined, context)
    this.#recordManager(object, type, context, context.fieldManager)
    if (context.dryRun) return object
    this.#commit(type, 'ADDED', object)
    return clone(object)
  }

  /**
   * Writes `desired` over the stored object: the main resource (spec, metadata) or the status
   * subresource. `expectedRv` (from the body or a precondition) makes it optimistic.
   */
  update(type: ResourceType, current: KubeObject, desired: Json, context: WriteContext, expectedRv: string | undefined): KubeObject {
    if (!isRecord(desired) || !isRecord(desired.metadata)) throw new ApiError(400, 'BadRequest', 'the object has no metadata')
    if (desired.metadata.name !== undefined && desired.metadata.name !== current.metadata.name) {
      throw new ApiError(400, 'BadRequest', `the name of the object (${String(desired.metadata.name)}) does not match the name on the URL (${current.metadata.name})`)
    }
    if (expectedRv !== undefined && expectedRv !== '' && expectedRv !== current.metadata.resourceVersion) throw conflict(type, current.metadata.name)
    let next: KubeObject
    if (context.subresource === 'status') {
      next = clone(current)
      if (desired.status === undefined) delete next.status
      else next.status = clone(desired.status)
    } else {
      next = clone(desired) as KubeObject
      const meta = next.metadata
      for (const key of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation', 'namespace', 'name', 'managedFields'] as const) {
        if (current.metadata[key] === undefined) delete meta[key]
        else meta[key] = clone(current.metadata[key]) as never
      }
      next.apiVersion = type.apiVersion
      next.kind = type.kind
      if (type.statusSubresource) {
        if (current.status === undefined) delete next.status
        else next.status = clone(current.status)
      }
      if (current.metadata.deletionTimestamp !== undefined) {
        const added = (meta.finalizers ?? []).filter((f) => !(current.metadata.finalizers ?? []).includes(f))
        if (added.length > 0)
          throw new ApiError(
            422,
            'Invalid',
            `${type.kind} "${meta.name}" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`,
          )
      }
    }
    this.#admit(type, next, current, context)
    if (type.generation && !deepEqual(withoutMetaAndStatus(current), withoutMetaAndStatus(next))) {
      next.metadata.generation = (current.metadata.generation ?? 1) + 1
    }
    next.metadata.resourceVersion = current.metadata.resourceVersion
    const unchanged = deepEqual({ ...next, metadata: { ...next.metadata, managedFields: undefined } }, { ...current, metadata: { ...current.metadata, managedFields: undefined } })
    const knownApplier = (current.metadata.managedFields ?? []).some((e) => e.manager === context.fieldManager && e.operation === 'Apply' && e.subresource === context.subresource)
    // A no-op write gets no new resourceVersion and no event (an apply too, once its manager is recorded).
    if (unchanged && (context.operation === 'Update' || knownApplier)) return clone(current)
    this.#recordManager(next, type, context, context.fieldManager)
    if (context.dryRun) return next
    if (next.metadata.deletionTimestamp !== undefined && (next.metadata.finalizers ?? []).length === 0) {
      this.#commit(type, 'DELETED', next)
      return clone(next)
    }
    this.#commit(type, 'MODIFIED', next, current)
    return clone(next)
  }

  /** Deletes (or marks for deletion while finalizers remain); returns the object and whether it is gone. */
  delete(
    type: ResourceType,
    namespace: string | undefined,
    name: string,
    options: { propagationPolicy?: string; preconditions?: { uid?: string; resourceVersion?: string }; dryRun: boolean },
  ): { object: KubeObject; gone: boolean } {
    const current = this.read(type, namespace, name)
    const { preconditions } = options
    if (preconditions?.uid !== undefined && preconditions.uid !== current.metadata.uid) {
      throw new ApiError(409, 'Conflict', `Precondition failed: UID in precondition: ${preconditions.uid}, UID in object meta: ${current.metadata.uid}`)
    }
    if (preconditions?.resourceVersion !== undefined && preconditions.resourceVersion !== current.metadata.resourceVersion) {
      throw new ApiError(
        409,
        'Conflict',
        `Precondition failed: ResourceVersion in precondition: ${preconditions.resourceVersion}, ResourceVersion in object meta: ${current.metadata.resourceVersion}`,
      )
    }
    if (options.dryRun) return { object: clone(current), gone: (current.metadata.finalizers ?? []).length === 0 }
    const policy = options.propagationPolicy ?? type.defaultPropagation
    if (policy === 'Orphan') this.#orphanDependents(current)
    if (policy === 'Foreground') this.#deleteDependents(current)
    if (type.kind === 'Namespace') {
      for (const other of this.types) {
        if (other.namespaced) for (const object of this.list(other, name)) this.#forceDelete(other, object)
      }
    }
    if ((current.metadata.finalizers ?? []).length > 0) {
      if (current.metadata.deletionTimestamp !== undefined) return { object: clone(current), gone: false }
      const marked = clone(current)
      marked.metadata.deletionTimestamp = rfc3339(this.now())
      marked.metadata.deletionGracePeriodSeconds = 0
      this.#commit(type, 'MODIFIED', marked, current)
      return { object: clone(marked), gone: false }
    }
    const deleted = clone(current)
    this.#commit(type, 'DELETED', deleted)
    return { object: clone(deleted), gone: true }
  }

  #forceDelete(type: ResourceType, object: KubeObject): void {
    if ((object.metadata.finalizers ?? []).length > 0) {
      if (object.metadata.deletionTimestamp === undefined) {
        const marked = clone(object)
        marked.metadata.deletionTimestamp = rfc3339(this.now())
        this.#commit(type, 'MODIFIED', marked, object)
      }
      return
    }
    this.#commit(type, 'DELETED', clone(object))
  }

  #dependentsOf(owner: KubeObject): Array<{ type: ResourceType; object: KubeObject }> {
    const out: Array<{ type: ResourceType; object: KubeObject }> = []
    for (const type of this.types) {
      for (const object of this.bucket(type).values()) {
        if (owner.metadata.namespace !== undefined && object.metadata.namespace !== owner.metadata.namespace) continue
        if ((object.metadata.ownerReferences ?? []).some((ref) => ref.uid === owner.metadata.uid)) out.push({ type, object })
      }
    }
    return out
  }

  #uidExists(uid: string): boolean {
    for (const bucket of this.objects.values()) for (const object of bucket.values()) if (object.metadata.uid === uid) return true
    return false
  }

  /** Background GC: a dependent whose owners are all gone is deleted (cascading in turn). */
  #collectGarbage(owner: KubeObject): void {
    for (const { type, object } of this.#dependentsOf(owner)) {
      const current = this.bucket(type).get(objectKey(object.metadata.namespace, object.metadata.name))
      if (current === undefined || current.metadata.deletionTimestamp !== undefined) continue
      if ((current.metadata.ownerReferences ?? []).every((ref) => !this.#uidExists(ref.uid))) this.#forceDelete(type, current)
    }
  }

  #deleteDependents(owner: KubeObject): void {
    for (const { type, object } of this.#dependentsOf(owner)) {
      this.#deleteDependents(object)
      const current = this.bucket(type).get(objectKey(object.metadata.namespace, object.metadata.name))
      if (current !== undefined) this.#forceDelete(type, current)
    }
  }

  #orphanDependents(owner: KubeObject): void {
    for (const { type, object } of this.#dependentsOf(owner)) {
      const orphaned = clone(object)
      orphaned.metadata.ownerReferences = (object.metadata.ownerReferences ?? []).filter((ref) => ref.uid !== owner.metadata.uid)
      if (orphaned.metadata.ownerReferences.length === 0) delete orphaned.metadata.ownerReferences
      this.#commit(type, 'MODIFIED', orphaned, object)
    }
  }

  /** Kubelet/controller writes (test control): replace status, emit MODIFIED. */
  writeStatus(type: ResourceType, object: KubeObject, status: JsonRecord): KubeObject {
    const next = clone(object)
    next.status = status
    this.#commit(type, 'MODIFIED', next, object)
    return clone(next)
  }

  compact(): void {
    this.#history.length = 0
    this.#historyStart = 0
    this.floor = this.rv
  }

  /** The retained events after resourceVersion `rv`, oldest first. */
  *eventsAfter(rv: number): Generator<HistoryEvent> {
    for (let i = this.#historyStart; i < this.#history.length; i += 1) {
      const event = this.#history[i] as HistoryEvent
      if (event.rv > rv) yield event
    }
  }
}

const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

/** The ObjectMeta validation every write gets: label syntax, complete ownerReferences. */
function validateMetadata(type: ResourceType, meta: ObjectMetadata): void {
  const causes: string[] = []
  for (const [key, value] of Object.entries(meta.labels ?? {})) {
    const slash = key.lastIndexOf('/')
    const prefix = slash >= 0 ? key.slice(0, slash) : undefined
    const name = slash >= 0 ? key.slice(slash + 1) : key
    if ((prefix !== undefined && (prefix.length > 253 || !NAME_PATTERN.test(prefix))) || name.length > 63 || !LABEL_NAME.test(name)) {
      causes.push(
        `metadata.labels: Invalid value: ${JSON.stringify(key)}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      )
    }
    if (typeof value !== 'string' || value.length > 63 || !LABEL_VALUE.test(value)) {
      causes.push(
        `metadata.labels: Invalid value: ${JSON.stringify(value)}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)`,
      )
    }
  }
  const references = meta.ownerReferences ?? []
  for (const ref of references) {
    if (!ref.apiVersion) causes.push('metadata.ownerReferences.apiVersion: Invalid value: "": version must not be empty')
    if (!ref.kind) causes.push('metadata.ownerReferences.kind: Invalid value: "": kind must not be empty')
    if (!ref.name) causes.push('metadata.ownerReferences.name: Invalid value: "": name must not be empty')
    if (!ref.uid) causes.push('metadata.ownerReferences.uid: Invalid value: "": uid must not be empty')
  }
  if (references.filter((ref) => ref.controller === true).length > 1) causes.push('metadata.ownerReferences: Invalid value: only one reference can have Controller set to true')
  if (causes.length > 0)
    throw new ApiError(422, 'Invalid', `${type.kind} "${meta.name}" is invalid: ${causes.join(', ')}`, {
      name: meta.name,
      kind: type.plural,
      causes: causes.map((message) => ({ reason: 'FieldValueInvalid', message })),
    })
}

/** What the apiextensions controllers report once a CRD is served. */
function establishedCrdStatus(crd: CrdShape, now: string): JsonRecord {
  const condition = (type: string, reason: string, message: string) => ({ type, status: 'True', reason, message, lastTransitionTime: now })
  return {
    acceptedNames: crd.spec.names,
    conditions: [condition('NamesAccepted', 'NoConflicts', 'no conflicts found'), condition('Established', 'InitialNamesAccepted', 'the initial names have been accepted')],
    storedVersions: crd.spec.versions.filter((v) => v.storage).map((v) => v.name),
  }
}

function withoutMetaAndStatus(object: KubeObject): JsonRecord {
  const { metadata: _m, status: _s, ...rest } = object
  return rest
}

function notFound(type: ResourceType, name: string): ApiError {
  return new ApiError(404, 'NotFound', `${type.plural}${type.group ? `.${type.group}` : ''} "${name}" not found`, { name, group: type.group, kind: type.plural })
}

function conflict(type: ResourceType, name: string): ApiError {
  return new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${type.plural}${type.group ? `.${type.group}` : ''} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    { name, group: type.group, kind: type.plural },
  )
}

/** What the batch/v1 defaulting and the Job controller add on create (selector, pod labels). */
function defaultJob(job: KubeObject): void {
  const spec = (isRecord(job.spec) ? job.spec : (job.spec = {})) as JsonRecord
  spec.backoffLimit ??= 6
  spec.completions ??= 1
  spec.parallelism ??= 1
  spec.completionMode ??= 'NonIndexed'
  spec.suspend ??= false
  spec.manualSelector ??= false
  spec.podReplacementPolicy ??= 'TerminatingOrFailed'
  const template = (isRecord(spec.template) ? spec.template : (spec.template = {})) as JsonRecord
  const metadata = (isRecord(template.metadata) ? template.metadata : (template.metadata = {})) as JsonRecord
  const uid = job.metadata.uid
  const labels = { 'batch.kubernetes.io/controller-uid': uid, 'batch.kubernetes.io/job-name': job.metadata.name, 'controller-uid': uid, 'job-name': job.metadata.name }
  metadata.labels = { ...(isRecord(metadata.labels) ? (metadata.labels as Record<string, string>) : {}), ...labels }
  spec.selector ??= { matchLabels: { 'batch.kubernetes.io/controller-uid': uid } }
}

function matchesWatcher(watcher: Watcher, object: KubeObject): boolean {
  return (
    (watcher.namespace === undefined || object.metadata.namespace === watcher.namespace) &&
    matchesLabels(object.metadata.labels, watcher.labels) &&
    matchesFields(object, watcher.fields)
  )
}

/** Sends one history event to a watcher, as the selectors see it (a MODIFIED that leaves the selection is a DELETED). */
function deliver(watcher: Watcher, event: HistoryEvent): void {
  if (event.typeKey !== watcher.typeKey) return
  const now = matchesWatcher(watcher, event.object)
  if (event.type !== 'MODIFIED' || event.previous === undefined) {
    if (now) watcher.send(event.type, event.object)
    return
  }
  const before = matchesWatcher(watcher, event.previous)
  if (now) watcher.send(before ? 'MODIFIED' : 'ADDED', event.object)
  else if (before) watcher.send('DELETED', event.object)
}

// ---------------------------------------------------------------- HTTP adapter

interface Route {
  type: ResourceType
  namespace: string | undefined
  name: string | undefined
  subresource: string | undefined
  watch: boolean
}

const CORE_PREFIX = ['api', 'v1']

function parseRoute(state: ApiState, segments: string[]): Route | undefined {
  let group: string
  let version: string
  let rest: string[]
  if (segments[0] === 'api' && segments[1] === 'v1') {
    group = ''
    version = 'v1'
    rest = segments.slice(CORE_PREFIX.length)
  } else if (segments[0] === 'apis' && segments.length >= 3) {
    group = segments[1] as string
    version = segments[2] as string
    rest = segments.slice(3)
  } else return undefined
  let watch = false
  if (rest[0] === 'watch') {
    watch = true
    rest = rest.slice(1)
  }
  let namespace: string | undefined
  if (rest[0] === 'namespaces' && rest.length >= 3 && state.findType(group, version, rest[2] as string)?.namespaced === true) {
    namespace = rest[1]
    rest = rest.slice(2)
  }
  const type = state.findType(group, version, rest[0] ?? '')
  if (type === undefined || rest.length > 3) return undefined
  return { type, namespace, name: rest[1], subresource: rest[2], watch }
}

function discoveryResources(state: ApiState, group: string, version: string): JsonRecord[] {
  const verbs = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch']
  const out: JsonRecord[] = []
  for (const type of state.types.filter((t) => t.group === group && t.version === version)) {
    out.push({
      name: type.plural,
      singularName: type.singular,
      namespaced: type.namespaced,
      kind: type.kind,
      verbs,
      ...(type.shortNames.length ? { shortNames: type.shortNames } : {}),
      ...(type.categories.length ? { categories: type.categories } : {}),
    })
    if (type.statusSubresource) out.push({ name: `${type.plural}/status`, singularName: '', namespaced: type.namespaced, kind: type.kind, verbs: ['get', 'patch', 'update'] })
    if (type.kind === 'Pod') out.push({ name: 'pods/log', singularName: '', namespaced: true, kind: 'Pod', verbs: ['get'] })
  }
  return out
}

function groupVersions(state: ApiState): Map<string, string[]> {
  const groups = new Map<string, string[]>()
  for (const type of state.types) {
    if (type.group === '') continue
    const versions = groups.get(type.group) ?? []
    if (!versions.includes(type.version)) versions.push(type.version)
    groups.set(type.group, versions)
  }
  return groups
}

function apiGroup(name: string, versions: string[]): JsonRecord {
  const list = versions.map((version) => ({ groupVersion: `${name}/${version}`, version }))
  return { name, versions: list, preferredVersion: list[0] }
}

/** A minimal OpenAPI v3 per group-version: the paths with their fieldValidation parameter, so kubectl validates on the server. */
function openApiV3(state: ApiState, group: string, version: string): JsonRecord {
  const paths: JsonRecord = {}
  const schemas: JsonRecord = {}
  const fieldValidation = { name: 'fieldValidation', in: 'query', schema: { type: 'string' } }
  const prefix = group === '' ? '/api/v1' : `/apis/${group}/${version}`
  for (const type of state.types.filter((t) => t.group === group && t.version === version)) {
    const schemaName = `${group.split('.').reverse().join('.') || 'io.k8s.api.core'}.${version}.${type.kind}`
    schemas[schemaName] = { type: 'object', 'x-kubernetes-group-version-kind': [{ group, version, kind: type.kind }] }
    const ref = { $ref: `#/components/schemas/${schemaName}` }
    const body = { content: { 'application/json': { schema: ref } } }
    const item = `${prefix}${type.namespaced ? '/namespaces/{namespace}' : ''}/${type.plural}/{name}`
    const collection = `${prefix}${type.namespaced ? '/namespaces/{namespace}' : ''}/${type.plural}`
    // kubectl looks for the PATCH operation tagged with the GVK and its fieldValidation parameter.
    const gvk = { 'x-kubernetes-group-version-kind': { group, version, kind: type.kind } }
    paths[collection] = { post: { ...gvk, parameters: [fieldValidation], requestBody: body }, get: gvk }
    paths[item] = { get: gvk, put: { ...gvk, parameters: [fieldValidation], requestBody: body }, patch: { ...gvk, parameters: [fieldValidation] }, delete: gvk }
  }
  return { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.35.0' }, paths, components: { schemas } }
}

function tableFor(state: ApiState, type: ResourceType, objects: KubeObject[], includeObject: string, resourceVersion: string): JsonRecord {
  const now = state.now().getTime()
  const columns: PrinterColumn[] = type.columns.length > 0 ? type.columns : [{ name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' }]
  const columnDefinitions = [
    { name: 'Name', type: 'string', format: 'name', description: 'Name must be unique within a namespace.', priority: 0 },
    ...columns.map((c) => ({ name: c.name, type: c.type, format: c.format ?? '', description: c.description ?? '', priority: c.priority ?? 0 })),
  ]
  const cell = (object: KubeObject, column: PrinterColumn): Json => {
    const value = evaluateJsonPath(object, column.jsonPath)[0]
    if (value === undefined || value === null) return null
    if (column.type === 'date') {
      const time = typeof value === 'string' ? Date.parse(value) : Number.NaN
      return Number.isNaN(time) ? '<invalid>' : humanDuration(now - time)
    }
    if (column.type === 'string') return typeof value === 'string' ? value : JSON.stringify(value)
    return value
  }
  const rows = objects.map((object) => ({
    cells: [object.metadata.name, ...columns.map((column) => cell(object, column))],
    ...(includeObject === 'None'
      ? {}
      : { object: includeObject === 'Object' ? object : { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: object.metadata } }),
  }))
  return { kind: 'Table', apiVersion: 'meta.k8s.io/v1', metadata: { resourceVersion }, columnDefinitions, rows }
}

function wantsTable(accept: string | undefined): boolean {
  return accept !== undefined && /as=Table/.test(accept) && /g=meta\.k8s\.io/.test(accept)
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

function parseBody(bytes: Buffer, contentType: string | undefined): Json {
  if (contentType === 'application/vnd.kubernetes.protobuf') return decodeProtobufBody(bytes)
  const text = bytes.toString('utf8')
  if (text.trim() === '') return undefined
  try {
    return contentType?.startsWith('application/apply-patch+yaml') || contentType?.startsWith('application/yaml') ? parseYaml(text) : JSON.parse(text)
  } catch (err) {
    throw new ApiError(400, 'BadRequest', `the body of the request could not be decoded: ${(err as Error).message}`)
  }
}

// ---------------------------------------------------------------- protobuf request bodies

// client-go typed clients (helm's release storage) send Secrets and ConfigMaps as protobuf: the
// "k8s\0" envelope around runtime.Unknown{typeMeta, raw}. Only these kinds are decoded (field numbers
// from k8s.io/api/core/v1/generated.proto); other protobuf bodies get 415 as from a server without them.
type ProtoField = { name: string; kind: 'string' | 'bytes' | 'varint' | 'bool' | 'message' | 'stringMap' | 'bytesMap'; repeated?: boolean; message?: ProtoSchema }
type ProtoSchema = Record<number, ProtoField>

const OWNER_REFERENCE_PROTO: ProtoSchema = {
  1: { name: 'kind', kind: 'string' },
  3: { name: 'name', kind: 'string' },
  4: { name: 'uid', kind: 'string' },
  5: { name: 'apiVersion', kind: 'string' },
  6: { name: 'controller', kind: 'bool' },
  7: { name: 'blockOwnerDeletion', kind: 'bool' },
}
const OBJECT_META_PROTO: ProtoSchema = {
  1: { name: 'name', kind: 'string' },
  2: { name: 'generateName', kind: 'string' },
  3: { name: 'namespace', kind: 'string' },
  5: { name: 'uid', kind: 'string' },
  6: { name: 'resourceVersion', kind: 'string' },
  11: { name: 'labels', kind: 'stringMap' },
  12: { name: 'annotations', kind: 'stringMap' },
  13: { name: 'ownerReferences', kind: 'message', repeated: true, message: OWNER_REFERENCE_PROTO },
  14: { name: 'finalizers', kind: 'string', repeated: true },
}
const BODY_PROTO: Record<string, ProtoSchema> = {
  Secret: {
    1: { name: 'metadata', kind: 'message', message: OBJECT_META_PROTO },
    2: { name: 'data', kind: 'bytesMap' },
    3: { name: 'type', kind: 'string' },
    4: { name: 'stringData', kind: 'stringMap' },
    5: { name: 'immutable', kind: 'bool' },
  },
  ConfigMap: {
    1: { name: 'metadata', kind: 'message', message: OBJECT_META_PROTO },
    2: { name: 'data', kind: 'stringMap' },
    3: { name: 'binaryData', kind: 'bytesMap' },
    4: { name: 'immutable', kind: 'bool' },
  },
  DeleteOptions: { 3: { name: 'orphanDependents', kind: 'bool' }, 4: { name: 'propagationPolicy', kind: 'string' } },
}

function protoFields(bytes: Buffer): Array<{ field: number; value: bigint | Buffer }> {
  const out: Array<{ field: number; value: bigint | Buffer }> = []
  let offset = 0
  const varint = (): bigint => {
    let result = 0n
    let shift = 0n
    for (;;) {
      const byte = bytes[offset++]
      if (byte === undefined) throw new ApiError(400, 'BadRequest', 'truncated protobuf body')
      result |= BigInt(byte & 0x7f) << shift
      if ((byte & 0x80) === 0) return result
      shift += 7n
    }
  }
  while (offset < bytes.length) {
    const tag = Number(varint())
    const wire = tag & 7
    if (wire === 0) out.push({ field: tag >> 3, value: varint() })
    else if (wire === 2) {
      const length = Number(varint())
      out.push({ field: tag >> 3, value: bytes.subarray(offset, offset + length) })
      offset += length
    } else if (wire === 1) offset += 8
    else if (wire === 5) offset += 4
    else throw new ApiError(400, 'BadRequest', `unsupported protobuf wire type ${wire}`)
  }
  return out
}

function decodeProto(bytes: Buffer, schema: ProtoSchema): JsonRecord {
  const out: JsonRecord = {}
  for (const { field, value } of protoFields(bytes)) {
    const spec = schema[field]
    if (spec === undefined) continue
    let decoded: Json
    if (spec.kind === 'varint') decoded = Number(value)
    else if (spec.kind === 'bool') decoded = value === 1n
    else if (spec.kind === 'string') decoded = (value as Buffer).toString('utf8')
    else if (spec.kind === 'bytes') decoded = (value as Buffer).toString('base64')
    else if (spec.kind === 'message') decoded = decodeProto(value as Buffer, spec.message as ProtoSchema)
    else {
      const entry = decodeProto(value as Buffer, { 1: { name: 'key', kind: 'string' }, 2: { name: 'value', kind: spec.kind === 'bytesMap' ? 'bytes' : 'string' } })
      out[spec.name] = { ...(out[spec.name] as JsonRecord | undefined), [String(entry.key)]: entry.value ?? '' }
      continue
    }
    if (spec.repeated) out[spec.name] = [...((out[spec.name] as Json[] | undefined) ?? []), decoded]
    else out[spec.name] = decoded
  }
  return out
}

function decodeProtobufBody(bytes: Buffer): Json {
  if (bytes.length === 0) return undefined
  if (bytes.subarray(0, 4).toString('latin1') !== 'k8s\0') throw new ApiError(400, 'BadRequest', 'protobuf body without the k8s envelope')
  const unknown = decodeProto(bytes.subarray(4), {
    1: { name: 'typeMeta', kind: 'message', message: { 1: { name: 'apiVersion', kind: 'string' }, 2: { name: 'kind', kind: 'string' } } },
    2: { name: 'raw', kind: 'bytes' },
  })
  const typeMeta = (unknown.typeMeta ?? {}) as { apiVersion?: string; kind?: string }
  const schema = BODY_PROTO[typeMeta.kind ?? '']
  if (schema === undefined)
    throw new ApiError(415, 'UnsupportedMediaType', `the fake API server decodes protobuf only for ${Object.keys(BODY_PROTO).join(', ')}, not ${typeMeta.kind}`)
  const object = decodeProto(Buffer.from(String(unknown.raw ?? ''), 'base64'), schema)
  return typeMeta.kind === 'DeleteOptions' ? object : { apiVersion: typeMeta.apiVersion, kind: typeMeta.kind, ...object }
}

const PATCH_TYPES = ['application/json-patch+json', 'application/merge-patch+json', 'application/strategic-merge-patch+json', 'application/apply-patch+yaml']

/** Starts the fake on 127.0.0.1 (random port) and writes a kubeconfig for it. */
export async function startFakeKubeApiServer(options: FakeKubeApiServerOptions = {}): Promise<FakeKubeApiServer> {
  const now = options.now ?? (() => new Date())
  const token = options.token ?? 'fake-token'
  const state = new ApiState(now, options.watchWindow ?? 1000)
  const requests: RequestRecord[] = []
  const crdType = state.typeOf('apiextensions.k8s.io/v1', 'CustomResourceDefinition')
  const namespaceType = state.typeOf('v1', 'Namespace')
  const systemWrite: WriteContext = { operation: 'Update', dryRun: false, fieldValidation: 'Ignore', warnings: [] }
  for (const crd of options.crds ?? [TASK_CRD, RUN_CRD]) state.create(crdType, undefined, crd, systemWrite)
  for (const name of options.namespaces ?? ['default'])
    state.create(namespaceType, undefined, { apiVersion: 'v1', kind: 'Namespace', metadata: { name }, spec: { finalizers: ['kubernetes'] } }, systemWrite)
  for (const ns of state.list(namespaceType, undefined)) state.writeStatus(namespaceType, ns, { phase: 'Active' })

  const openStreams = new Set<ServerResponse>()
  const logFollowers = new Map<string, Set<{ res: ServerResponse; timestamps: boolean }>>()
  const stats = { expiredWatches: 0, restarts: 0 }

  const send = (res: ServerResponse, code: number, body: Json, headers: Record<string, string | string[]> = {}): void => {
    const text = JSON.stringify(body)
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), ...headers })
    res.end(text)
  }

  const writeContext = (url: URL, req: IncomingMessage, operation: 'Apply' | 'Update', subresource: string | undefined, applied: Json): WriteContext => {
    const validation = url.searchParams.get('fieldValidation')
    const userAgent = req.headers['user-agent']?.split('/')[0]
    const manager = url.searchParams.get('fieldManager') ?? userAgent
    return {
      operation,
      ...(manager ? { fieldManager: manager } : {}),
      ...(subresource === 'status' ? { subresource: 'status' as const } : {}),
      dryRun: url.searchParams.get('dryRun') === 'All',
      fieldValidation: validation === 'Strict' || validation === 'Ignore' ? validation : 'Warn',
      warnings: [],
      applied,
    }
  }

  const warningHeaders = (context: WriteContext): Record<string, string[]> =>
    context.warnings.length > 0 ? { Warning: context.warnings.map((w) => `299 - ${JSON.stringify(w)}`) } : {}

  const serveWatch = (req: IncomingMessage, res: ServerResponse, route: Route, url: URL): void => {
    const labels = parseLabelSelector(url.searchParams.get('labelSelector') ?? '')
    const fields = parseFieldSelector(url.searchParams.get('fieldSelector') ?? '', route.type)
    if (route.name !== undefined) fields.push({ path: 'metadata.name', equals: true, value: route.name })
    const table = wantsTable(req.headers.accept)
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' })
    res.flushHeaders()
    openStreams.add(res)
    let first = true
    const write = (type: string, object: Json): void => {
      if (res.writableEnded) return
      let payload = object
      if (table && type !== 'ERROR' && type !== 'BOOKMARK') {
        payload = tableFor(state, route.type, [object as KubeObject], url.searchParams.get('includeObject') ?? 'Metadata', (object as KubeObject).metadata.resourceVersion)
        if (!first) delete (payload as JsonRecord).columnDefinitions
        first = false
      }
      res.write(`${JSON.stringify({ type, object: payload })}\n`)
    }
    const end = (): void => {
      state.watchers.delete(watcher)
      openStreams.delete(res)
      if (!res.writableEnded) res.end()
    }
    const watcher: Watcher = { typeKey: typeKey(route.type), namespace: route.namespace, labels, fields, send: write, close: end }
    const requested = url.searchParams.get('resourceVersion') ?? ''
    const bookmarks = url.searchParams.get('allowWatchBookmarks') === 'true'
    if (url.searchParams.get('sendInitialEvents') === 'true' || requested === '' || requested === '0') {
      for (const object of state.list(route.type, route.namespace, labels, fields)) write('ADDED', object)
      if (url.searchParams.get('sendInitialEvents') === 'true' && bookmarks) {
        write('BOOKMARK', {
          kind: route.type.kind,
          apiVersion: route.type.apiVersion,
          metadata: { resourceVersion: String(state.rv), annotations: { 'k8s.io/initial-events-end': 'true' } },
        })
      }
    } else {
      const from = Number(requested)
      if (!Number.isInteger(from) || from < state.floor) {
        stats.expiredWatches += 1
        write('ERROR', statusBody(410, 'Expired', `too old resource version: ${requested} (${state.floor})`))
        end()
        return
      }
      for (const event of state.eventsAfter(from)) deliver(watcher, event)
    }
    state.watchers.add(watcher)
    const timeout = Number(url.searchParams.get('timeoutSeconds') ?? '0')
    const timer = timeout > 0 ? setTimeout(end, timeout * 1000) : undefined
    res.on('close', () => {
      if (timer) clearTimeout(timer)
      end()
    })
  }

  const serveLog = (res: ServerResponse, route: Route, url: URL): void => {
    const pod = state.read(route.type, route.namespace, route.name as string)
    const status = isRecord(pod.status) ? pod.status : {}
    const containers = Array.isArray(status.containerStatuses) ? (status.containerStatuses as JsonRecord[]) : []
    const container = containers[0]
    const waiting = isRecord(container?.state) && isRecord((container.state as JsonRecord).waiting) ? ((container.state as JsonRecord).waiting as JsonRecord) : undefined
    if (container === undefined || waiting !== undefined) {
      const name =
        (Array.isArray((pod.spec as JsonRecord | undefined)?.containers) ? (((pod.spec as JsonRecord).containers as JsonRecord[])[0]?.name as string) : undefined) ?? 'script'
      throw new ApiError(400, 'BadRequest', `container "${name}" in pod "${pod.metadata.name}" is waiting to start: ${String(waiting?.reason ?? 'ContainerCreating')}`)
    }
    const key = objectKey(pod.metadata.namespace, pod.metadata.name)
    const timestamps = url.searchParams.get('timestamps') === 'true'
    let text = renderLog(state.podLogs.get(key) ?? [], timestamps)
    const tail = url.searchParams.get('tailLines')
    if (tail !== null)
      text = text
        .split(/(?<=\n)/)
        .slice(-Number(tail))
        .join('')
    const limit = url.searchParams.get('limitBytes')
    if (limit !== null) text = Buffer.from(text).subarray(0, Number(limit)).toString('utf8')
    const terminated = isRecord(container.state) && isRecord((container.state as JsonRecord).terminated)
    if (url.searchParams.get('follow') !== 'true' || terminated) {
      res.writeHead(200, { 'Content-Type': 'text/plain' })
      res.end(text)
      return
    }
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Transfer-Encoding': 'chunked' })
    res.write(text)
    openStreams.add(res)
    const followers = logFollowers.get(key) ?? new Set()
    const follower = { res, timestamps }
    followers.add(follower)
    logFollowers.set(key, followers)
    res.on('close', () => {
      followers.delete(follower)
      openStreams.delete(res)
    })
  }

  const handleResource = async (req: IncomingMessage, res: ServerResponse, route: Route, url: URL): Promise<void> => {
    const { type, namespace, name, subresource } = route
    const method = req.method ?? 'GET'
    // A namespaced resource without a namespace in the path can only be listed or watched.
    if (type.namespaced && namespace === undefined && (name !== undefined || method !== 'GET'))
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource')
    if (subresource !== undefined && !(subresource === 'status' && type.statusSubresource) && !(subresource === 'log' && type.kind === 'Pod')) {
      throw new ApiError(404, 'NotFound', 'the server could not find the requested resource')
    }
    if (method === 'GET' && (route.watch || url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1')) return serveWatch(req, res, route, url)
    if (method === 'GET' && subresource === 'log') return serveLog(res, route, url)
    const table = wantsTable(req.headers.accept)
    const includeObject = url.searchParams.get('includeObject') ?? 'Metadata'
    const rv = String(state.rv)
    if (method === 'GET' && name === undefined) {
      const labels = parseLabelSelector(url.searchParams.get('labelSelector') ?? '')
      const fields = parseFieldSelector(url.searchParams.get('fieldSelector') ?? '', type)
      const items = state.list(type, namespace, labels, fields)
      if (table) return send(res, 200, tableFor(state, type, items, includeObject, rv))
      return send(res, 200, { apiVersion: type.apiVersion, kind: type.listKind, metadata: { resourceVersion: rv }, items })
    }
    if (method === 'GET') {
      const object = state.read(type, namespace, name as string)
      return send(res, 200, table ? tableFor(state, type, [object], includeObject, object.metadata.resourceVersion) : object)
    }
    const contentType = req.headers['content-type']?.split(';')[0]?.trim()
    const body = parseBody(await readBody(req), contentType)
    if (method === 'POST' && name === undefined) {
      const context = writeContext(url, req, 'Update', undefined, body)
      return send(res, 201, state.create(type, namespace, body, context), warningHeaders(context))
    }
    if (method === 'DELETE' && name === undefined) {
      const labels = parseLabelSelector(url.searchParams.get('labelSelector') ?? '')
      const fields = parseFieldSelector(url.searchParams.get('fieldSelector') ?? '', type)
      const options = isRecord(body) ? body : {}
      const deleted = state.list(type, namespace, labels, fields).map(
        (object) =>
          state.delete(type, namespace, object.metadata.name, {
            propagationPolicy: (options.propagationPolicy as string | undefined) ?? url.searchParams.get('propagationPolicy') ?? undefined,
            dryRun: url.searchParams.get('dryRun') === 'All',
          }).object,
      )
      return send(res, 200, { apiVersion: type.apiVersion, kind: type.listKind, metadata: { resourceVersion: String(state.rv) }, items: deleted })
    }
    if (name === undefined) throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`)
    if (method === 'PUT') {
      const current = state.read(type, namespace, name)
      const context = writeContext(url, req, 'Update', subresource, body)
      const expected = isRecord(body) && isRecord(body.metadata) ? (body.metadata.resourceVersion as string | undefined) : undefined
      if ((expected === undefined || expected === '') && type.custom) {
        throw new ApiError(422, 'Invalid', `${type.kind}.${type.group} "${name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`)
      }
      return send(res, 200, state.update(type, current, body, context, expected), warningHeaders(context))
    }
    if (method === 'PATCH') {
      if (contentType === undefined || !PATCH_TYPES.includes(contentType) || (type.custom && contentType === 'application/strategic-merge-patch+json')) {
        throw new ApiError(
          415,
          'UnsupportedMediaType',
          `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml${type.custom ? '' : ', application/strategic-merge-patch+json'}`,
        )
      }
      const apply = contentType === 'application/apply-patch+yaml'
      const context = writeContext(url, req, apply ? 'Apply' : 'Update', subresource, body)
      if (apply && url.searchParams.get('fieldManager') === null)
        throw new ApiError(422, 'Invalid', 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
      const existing = state.bucket(type).get(objectKey(type.namespaced ? namespace : undefined, name))
      if (existing === undefined) {
        if (!apply || subresource !== undefined) throw notFound(type, name)
        const created = state.create(
          type,
          namespace,
          { ...(isRecord(body) ? body : {}), metadata: { ...(isRecord(body) && isRecord(body.metadata) ? body.metadata : {}), name } },
          context,
        )
        return send(res, 201, created, warningHeaders(context))
      }
      if (apply && isRecord(body) && ((body.apiVersion !== undefined && body.apiVersion !== type.apiVersion) || (body.kind !== undefined && body.kind !== type.kind))) {
        throw new ApiError(
          400,
          'BadRequest',
          `the apiVersion/kind of the applied object (${String(body.apiVersion)}, ${String(body.kind)}) does not match ${type.apiVersion}, ${type.kind}`,
        )
      }
      const patched =
        contentType === 'application/json-patch+json'
          ? jsonPatch(existing, body)
          : contentType === 'application/strategic-merge-patch+json'
            ? strategicMergePatch(existing, body)
            : mergePatch(existing, body)
      const expected = isRecord(patched) && isRecord(patched.metadata) ? (patched.metadata.resourceVersion as string | undefined) : undefined
      return send(res, 200, state.update(type, existing, patched, context, expected), warningHeaders(context))
    }
    if (method === 'DELETE') {
      const options = isRecord(body) ? body : {}
      const result = state.delete(type, namespace, name, {
        propagationPolicy:
          (options.propagationPolicy as string | undefined) ?? url.searchParams.get('propagationPolicy') ?? (options.orphanDependents === true ? 'Orphan' : undefined),
        ...(isRecord(options.preconditions) ? { preconditions: options.preconditions as { uid?: string; resourceVersion?: string } } : {}),
        dryRun: url.searchParams.get('dryRun') === 'All' || (Array.isArray(options.dryRun) && options.dryRun.includes('All')),
      })
      if (!result.gone || !type.custom) return send(res, 200, result.object)
      return send(res, 200, {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Success',
        details: { name, group: type.group, kind: type.plural, uid: result.object.metadata.uid },
      })
    }
    throw new ApiError(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`)
  }

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://fake')
    const record: RequestRecord = { method: req.method ?? 'GET', path: `${url.pathname}${url.search}`, contentType: req.headers['content-type'] }
    requests.push(record)
    res.once('close', () => {
      if (res.headersSent) record.status = res.statusCode
    })
    // kubectl (client-go) sends no bearer token over plain http, so only a wrong token is refused.
    if (req.headers.authorization !== undefined && req.headers.authorization !== `Bearer ${token}`) return send(res, 401, statusBody(401, 'Unauthorized', 'Unauthorized'))
    const segments = url.pathname
      .split('/')
      .filter((s) => s.length > 0)
      .map(decodeURIComponent)
    const path = `/${segments.join('/')}`
    if (path === '/version')
      return send(res, 200, {
        major: '1',
        minor: '35',
        gitVersion: 'v1.35.0-fake',
        gitCommit: 'fake',
        gitTreeState: 'clean',
        buildDate: '2026-01-01T00:00:00Z',
        goVersion: 'go1.25',
        compiler: 'gc',
        platform: 'linux/amd64',
      })
    if (path === '/healthz' || path === '/readyz' || path === '/livez') {
      res.writeHead(200, { 'Content-Type': 'text/plain' })
      return void res.end('ok')
    }
    if (path === '/api') return send(res, 200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: url.host }] })
    if (path === '/api/v1') return send(res, 200, { kind: 'APIResourceList', groupVersion: 'v1', resources: discoveryResources(state, '', 'v1') })
    if (path === '/apis') return send(res, 200, { kind: 'APIGroupList', apiVersion: 'v1', groups: [...groupVersions(state)].map(([name, versions]) => apiGroup(name, versions)) })
    const groups = groupVersions(state)
    if (segments[0] === 'apis' && segments.length === 2 && groups.has(segments[1] as string))
      return send(res, 200, { kind: 'APIGroup', apiVersion: 'v1', ...apiGroup(segments[1] as string, groups.get(segments[1] as string) as string[]) })
    if (segments[0] === 'apis' && segments.length === 3 && groups.get(segments[1] as string)?.includes(segments[2] as string)) {
      return send(res, 200, {
        kind: 'APIResourceList',
        apiVersion: 'v1',
        groupVersion: `${segments[1]}/${segments[2]}`,
        resources: discoveryResources(state, segments[1] as string, segments[2] as string),
      })
    }
    if (path === '/openapi/v3') {
      const paths: JsonRecord = { 'api/v1': { serverRelativeURL: '/openapi/v3/api/v1?hash=fake' } }
      for (const [group, versions] of groups)
        for (const version of versions) paths[`apis/${group}/${version}`] = { serverRelativeURL: `/openapi/v3/apis/${group}/${version}?hash=fake-${state.rv}` }
      return send(res, 200, { paths })
    }
    if (segments[0] === 'openapi' && segments[1] === 'v3') {
      const [, , root, group, version] = segments
      if (root === 'api' && group === 'v1') return send(res, 200, openApiV3(state, '', 'v1'))
      if (root === 'apis' && group !== undefined && version !== undefined && groups.get(group)?.includes(version)) return send(res, 200, openApiV3(state, group, version))
    }
    const route = parseRoute(state, segments)
    if (route === undefined) return send(res, 404, statusBody(404, 'NotFound', 'the server could not find the requested resource'))
    await handleResource(req, res, route, url)
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) return void res.end()
      if (err instanceof ApiError) return send(res, err.code, statusBody(err.code, err.reason, err.message, err.details))
      send(res, 500, statusBody(500, 'InternalError', `fake apiserver: ${(err as Error).stack ?? String(err)}`))
    })
  })
  let up = false
  const bind = async (at: number): Promise<void> => {
    // The port of a server that just closed can stay busy for a moment.
    for (let attempt = 0; ; attempt += 1) {
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject)
          server.listen(at, '127.0.0.1', () => {
            server.off('error', reject)
            resolve()
          })
        })
        up = true
        return
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= 20) throw err
        await new Promise((resolve) => setTimeout(resolve, 100))
      }
    }
  }
  await bind(options.port ?? 0)
  const { port } = server.address() as AddressInfo
  const url = `http://127.0.0.1:${port}`
  const kubeconfigDir = await mkdtemp(join(tmpdir(), 'fake-kube-'))
  const kubeconfigPath = join(kubeconfigDir, 'kubeconfig')
  await writeFile(
    kubeconfigPath,
    stringifyYaml({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'fake', user: { token } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake', namespace: 'default' } }],
      'current-context': 'fake',
    }),
  )

  // ---- test control: what kubelet and the Job controller would do

  const podType = state.typeOf('v1', 'Pod')
  const jobType = state.typeOf('batch/v1', 'Job')
  const controlWrite: WriteContext = { operation: 'Update', dryRun: false, fieldValidation: 'Ignore', warnings: [] }

  const jobPod = (namespace: string, jobName: string): { job: KubeObject; pod: KubeObject } => {
    const job = state.bucket(jobType).get(objectKey(namespace, jobName))
    if (job === undefined) throw new Error(`fake apiserver: no Job ${namespace}/${jobName}`)
    const existing = state.list(podType, namespace).find((pod) => (pod.metadata.ownerReferences ?? []).some((ref) => ref.uid === job.metadata.uid))
    if (existing !== undefined) return { job, pod: existing }
    const template = isRecord((job.spec as JsonRecord).template) ? ((job.spec as JsonRecord).template as JsonRecord) : {}
    const templateMeta = isRecord(template.metadata) ? template.metadata : {}
    const pod = state.create(
      podType,
      namespace,
      {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          generateName: `${jobName}-`,
          labels: { ...(templateMeta.labels as Record<string, string>) },
          ...(isRecord(templateMeta.annotations) ? { annotations: templateMeta.annotations } : {}),
          ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: jobName, uid: job.metadata.uid, controller: true, blockOwnerDeletion: true }],
        },
        spec: { ...(isRecord(template.spec) ? template.spec : {}), nodeName: 'fake-node' },
      },
      controlWrite,
    )
    return { job: state.read(jobType, namespace, jobName), pod }
  }

  const containerName = (pod: KubeObject): string => {
    const containers = isRecord(pod.spec) && Array.isArray(pod.spec.containers) ? (pod.spec.containers as JsonRecord[]) : []
    return (containers[0]?.name as string | undefined) ?? 'script'
  }
  const containerImage = (pod: KubeObject): string => {
    const containers = isRecord(pod.spec) && Array.isArray(pod.spec.containers) ? (pod.spec.containers as JsonRecord[]) : []
    return (containers[0]?.image as string | undefined) ?? 'unknown'
  }
  /** The pod's one container status in `state` (running: ready and started). */
  const containerStatus = (pod: KubeObject, running: boolean, state: JsonRecord): JsonRecord => ({
    name: containerName(pod),
    image: containerImage(pod),
    imageID: '',
    ready: running,
    restartCount: 0,
    started: running,
    state,
  })

  /** Appends to a pod's log and sends it to the pod's followers. */
  const appendLog = (podKey: string, entry: LogEntry): void => {
    if (entry.text === '') return
    const entries = state.podLogs.get(podKey) ?? []
    entries.push(entry)
    state.podLogs.set(podKey, entries)
    for (const follower of logFollowers.get(podKey) ?? []) if (!follower.res.writableEnded) follower.res.write(renderLog([entry], follower.timestamps))
  }

  const control = {
    startJob(namespace: string, jobName: string): void {
      const { job, pod } = jobPod(namespace, jobName)
      const startedAt = rfc3339(now())
      state.writeStatus(podType, pod, {
        phase: 'Running',
        startTime: startedAt,
        podIP: '10.0.0.10',
        conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: startedAt }],
        containerStatuses: [containerStatus(pod, true, { running: { startedAt } })],
      })
      const previous = isRecord(job.status) ? job.status : {}
      state.writeStatus(jobType, job, { ...previous, active: 1, ready: 1, startTime: previous.startTime ?? startedAt, uncountedTerminatedPods: {} })
    },

    completeJob(namespace: string, jobName: string, result: JobResult): void {
      const { job, pod } = jobPod(namespace, jobName)
      const finishedAt = rfc3339(now())
      const podStatus = isRecord(pod.status) ? pod.status : {}
      const startedAt = (podStatus.startTime as string | undefined) ?? finishedAt
      const ok = result.exitCode === 0
      const podKey = objectKey(namespace, pod.metadata.name)
      appendLog(podKey, { text: result.logs })
      state.writeStatus(podType, pod, {
        phase: ok ? 'Succeeded' : 'Failed',
        startTime: startedAt,
        conditions: [{ type: 'Ready', status: 'False', reason: 'PodCompleted', lastTransitionTime: finishedAt }],
        containerStatuses: [
          containerStatus(pod, false, {
            terminated: {
              exitCode: result.exitCode,
              reason: result.reason ?? (ok ? 'Completed' : 'Error'),
              startedAt,
              finishedAt,
              containerID: `containerd://${pod.metadata.uid}`,
            },
          }),
        ],
      })
      for (const follower of logFollowers.get(podKey) ?? []) follower.res.end()
      logFollowers.delete(podKey)
      const previous = isRecord(job.status) ? job.status : {}
      const condition = (type: string, reason?: string, message?: string): JsonRecord => ({
        type,
        status: 'True',
        lastProbeTime: finishedAt,
        lastTransitionTime: finishedAt,
        ...(reason ? { reason } : {}),
        ...(message ? { message } : {}),
      })
      const deadline = result.reason === 'DeadlineExceeded'
      const failReason = deadline ? 'DeadlineExceeded' : 'BackoffLimitExceeded'
      const failMessage = deadline ? 'Job was active longer than specified deadline' : 'Job has reached the specified backoff limit'
      state.writeStatus(jobType, job, {
        startTime: previous.startTime ?? startedAt,
        active: 0,
        ready: 0,
        terminating: 0,
        uncountedTerminatedPods: {},
        ...(ok
          ? {
              succeeded: 1,
              completionTime: finishedAt,
              conditions: [
                condition('SuccessCriteriaMet', 'CompletionsReached', 'Reached expected number of succeeded pods'),
                condition('Complete', 'CompletionsReached', 'Reached expected number of succeeded pods'),
              ],
            }
          : { failed: 1, conditions: [condition('FailureTarget', failReason, failMessage), condition('Failed', failReason, failMessage)] }),
      })
    },

    writeLog(namespace: string, jobName: string, text: string): void {
      const { pod } = jobPod(namespace, jobName)
      const statuses = isRecord(pod.status) && Array.isArray(pod.status.containerStatuses) ? (pod.status.containerStatuses as JsonRecord[]) : []
      const current = statuses[0]?.state
      if (!isRecord(current) || !isRecord(current.running)) throw new Error(`fake apiserver: the container of Job ${namespace}/${jobName} is not running`)
      appendLog(objectKey(namespace, pod.metadata.name), { at: logStamp(now()), text })
    },

    failPod(namespace: string, jobName: string, waitingReason: WaitingReason, message: string): void {
      const { job, pod } = jobPod(namespace, jobName)
      state.writeStatus(podType, pod, {
        phase: 'Pending',
        conditions: [{ type: 'ContainersReady', status: 'False', reason: 'ContainersNotReady', lastTransitionTime: rfc3339(now()) }],
        containerStatuses: [containerStatus(pod, false, { waiting: { reason: waitingReason, message } })],
      })
      const previous = isRecord(job.status) ? job.status : {}
      state.writeStatus(jobType, job, { ...previous, active: 1, ready: 0, startTime: previous.startTime ?? rfc3339(now()), uncountedTerminatedPods: {} })
    },
  }

  const stop = async (): Promise<void> => {
    if (!up) return
    up = false
    for (const res of openStreams) res.end()
    openStreams.clear()
    for (const watcher of [...state.watchers]) watcher.close()
    state.watchers.clear()
    logFollowers.clear()
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    server.closeAllConnections()
    await closed
  }
  const listen = async (): Promise<void> => {
    if (up) return
    // A new apiserver's watch cache starts at the current resourceVersion: older resumes are 410.
    state.compact()
    await bind(port)
    stats.restarts += 1
  }

  return {
    url,
    port,
    kubeconfigPath,
    token,
    requests,
    stats,
    ...control,
    stop,
    listen,
    async restart(downMs = 0) {
      await stop()
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs))
      await listen()
    },
    isUp: () => up,
    get(apiVersion, kind, namespace, name) {
      const type = state.typeOf(apiVersion, kind)
      const object = state.bucket(type).get(objectKey(type.namespaced ? namespace : undefined, name))
      return object === undefined ? undefined : clone(object)
    },
    list(apiVersion, kind, namespace) {
      return state.list(state.typeOf(apiVersion, kind), namespace).map(clone)
    },
    compact() {
      state.compact()
    },
    resourceVersion() {
      return String(state.rv)
    },
    closeWatches() {
      for (const watcher of [...state.watchers]) watcher.close()
    },
    async close() {
      await stop()
      await rm(kubeconfigDir, { recursive: true, force: true })
    },
  }
}
