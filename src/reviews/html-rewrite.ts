// HTML and CSS rewriting for the isolated origin: the overlay's head tags go first in <head> (site
// bundles and live pages), and a live page's URLs are mapped onto the site origin (the proxy).
// parse5's tokenizer (with the tree builder's tokenizer-mode feedback) finds the tags, so markup in
// comments, scripts, styles, textareas or attribute values cannot pose as a <head> or a URL; every
// token we do not change is copied byte for byte from the source.
import type { RewritingStream } from 'parse5-html-rewriting-stream'

/**
 * Maps a URL found in a page to the URL to write instead, or null to leave it as it is. `base` is
 * the raw href of the document's first <base href> (dropped from the output), when there is one.
 */
export type UrlMapper = (raw: string, base?: string) => string | null

const WHITESPACE_ONLY = /^[\t\n\f\r ]*$/
const BOM = '\uFEFF'

/** URL attributes rewritten, per element (names as the tokenizer gives them: lower case). */
const URL_ATTRIBUTES: Record<string, readonly string[]> = {
  a: ['href'],
  area: ['href'],
  link: ['href'],
  img: ['src', 'lowsrc'],
  script: ['src'],
  iframe: ['src'],
  frame: ['src', 'longdesc'],
  embed: ['src'],
  audio: ['src'],
  video: ['src', 'poster'],
  source: ['src'],
  track: ['src'],
  input: ['src', 'formaction'],
  button: ['formaction'],
  form: ['action'],
  object: ['data', 'codebase'],
  body: ['background'],
  table: ['background'],
  td: ['background'],
  th: ['background'],
  html: ['manifest'],
  blockquote: ['cite'],
  q: ['cite'],
  del: ['cite'],
  ins: ['cite'],
  // SVG in HTML (foreign content keeps these names)
  image: ['href', 'xlink:href'],
  use: ['href', 'xlink:href'],
  feimage: ['href', 'xlink:href'],
}
const SRCSET_ATTRIBUTES: Record<string, readonly string[]> = { img: ['srcset'], source: ['srcset'], link: ['imagesrcset'] }
/**
 * Dropped everywhere: `integrity` (a rewritten stylesheet no longer matches its hash), `ping` (a
 * beacon elsewhere), `referrerpolicy` (would override the origin's no-referrer).
 */
const DROPPED_ATTRIBUTES = new Set(['integrity', 'ping', 'referrerpolicy'])

interface Attribute {
  name: string
  value: string
}
interface StartTag {
  tagName: string
  attrs: Attribute[]
  selfClosing: boolean
}

function attr(tag: StartTag, name: string): string | undefined {
  return tag.attrs.find((a) => a.name === name)?.value
}

/** parse5's rewriting stream, loaded by the first page rewritten rather than at every start. */
let parse5Rewriter: Promise<typeof import('parse5-html-rewriting-stream')> | undefined

/**
 * Runs the rewriter over a whole document; `setup` attaches the listeners and may return what to
 * append once the input is consumed.
 */
async function rewrite(html: string, setup: (stream: RewritingStream) => (() => string) | undefined): Promise<string> {
  const { RewritingStream } = await (parse5Rewriter ??= import('parse5-html-rewriting-stream'))
  const hasBom = html.startsWith(BOM)
  const stream = new RewritingStream()
  const chunks: string[] = []
  const atEnd = setup(stream)
  stream.on('data', (chunk: string) => chunks.push(chunk))
  const done = new Promise<void>((resolve, reject) => {
    stream.once('end', resolve)
    stream.once('error', reject)
  })
  // The BOM stays the first character (browsers decide the encoding by it) and never counts as content.
  stream.end(hasBom ? html.slice(1) : html)
  await done
  return (hasBom ? BOM : '') + chunks.join('') + (atEnd?.() ?? '')
}

/**
 * Places `tags` where the parser would be in <head> at the earliest: right after the `<head …>`
 * start tag, else right before the first token that is not a doctype, a comment, whitespace or
 * the `<html>` start tag (the parser then opens <head> implicitly around them), else at the end
 * (a document that is empty or only a doctype and comments).
 */
class HeadInjector {
  done = false
  readonly stream: RewritingStream
  readonly tags: string

  constructor(stream: RewritingStream, tags: string) {
    this.stream = stream
    this.tags = tags
  }

  /**
   * Called before a tag or text is written (doctypes and comments pass untouched); true when the
   * token is the <head> start tag, after which the tags go.
   */
  before(kind: 'startTag' | 'endTag' | 'text', tag?: StartTag, text?: string): boolean {
    if (this.done) return false
    if (kind === 'text' && WHITESPACE_ONLY.test(text ?? '')) return false
    if (kind === 'startTag' && tag?.tagName === 'html') return false
    if (kind === 'startTag' && tag?.tagName === 'head') return true
    this.inject()
    return false
  }

  inject(): void {
    if (this.done) return
    this.done = true
    this.stream.emitRaw(this.tags)
  }

  /** What the end of the document still needs: the tags, when no token called for them. */
  readonly atEnd = (): string => (this.done ? '' : this.tags)
}

/** `html` with `tags` first in <head> (see HeadInjector); nothing else changes. */
export async function injectHeadTags(html: string, tags: string): Promise<string> {
  return rewrite(html, (stream) => {
    const head = new HeadInjector(stream, tags)
    stream.on('startTag', (tag: StartTag, raw: string) => {
      const after = head.before('startTag', tag)
      stream.emitRaw(raw)
      if (after) head.inject()
    })
    stream.on('endTag', (_tag: unknown, raw: string) => {
      head.before('endTag')
      stream.emitRaw(raw)
    })
    stream.on('text', (_text: unknown, raw: string) => {
      head.before('text', undefined, raw)
      stream.emitRaw(raw)
    })
    return head.atEnd
  })
}

/**
 * `html` with `tags` first in <head> and its URLs mapped by `mapUrl`: the URL attributes of the
 * usual elements, srcset lists, inline `style` attributes and <style> contents (url(), @import) and
 * `<meta http-equiv=refresh>`. `<base href>` is dropped (its href is handed to mapUrl as `base`);
 * `<meta http-equiv=content-security-policy|set-cookie>` and `<meta name=referrer>` are dropped;
 * `integrity`, `ping` and `referrerpolicy` attributes are dropped.
 */
export async function rewriteHtml(html: string, mapUrl: UrlMapper, tags: string): Promise<string> {
  const base = await firstBaseHref(html)
  const map = (raw: string): string | null => mapUrl(raw, base)
  return rewrite(html, (stream) => {
    const head = new HeadInjector(stream, tags)
    let inStyle = false
    stream.on('startTag', (tag: StartTag, raw: string) => {
      const after = head.before('startTag', tag)
      if (tag.tagName === 'style' && !tag.selfClosing) inStyle = true
      const rewritten = rewriteStartTag(tag, map)
      // A dropped <base> / <meta> writes nothing, but still counts as the injection point.
      if (rewritten !== 'drop') {
        if (rewritten) stream.emitStartTag(rewritten)
        else stream.emitRaw(raw)
      }
      if (after) head.inject()
    })
    stream.on('endTag', (tag: { tagName: string }, raw: string) => {
      head.before('endTag')
      if (tag.tagName === 'style') inStyle = false
      stream.emitRaw(raw)
    })
    stream.on('text', (_text: unknown, raw: string) => {
      head.before('text', undefined, raw)
      stream.emitRaw(inStyle ? rewriteCss(raw, map) : raw)
    })
    return head.atEnd
  })
}

/** The href of the document's first <base href> (the one browsers use), if any. */
async function firstBaseHref(html: string): Promise<string | undefined> {
  if (!/<base[\s/>]/i.test(html)) return undefined
  let found: string | undefined
  await rewrite(html, (stream) => {
    stream.on('startTag', (tag: StartTag) => {
      if (found === undefined && tag.tagName === 'base') {
        const href = attr(tag, 'href')
        if (href !== undefined) {
          found = href.trim()
          stream.stop()
        }
      }
    })
    return undefined
  })
  return found
}

/** The tag to write instead, 'drop' to write nothing, or null to keep the source as it is. */
function rewriteStartTag(tag: StartTag, map: (raw: string) => string | null): StartTag | 'drop' | null {
  const name = tag.tagName
  if (name === 'base') {
    if (attr(tag, 'href') === undefined) return null
    const rest = tag.attrs.filter((a) => a.name !== 'href')
    return rest.length === 0 ? 'drop' : { ...tag, attrs: rest }
  }
  if (name === 'meta') {
    const equiv = attr(tag, 'http-equiv')?.trim().toLowerCase()
    if (equiv === 'content-security-policy' || equiv === 'content-security-policy-report-only' || equiv === 'set-cookie') return 'drop'
    if (attr(tag, 'name')?.trim().toLowerCase() === 'referrer') return 'drop'
    if (equiv === 'refresh') {
      const content = attr(tag, 'content')
      const mapped = content === undefined ? null : rewriteRefresh(content, map)
      return mapped === null ? null : { ...tag, attrs: tag.attrs.map((a) => (a.name === 'content' ? { ...a, value: mapped } : a)) }
    }
  }
  const urlNames = URL_ATTRIBUTES[name] ?? []
  const srcsetNames = SRCSET_ATTRIBUTES[name] ?? []
  let changed = false
  const attrs: Attribute[] = []
  for (const a of tag.attrs) {
    if (DROPPED_ATTRIBUTES.has(a.name)) {
      changed = true
      continue
    }
    let value: string | null = null
    if (urlNames.includes(a.name)) value = map(a.value.trim())
    else if (srcsetNames.includes(a.name)) value = rewriteSrcset(a.value, map)
    else if (a.name === 'style') value = rewriteCss(a.value, map)
    if (value !== null && value !== a.value) {
      changed = true
      attrs.push({ ...a, value })
    } else attrs.push(a)
  }
  return changed ? { ...tag, attrs } : null
}

/** `5; url=/next` with its URL mapped, or null when it names none (or mapUrl leaves it). */
function rewriteRefresh(content: string, map: (raw: string) => string | null): string | null {
  const match = /^(\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?)(["']?)(.*?)\2\s*$/is.exec(content)
  if (!match || match[3] === '') return null
  const mapped = map(match[3]!.trim())
  return mapped === null ? null : `${match[1]}${match[2]}${mapped}${match[2]}`
}

/** A srcset (`a.png 1x, b.png 2x`) with each candidate's URL mapped; descriptors kept. */
export function rewriteSrcset(value: string, map: (raw: string) => string | null): string {
  const out: string[] = []
  let i = 0
  while (i < value.length) {
    while (i < value.length && /[\s,]/.test(value[i]!)) i++
    if (i >= value.length) break
    let end = i
    while (end < value.length && !/\s/.test(value[end]!)) end++
    let url = value.slice(i, end)
    let descriptor = ''
    i = end
    if (url.endsWith(',')) url = url.replace(/,+$/, '')
    else {
      // Descriptors run to the next comma outside parentheses.
      let depth = 0
      let j = i
      while (j < value.length && (value[j] !== ',' || depth > 0)) {
        if (value[j] === '(') depth++
        else if (value[j] === ')') depth = Math.max(0, depth - 1)
        j++
      }
      descriptor = value.slice(i, j).trim()
      i = j
    }
    const mapped = map(url)
    out.push(descriptor === '' ? (mapped ?? url) : `${mapped ?? url} ${descriptor}`)
  }
  return out.join(', ')
}

const CSS_URL = /url\(\s*(?:"((?:[^"\\\n]|\\[\s\S])*)"|'((?:[^'\\\n]|\\[\s\S])*)'|((?:[^)\s"'\\]|\\[0-9a-fA-F]{1,6}\s?|\\[\s\S])*))\s*\)/gi
const CSS_IMPORT_STRING = /(@import\s*)(?:"((?:[^"\\\n]|\\[\s\S])*)"|'((?:[^'\\\n]|\\[\s\S])*)')/gi

function cssUnescape(value: string): string {
  return value.replace(/\\(?:([0-9a-fA-F]{1,6})\s?|\n|([\s\S]))/g, (_m, hex: string | undefined, char: string | undefined) => {
    if (hex !== undefined) {
      const code = parseInt(hex, 16)
      return code === 0 || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff) ? '\uFFFD' : String.fromCodePoint(code)
    }
    return char ?? ''
  })
}

function cssString(value: string): string {
  return `"${value.replace(/["\\]/g, '\\$&').replace(/\n/g, '\\a ')}"`
}

/** CSS with the URLs of url(…) and `@import "…"` mapped (comments and strings are not told apart). */
export function rewriteCss(css: string, mapUrl: (raw: string) => string | null): string {
  const withUrls = css.replace(CSS_URL, (whole, dq: string | undefined, sq: string | undefined, bare: string | undefined) => {
    const mapped = mapUrl(cssUnescape(dq ?? sq ?? bare ?? '').trim())
    return mapped === null ? whole : `url(${cssString(mapped)})`
  })
  return withUrls.replace(CSS_IMPORT_STRING, (whole, at: string, dq: string | undefined, sq: string | undefined) => {
    const mapped = mapUrl(cssUnescape(dq ?? sq ?? '').trim())
    return mapped === null ? whole : `${at}${cssString(mapped)}`
  })
}

/**
 * Text of an HTML or CSS body: UTF-8 when the bytes are valid UTF-8, else Latin-1, so the bytes we
 * do not change come back as they were from `encodeBody` whatever ASCII-compatible encoding the
 * page is in (a URL we rewrite is ASCII once resolved).
 */
export function decodeBody(bytes: Buffer): { text: string; encoding: 'utf8' | 'latin1' } {
  try {
    return { text: new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes), encoding: 'utf8' }
  } catch {
    return { text: bytes.toString('latin1'), encoding: 'latin1' }
  }
}

export function encodeBody(text: string, encoding: 'utf8' | 'latin1'): Buffer {
  return Buffer.from(text, encoding)
}

/**
 * The content type to serve a rewritten HTML page with: a UTF-8 page without a charset parameter
 * gets one, as the injected tags may push its <meta charset> past the 1024 bytes browsers prescan.
 */
export function htmlContentType(contentType: string, encoding: 'utf8' | 'latin1'): string {
  return encoding === 'utf8' && !/;\s*charset\s*=/i.test(contentType) ? `${contentType.trim()}; charset=utf-8` : contentType
}
