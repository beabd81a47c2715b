// The catalog: the registry joined with run-time facts (public URLs, which handlers exist),
// answering the discovery queries. Everything it returns is derived, never hand-written.
import { AppError } from '../platform/errors.ts'
import { HTTP_METHODS, type HttpMethod, type OperationSpec, type PlanSpec, type Registry, type ServerName, type ServiceSpec } from './types.ts'
import { openapiDocument, paymentInfoOf, registryComponentNames, type CatalogOperation, type ServerUrls } from './openapi.ts'
import type { ComponentNames } from './components.ts'
import { createOperationSearch, type OperationSearch } from './search.ts'

export const OPERATIONS_PER_PAGE = 10

export interface OpenapiQuery {
  q?: string | undefined
  path?: string | undefined
  method?: string | undefined
  page?: number | undefined
}

export interface OpenapiPage {
  document: Record<string, unknown>
  /** Absolute URL of the next page, when there is one. */
  next: string | undefined
  /** Absolute URL of the previous page, when there is one. */
  prev: string | undefined
  /** Absolute URLs of the first and last pages, when there is more than one page. */
  first: string | undefined
  last: string | undefined
  total: number
  page: number
  pages: number
}

/**
 * Whether a plan can be bought today. A plan is sold only while at least one operation of the
 * services it covers is built: money is never taken for access to operations that answer 501.
 * Derived from the catalog's `implemented` set, so a plan becomes purchasable by itself once one
 * of its operations gets a handler.
 */
export interface CatalogPlan {
  spec: PlanSpec
  purchasable: boolean
  /** Built operations (operationIds) of the covered services. */
  builtOperations: string[]
  /** Why it cannot be bought; only when `purchasable` is false. */
  reason?: string
}

/** An operation matching a text query, with its relevance (higher is better). */
export interface ScoredOperation {
  entry: CatalogOperation
  score: number
}

export interface Catalog {
  readonly registry: Registry
  readonly urls: ServerUrls
  readonly operations: readonly CatalogOperation[]
  /** Every plan of the registry once (registry order), with whether it can be bought. */
  readonly plans: readonly CatalogPlan[]
  plan(planId: string): CatalogPlan | undefined
  /** Operations matching `q` with their relevance, best first (every server). */
  match(q: string): ScoredOperation[]
  service(slug: string): ServiceSpec | undefined
  operationsOf(slug: string): CatalogOperation[]
  operationsOn(server: ServerName): CatalogOperation[]
  /** Operations matching the query, ranked by `q` when given (registry order otherwise). */
  select(query: Omit<OpenapiQuery, 'page'>, scope?: ServerName): CatalogOperation[]
  openapiPage(query: OpenapiQuery, scope?: ServerName): OpenapiPage
  serviceDocument(slug: string): Record<string, unknown>
  /** Whether MPP charges are offered (see CatalogOptions.mppCharges); $0 MPP proofs always are. */
  readonly mppCharges: boolean
}

export interface CatalogOptions {
  urls: ServerUrls
  /** operationIds with a real handler; the others answer 501 and are marked so. */
  implemented: ReadonlySet<string>
  /**
   * Whether MPP charges are offered, i.e. the payments have a Tempo RPC (`Payments.mppCharges`).
   * Default false: discovery then lists MPP only for $0 wallet proofs, which need no chain, as
   * the 402s do (a priced 402 carries no WWW-Authenticate: Payment without a Tempo RPC).
   */
  mppCharges?: boolean | undefined
}

// `/api/v1/tasks/{id}` → /^\/api\/v1\/tasks\/[^/]+$/ so `path=/api/v1/tasks/tsk_1` finds it too.
export function templateMatcher(template: string): RegExp {
  const pattern = template
    .split(/\{[^}]+\}/)
    .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
    .join('[^/]+')
  return new RegExp(`^${pattern}$`)
}

/**
 * Splits operations into pages of at most OPERATIONS_PER_PAGE, in order. Two operations with the
 * same method and path (the scheduler's and the memory service's GET /api/v1/account live on
 * different servers) never share a page, since one OpenAPI document cannot hold both.
 */
export function paginate(operations: readonly CatalogOperation[]): CatalogOperation[][] {
  const pages: CatalogOperation[][] = []
  const keys: Set<string>[] = []
  let first = 0 // first page that may still have room
  for (const entry of operations) {
    const key = `${entry.spec.method} ${entry.spec.path}`
    let index = first
    while (index < pages.length && ((pages[index]?.length ?? 0) >= OPERATIONS_PER_PAGE || keys[index]?.has(key))) index += 1
    if (index === pages.length) {
      pages.push([])
      keys.push(new Set())
    }
    pages[index]?.push(entry)
    keys[index]?.add(key)
    while (first < pages.length && (pages[first]?.length ?? 0) >= OPERATIONS_PER_PAGE) first += 1
  }
  return pages
}

export function parseMethod(raw: string | undefined): HttpMethod | undefined {
  if (raw === undefined) return undefined
  const method = raw.toUpperCase() as HttpMethod
  if (!HTTP_METHODS.includes(method)) {
    throw new AppError('validation_error', `query.method must be one of ${HTTP_METHODS.join(', ')}`, { field: 'query.method' })
  }
  return method
}

function planAvailability(registry: Registry, operations: readonly CatalogOperation[]): CatalogPlan[] {
  const seen = new Map<string, PlanSpec>()
  for (const service of registry.services) for (const plan of service.plans) if (!seen.has(plan.id)) seen.set(plan.id, plan)
  return [...seen.values()].map((spec): CatalogPlan => {
    const covered = operations.filter((entry) => spec.covers.includes(entry.service.slug))
    const builtOperations = covered.filter((entry) => entry.implemented).map((entry) => entry.spec.operationId)
    if (builtOperations.length > 0) return { spec, purchasable: true, builtOperations }
    const unbuilt = covered.map((entry) => entry.spec.operationId)
    return {
      spec,
      purchasable: false,
      builtOperations,
      reason:
        `Not for sale yet: it covers ${spec.covers.join(', ')}, and none of ${unbuilt.length > 0 ? `its operations (${unbuilt.join(', ')})` : 'their operations'} is built ` +
        '(they answer 501 not_implemented). It goes on sale by itself once one of them is built.',
    }
  })
}

export function createCatalog(registry: Registry, options: CatalogOptions): Catalog {
  const mppCharges = options.mppCharges === true
  const operations: CatalogOperation[] = registry.services.flatMap((service) =>
    service.operations.map((spec: OperationSpec) => ({
      spec,
      service,
      serverUrl: options.urls[spec.server],
      implemented: options.implemented.has(spec.operationId),
      paymentInfo: paymentInfoOf(spec, service, mppCharges),
    })),
  )
  const matchers = new Map(operations.map((entry) => [entry, templateMatcher(entry.spec.path)]))
  const plans = planAvailability(registry, operations)
  const plansById = new Map(plans.map((plan) => [plan.spec.id, plan]))
  let names: ComponentNames | undefined
  const componentNames = (): ComponentNames => (names ??= registryComponentNames(operations))
  const searches = new Map<string, { list: CatalogOperation[]; search: OperationSearch }>()

  function scoped(scope: ServerName | undefined): { list: CatalogOperation[]; search: OperationSearch } {
    const key = scope ?? '*'
    let cached = searches.get(key)
    if (!cached) {
      const list = scope ? operations.filter((entry) => entry.spec.server === scope) : operations
      cached = { list, search: createOperationSearch(list) }
      searches.set(key, cached)
    }
    return cached
  }

  function select(query: Omit<OpenapiQuery, 'page'>, scope?: ServerName): CatalogOperation[] {
    const { list, search } = scoped(scope)
    const method = parseMethod(query.method)
    const q = query.q?.trim()
    let selected = q ? search.rank(q).map((index) => list[index] as CatalogOperation) : list
    if (method) selected = selected.filter((entry) => entry.spec.method === method)
    if (query.path !== undefined) {
      const wanted = query.path
      selected = selected.filter((entry) => entry.spec.path === wanted || matchers.get(entry)?.test(wanted) === true)
    }
    return selected
  }

  function baseFor(scope: ServerName | undefined): string {
    return options.urls[scope ?? 'gateway']
  }

  return {
    registry,
    urls: options.urls,
    mppCharges,
    operations,
    plans,
    plan: (planId) => plansById.get(planId),
    match(q) {
      const { list, search } = scoped(undefined)
      return search.scored(q).map((hit) => ({ entry: list[hit.index] as CatalogOperation, score: hit.score }))
    },
    service: (slug) => registry.services.find((service) => service.slug === slug),
    operationsOf: (slug) => operations.filter((entry) => entry.service.slug === slug),
    operationsOn: (server) => operations.filter((entry) => entry.spec.server === server),
    select,
    openapiPage(query, scope) {
      const page = query.page ?? 1
      const selected = select(query, scope)
      const paged = paginate(selected)
      const pages = Math.max(1, paged.length)
      if (page > pages) {
        throw new AppError('validation_error', `query.page ${page} is past the last page (${pages})`, { field: 'query.page' })
      }
      const slice = paged[page - 1] ?? []
      // The URL of page n of the same query (its search and filters kept).
      const pageUrl = (n: number) => {
        const params = new URLSearchParams()
        if (query.q) params.set('q', query.q)
        if (query.path !== undefined) params.set('path', query.path)
        if (query.method) params.set('method', query.method.toUpperCase())
        params.set('page', String(n))
        return `${baseFor(scope)}/openapi.json?${params.toString()}`
      }
      const next = page < pages ? pageUrl(page + 1) : undefined
      const prev = page > 1 ? pageUrl(page - 1) : undefined
      const [first, last] = pages > 1 ? [pageUrl(1), pageUrl(pages)] : [undefined, undefined]
      const info: Record<string, unknown> = {
        'x-page': page,
        'x-pages': pages,
        'x-total-operations': selected.length,
        'x-operations-per-page': OPERATIONS_PER_PAGE,
      }
      if (next) info['x-next'] = next
      if (query.q) info['x-query'] = query.q
      const document = openapiDocument(slice, {
        title: scope === 'scheduler' ? 'Agent Gateway scheduler' : scope === 'memory' ? 'Agent Gateway memory' : 'Agent Gateway',
        description:
          (mppCharges
            ? 'Pay-per-request API for agents: x402 (USDC on eip155:8453, scheme exact) and MPP (tempo/charge) on payg operations, '
            : 'Pay-per-request API for agents: x402 (USDC on eip155:8453, scheme exact) on payg operations (MPP here for $0 wallet proofs only), ') +
          'bearer plans on plan operations. Every operation carries x-payment-info. Search with ?q=, filter with ?path= and ?method=, ' +
          `page with ?page= (${OPERATIONS_PER_PAGE} operations a page; follow info.x-next or the Link header).`,
        serverUrl: baseFor(scope),
        info,
        names: componentNames(),
      })
      return { document, next, prev, first, last, total: selected.length, page, pages }
    },
    serviceDocument(slug) {
      const service = registry.services.find((candidate) => candidate.slug === slug)
      if (!service) throw new AppError('unknown_service', `No service "${slug}"; see /services`, { field: 'path.slug' })
      return openapiDocument(
        operations.filter((entry) => entry.service.slug === slug),
        { title: `Agent Gateway: ${service.title}`, description: service.description, serverUrl: options.urls[service.server], names: componentNames() },
      )
    },
  }
}
