// screenshot: renders a page to PNG with playwright-core and a system Chromium, stored in the blob
// store and served at GET {scheduler_url}/shots/{taskId}/{id}.png.
//   POST /shots {url, width?, height?, full_page?} → 201 {url, width, height, full_page, bytes}
//
// The page is untrusted, so every request Chromium makes (the page, redirects, sub-resources)
// goes through a private EgressProxy (src/platform/page-shots.ts: the sandbox rule, checked
// after resolution, connection pinned) and WebRTC may not bypass it. The target is also checked
// up front so a private URL gets a clear 400 instead of a proxy error page. Without a Chromium
// binary the sibling answers 503 (and call() neither charges nor counts it).
import { Type } from '@sinclair/typebox'
import { AppError } from '../../../platform/errors.ts'
import { check, publishFile, randomId } from '../common.ts'
import { EgressRefused, resolveTarget } from '../../../platform/egress.ts'
import { createPageShots, DEFAULT_CHROMIUM_PATH } from '../../../platform/page-shots.ts'
import type { SiblingContext, SiblingRoute } from './types.ts'

export { CHROMIUM_FLAGS, chromiumAvailable, DEFAULT_CHROMIUM_PATH } from '../../../platform/page-shots.ts'

export const ShotBody = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: 2048, description: 'http(s) URL of the page' }),
    width: Type.Optional(Type.Integer({ minimum: 320, maximum: 3840, description: 'Viewport width, default 1280' })),
    height: Type.Optional(Type.Integer({ minimum: 240, maximum: 2160, description: 'Viewport height, default 800' })),
    full_page: Type.Optional(Type.Boolean({ description: 'Capture the whole scrollable page (default false)' })),
  },
  { additionalProperties: false },
)

export function chromiumPathOf(ctx: Pick<SiblingContext, 'screenshot'>): string {
  return ctx.screenshot.chromiumPath ?? process.env.CHROMIUM_PATH ?? DEFAULT_CHROMIUM_PATH
}

export const screenshotRoutes: SiblingRoute[] = [
  {
    method: 'POST',
    pattern: /^\/shots$/,
    async handle(ctx, request) {
      check(ShotBody, request.body)
      let target: URL
      try {
        target = new URL(request.body.url)
      } catch {
        throw new AppError('VALIDATION_ERROR', 'body.url must be an absolute URL', { field: 'body.url' })
      }
      if (target.protocol !== 'http:' && target.protocol !== 'https:') {
        throw new AppError('VALIDATION_ERROR', 'body.url must be an http or https URL', { field: 'body.url' })
      }
      try {
        await resolveTarget(ctx.egress, target.hostname, Number(target.port) || (target.protocol === 'https:' ? 443 : 80))
      } catch (err) {
        if (err instanceof EgressRefused) throw new AppError('VALIDATION_ERROR', `body.url cannot be reached: ${err.message}`, { field: 'body.url' })
        throw err
      }
      const executable = chromiumPathOf(ctx)
      const shots = createPageShots({
        chromiumPath: executable,
        egressAllow: ctx.egressAllow,
        lookup: ctx.egress.lookup,
        ...(ctx.screenshot.timeoutMs === undefined ? {} : { timeoutMs: ctx.screenshot.timeoutMs }),
        maxConcurrent: ctx.screenshot.concurrency ?? 2,
      })
      if (!(await shots.available())) {
        throw new AppError('unavailable', `screenshot is not available: no Chromium at ${executable} (install chromium or set CHROMIUM_PATH)`)
      }
      const width = request.body.width ?? 1280
      const height = request.body.height ?? 800
      const fullPage = request.body.full_page === true
      let png: Buffer
      try {
        png = await shots.capture(target.href, { width, height, fullPage })
      } catch (err) {
        if (err instanceof AppError) throw err
        // Navigation errors (timeouts, TLS, DNS) are the page's, not the service's: a 4xx-style failure the task can read.
        throw new AppError('VALIDATION_ERROR', `body.url could not be rendered: ${(err as Error).message.split('\n')[0]}`, { field: 'body.url', status: 422 })
      }
      const cap = ctx.rates.hard_caps.max_artifact_bytes
      if (png.length > cap) throw new AppError('payload_too_large', `The screenshot is ${png.length} bytes, above ${cap}; use a smaller viewport or full_page false`)
      const id = randomId('sh_')
      const file = await publishFile(ctx, {
        path: `shots/${ctx.taskId}/${id}.png`,
        taskId: ctx.taskId,
        runId: ctx.runId,
        kind: 'screenshot',
        name: `${id}.png`,
        contentType: 'image/png',
        data: png,
      })
      return { status: 201, body: { url: file.url, width, height, full_page: fullPage, bytes: file.bytes } }
    },
  },
]
