// OpenTelemetry tracing, off unless an OTLP endpoint is configured. It must start before
// fastify and pg are loaded so the http and pg instrumentations can patch them.
import { redactPath } from './redact-path.ts'

export interface Tracing {
  shutdown(): Promise<void>
}

export async function startTracing(options: { otlpEndpoint: string | undefined; serviceName: string }): Promise<Tracing | undefined> {
  if (!options.otlpEndpoint) return undefined
  const [{ NodeSDK }, { OTLPTraceExporter }, { HttpInstrumentation }, { PgInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/instrumentation-http'),
    import('@opentelemetry/instrumentation-pg'),
  ])
  const endpoint = options.otlpEndpoint.replace(/\/$/, '')
  const sdk = new NodeSDK({
    serviceName: options.serviceName,
    traceExporter: new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }),
    instrumentations: [
      new HttpInstrumentation({
        // Payment proofs and bearer tokens travel in headers; never record them on spans.
        headersToSpanAttributes: { server: { requestHeaders: ['x-request-id'], responseHeaders: ['x-request-id'] } },
        ignoreIncomingRequestHook: (req) => req.url === '/healthz' || req.url === '/readyz' || req.url === '/metrics',
        // A capability in a path (a review's share link) is a bearer secret: spans get the redacted path.
        requestHook: (span, request) => {
          if (!('headers' in request) || typeof (request as { url?: unknown }).url !== 'string') return
          const path = redactPath((request as { url: string }).url)
          const origin = `http://${request.headers.host ?? 'localhost'}`
          for (const key of ['http.target', 'url.path']) span.setAttribute(key, path)
          for (const key of ['http.url', 'url.full']) span.setAttribute(key, `${origin}${path}`)
          span.setAttribute('url.query', '')
        },
      }),
      new PgInstrumentation({ enhancedDatabaseReporting: false }),
    ],
  })
  sdk.start()
  return { shutdown: () => sdk.shutdown() }
}
