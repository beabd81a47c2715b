// The files of the review UI, loaded once: the overlay the isolated origin adds to every HTML page
// of a site (capture.js, overlay.js and @medv/finder's finder.js, served under SITE_RESERVED_PREFIX)
// and the reviewer page (reviewer.html rendered per review; its module reviewer.js, the modules it
// imports and reviewer.css served at /reviews/assets/). The browser files are plain JS next to this
// module (no build step).
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { escapeHtml, staticAsset, type StaticAsset } from '../../platform/html.ts'
import * as limits from '../limits.ts'
import { SITE_RESERVED_PREFIX, type ReviewerAssets, type ReviewerPageView, type SiteAssets } from '../types.ts'

const JS = 'text/javascript; charset=utf-8'
const CSS = 'text/css; charset=utf-8'

/** A browser file, with each `/* @include <file> *\/` replaced by that file (shared helpers, one copy in the repo). */
function readUiFile(name: string): string {
  const source = readFileSync(new URL(name, import.meta.url), 'utf8')
  return source.replace(/\/\* @include ([a-z-]+\.js) \*\//g, (_match, included: string) => readFileSync(new URL(included, import.meta.url), 'utf8').trim())
}

/** Replaces `/*LIMIT:NAME*\/ 123` with the current value of limits.NAME (each one must be known). */
function withLimits(source: string, file: string): string {
  const table = limits as unknown as Record<string, unknown>
  return source.replace(/\/\*LIMIT:([A-Z_]+)\*\/ ?\d+/g, (_match, name: string) => {
    const value = table[name]
    if (typeof value !== 'number') throw new Error(`${file}: unknown limit ${name}`)
    return String(value)
  })
}

/** Replaces the one occurrence of a placeholder, whatever `$` patterns the value holds. */
function replaceOnce(source: string, placeholder: string | RegExp, value: string, file: string): string {
  let count = 0
  const out = source.replace(placeholder instanceof RegExp ? placeholder : new RegExp(placeholder.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'g'), () => {
    count++
    return value
  })
  if (count !== 1) throw new Error(`${file}: expected one ${String(placeholder)}, found ${count}`)
  return out
}

/**
 * The overlay of the isolated origin. reviewerOrigin (the gateway's origin, e.g.
 * `https://gw.example`) is the only origin overlay.js talks to; it is written into the served file.
 */
export function createSiteAssets(reviewerOrigin: string): SiteAssets {
  let origin: string
  try {
    origin = new URL(reviewerOrigin).origin
  } catch {
    throw new Error(`createSiteAssets: ${JSON.stringify(reviewerOrigin)} is not an origin`)
  }
  if (origin !== reviewerOrigin || origin === 'null') throw new Error(`createSiteAssets: ${JSON.stringify(reviewerOrigin)} is not an origin (expected ${origin})`)
  const finderPath = createRequire(import.meta.url).resolve('@medv/finder')
  const files = new Map<string, StaticAsset>([
    ['capture.js', staticAsset(withLimits(readUiFile('capture.js'), 'capture.js'), JS)],
    ['overlay.js', staticAsset(replaceOnce(readUiFile('overlay.js'), /(['"])__REVIEWER_ORIGIN__\1/g, JSON.stringify(origin), 'overlay.js'), JS)],
    ['finder.js', staticAsset(readFileSync(finderPath), JS)],
  ])
  return {
    // finder.js is preloaded: overlay.js imports it, which the browser would discover only after fetching overlay.js.
    headTags: `<script src="${SITE_RESERVED_PREFIX}capture.js"></script><link rel="modulepreload" href="${SITE_RESERVED_PREFIX}finder.js"><script type="module" src="${SITE_RESERVED_PREFIX}overlay.js"></script>`,
    get: (name) => files.get(name),
  }
}

/** JSON that is inert inside <script type="application/json">: no `<`, `>`, `&`, U+2028/9 left as is. */
export function scriptSafeJson(value: unknown): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

function pageTitle(view: ReviewerPageView): string {
  if (view.source.kind === 'zip') return `Review of ${view.source.entryFile}`
  let host = view.source.url
  try {
    host = new URL(view.source.url).host
  } catch {
    // keep the address as given
  }
  return `Review of ${host}`
}

/** Limits the page applies before sending (the server checks them again). */
const PAGE_LIMITS = {
  maxPins: limits.REVIEW_MAX_PINS,
  commentMaxChars: limits.REVIEW_COMMENT_MAX_CHARS,
  textMaxChars: limits.PIN_TEXT_MAX_CHARS,
  selectorMaxChars: limits.PIN_SELECTOR_MAX_CHARS,
  maxConsoleEntries: limits.REVIEW_MAX_CONSOLE_ENTRIES,
  consoleMessageMaxChars: limits.CONSOLE_MESSAGE_MAX_CHARS,
}

/** The modules reviewer.js imports (each preloaded by reviewer.html, so they load in parallel). */
const REVIEWER_MODULES = ['reviewer-page.js', 'reviewer-messages.js', 'reviewer-frame.js', 'reviewer-console.js', 'reviewer-draft.js', 'reviewer-pins.js', 'reviewer-submit.js']

/**
 * The reviewer page: render(view) is the HTML of one review (the view as inert JSON in
 * `<script type="application/json" id="review-config">`, read by reviewer-page.js); get() serves
 * reviewer.js, the modules it imports (REVIEWER_MODULES) and reviewer.css. The route sends the page
 * with its CSP and `Referrer-Policy: no-referrer`.
 */
export function createReviewerAssets(): ReviewerAssets {
  const template = readUiFile('reviewer.html')
  for (const placeholder of ['{{TITLE}}', '{{FRAME_URL}}', '"{{CONFIG}}"']) {
    if (template.split(placeholder).length !== 2) throw new Error(`reviewer.html: expected one ${placeholder}`)
  }
  for (const name of REVIEWER_MODULES) {
    if (!template.includes(`<link rel="modulepreload" href="/reviews/assets/${name}">`)) throw new Error(`reviewer.html: expected a modulepreload of ${name}`)
  }
  const files = new Map<string, StaticAsset>([
    ['reviewer.js', staticAsset(readUiFile('reviewer.js'), JS)],
    ...REVIEWER_MODULES.map((name): [string, StaticAsset] => [name, staticAsset(readUiFile(name), JS)]),
    ['reviewer.css', staticAsset(readUiFile('reviewer.css'), CSS)],
  ])
  return {
    render(view) {
      const values: Record<string, string> = {
        '{{TITLE}}': escapeHtml(pageTitle(view)),
        // In the HTML so the site starts loading with the page, not after reviewer.js has run.
        '{{FRAME_URL}}': escapeHtml(view.frameUrl),
        '"{{CONFIG}}"': scriptSafeJson({ ...view, limits: PAGE_LIMITS }),
      }
      // One pass: a value that happens to contain a placeholder is not replaced again.
      return template.replace(/\{\{TITLE\}\}|\{\{FRAME_URL\}\}|"\{\{CONFIG\}\}"/g, (match) => values[match] as string)
    },
    get: (name) => files.get(name),
  }
}
