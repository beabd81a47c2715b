// prom-client metrics. One registry per process; every listener serves it at /metrics.
import { Registry, collectDefaultMetrics, type Metric } from 'prom-client'

/** Records one finished request: the fastify route template (or 'unmatched'), status and duration. */
export type RequestObserver = (method: string, route: string, status: number, elapsedMs: number) => void

export interface Metrics {
  registry: Registry
  contentType: string
  render(): Promise<string>
  /** The request-duration observer of one listener (`gateway`, `scheduler`, …). */
  httpRequestTimer(listener: string): RequestObserver
}

const REQUEST_DURATION = 'agent_gateway_http_request_duration_seconds'
/** Upper bounds in seconds; a request lands in the first bucket at or above its duration. */
export const REQUEST_DURATION_BUCKETS: readonly number[] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30]

/** Counts of one label set: per-bucket (not cumulative, last slot is +Inf), sum and count. */
interface Series {
  labels: Record<string, string>
  buckets: Float64Array
  sum: number
  count: number
}

function newSeries(labels: Record<string, string>): Series {
  return { labels, buckets: new Float64Array(REQUEST_DURATION_BUCKETS.length + 1), sum: 0, count: 0 }
}

/** Adds one observation; the bucket scan stops at the first bound, i.e. at once for fast requests. */
export function recordDuration(series: Series, seconds: number): void {
  let bucket = 0
  while (bucket < REQUEST_DURATION_BUCKETS.length && seconds > (REQUEST_DURATION_BUCKETS[bucket] as number)) bucket++
  series.buckets[bucket]! += 1
  series.sum += seconds
  series.count += 1
}

/** prom-client's histogram sample list (cumulative `_bucket`s, `+Inf`, `_sum`, `_count`) for the series. */
export function histogramValues(name: string, series: Iterable<Series>): { metricName: string; labels: Record<string, string | number>; value: number }[] {
  const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = []
  for (const { labels, buckets, sum, count } of series) {
    let cumulative = 0
    REQUEST_DURATION_BUCKETS.forEach((bound, i) => {
      cumulative += buckets[i] ?? 0
      values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: bound }, value: cumulative })
    })
    values.push({ metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: count })
    values.push({ metricName: `${name}_sum`, labels, value: sum })
    values.push({ metricName: `${name}_count`, labels, value: count })
  }
  return values
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  // The event-loop-lag histogram samples on a timer; prom-client's default (10 ms) wakes an idle
  // process 100 times a second, about half of its idle CPU. At 100 ms a stall still shows in the
  // lag metrics whenever it delays a sample, and every stall of 100 ms or more always does.
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: 'agent_gateway_', eventLoopMonitoringPrecision: 100 })

  // The request histogram is recorded into plain arrays: prom-client's Histogram#observe hashes the
  // label set and looks buckets up by stringified bound on every call (~0.4 µs, a few % of a
  // discovery request). prom-client still owns the exposition: the registry reads these series
  // through the metric interface it calls (`get`, `reset`) at scrape time.
  // Label values are bounded: route templates (or 'unmatched'), the methods node's parser accepts,
  // status codes.
  const series = new Map<string, Series>()
  const seriesFor = (listener: string, method: string, route: string, status: number): Series => {
    const key = JSON.stringify([listener, method, route, status])
    let entry = series.get(key)
    if (entry === undefined) series.set(key, (entry = newSeries({ listener, method, route, status: String(status) })))
    return entry
  }
  const help = 'HTTP request duration by listener, method, route template and status code'
  const requestDuration = {
    name: REQUEST_DURATION,
    help,
    type: 'histogram',
    aggregator: 'sum',
    get: async () => ({ name: REQUEST_DURATION, help, type: 'histogram', aggregator: 'sum', values: histogramValues(REQUEST_DURATION, series.values()) }),
    reset: () => {
      for (const entry of series.values()) {
        entry.buckets.fill(0)
        entry.sum = 0
        entry.count = 0
      }
    },
  }
  registry.registerMetric(requestDuration as unknown as Metric)

  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    httpRequestTimer: (listener) => {
      // route → method → status → series: lookups on strings and small integers, no key string
      // built per request. Series are shared, so two apps with the same name add up.
      const routes = new Map<string, Map<string, Map<number, Series>>>()
      return (method, route, status, elapsedMs) => {
        let methods = routes.get(route)
        if (methods === undefined) routes.set(route, (methods = new Map()))
        let statuses = methods.get(method)
        if (statuses === undefined) methods.set(method, (statuses = new Map()))
        let entry = statuses.get(status)
        if (entry === undefined) statuses.set(status, (entry = seriesFor(listener, method, route, status)))
        recordDuration(entry, elapsedMs / 1000)
      }
    },
  }
}
