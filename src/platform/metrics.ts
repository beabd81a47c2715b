// prom-client metrics. One registry per process; every listener serves it at /metrics.
import { Histogram, Registry, collectDefaultMetrics } from 'prom-client'

export interface Metrics {
  registry: Registry
  contentType: string
  render(): Promise<string>
  /** Returns a cheap observer for one listener (label values are resolved once per call). */
  httpRequestTimer(listener: string): (method: string, route: string, status: number, elapsedMs: number) => void
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: 'agent_gateway_' })
  const duration = new Histogram({
    name: 'agent_gateway_http_request_duration_seconds',
    help: 'HTTP request duration by listener, method, route template and status code',
    labelNames: ['listener', 'method', 'route', 'status'],
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
    registers: [registry],
  })
  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    httpRequestTimer: (listener) => {
      // Label children resolved once per (method, route, status): observe() then skips label hashing.
      const children = new Map<string, ReturnType<typeof duration.labels>>()
      return (method, route, status, elapsedMs) => {
        const key = `${method} ${status} ${route}`
        let child = children.get(key)
        if (child === undefined) {
          child = duration.labels({ listener, method, route, status: String(status) })
          if (children.size < 10_000) children.set(key, child)
        }
        child.observe(elapsedMs / 1000)
      }
    },
  }
}
