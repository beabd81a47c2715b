// Content types of a hosted site's files, from an allowlist of extensions. Anything else is served
// as a download so a browser never renders a type we did not choose (with nosniff on every answer).

export interface ServedType {
  contentType: string
  /** Served with `Content-Disposition: attachment`. */
  attachment: boolean
}

const TYPE_BY_EXTENSION: ReadonlyMap<string, string> = new Map([
  ['html', 'text/html; charset=utf-8'],
  ['htm', 'text/html; charset=utf-8'],
  ['css', 'text/css; charset=utf-8'],
  ['js', 'text/javascript; charset=utf-8'],
  ['mjs', 'text/javascript; charset=utf-8'],
  ['json', 'application/json'],
  ['map', 'application/json'],
  ['txt', 'text/plain; charset=utf-8'],
  ['md', 'text/plain; charset=utf-8'],
  ['svg', 'image/svg+xml'],
  ['png', 'image/png'],
  ['jpg', 'image/jpeg'],
  ['jpeg', 'image/jpeg'],
  ['gif', 'image/gif'],
  ['webp', 'image/webp'],
  ['avif', 'image/avif'],
  ['ico', 'image/x-icon'],
  ['woff', 'font/woff'],
  ['woff2', 'font/woff2'],
  ['ttf', 'font/ttf'],
  ['otf', 'font/otf'],
  ['mp3', 'audio/mpeg'],
  ['mp4', 'video/mp4'],
  ['webm', 'video/webm'],
  ['wav', 'audio/wav'],
  ['ogg', 'audio/ogg'],
  ['pdf', 'application/pdf'],
  ['wasm', 'application/wasm'],
  ['xml', 'application/xml'],
  ['csv', 'text/csv'],
])

const DOWNLOAD: ServedType = Object.freeze({ contentType: 'application/octet-stream', attachment: true })

/** The type a site file is served with, by its extension (case-insensitive). */
export function contentTypeOf(path: string): ServedType {
  const name = path.slice(path.lastIndexOf('/') + 1)
  const dot = name.lastIndexOf('.')
  if (dot < 0) return DOWNLOAD
  const contentType = TYPE_BY_EXTENSION.get(name.slice(dot + 1).toLowerCase())
  return contentType === undefined ? DOWNLOAD : { contentType, attachment: false }
}
