// The pieces every HTML page and browser file the service serves needs: text escaped for HTML
// (element content and quoted attributes alike), and a static file with its strong ETag.
import { createHash } from 'node:crypto'

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c] as string)
}

export interface StaticAsset {
  body: Buffer
  contentType: string
  /** Strong ETag of body (quoted base64url SHA-256). */
  etag: string
}

/** A body with its content type and strong ETag. */
export function staticAsset(body: string | Buffer, contentType: string): StaticAsset {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body
  return { body: bytes, contentType, etag: `"${createHash('sha256').update(bytes).digest('base64url')}"` }
}
