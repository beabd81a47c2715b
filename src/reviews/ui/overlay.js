// overlay.js: the review overlay inside every HTML page of a site under review (a module script,
// injected right after capture.js by the isolated origin at /__agent_gateway__/overlay.js). It talks
// to the reviewer page (the parent frame, on the gateway's origin) by postMessage only, with an exact
// target origin both ways, and draws in a closed shadow root so the site's CSS cannot reach it.
//
// Parent → overlay (accepted only from window.parent with origin REVIEWER_ORIGIN):
//   {protocol, type: 'pick'}                     enter pick mode (answered with {type: 'picking'})
//   {protocol, type: 'cancel'}                   leave pick mode
//   {protocol, type: 'pins', pins: [{id, n, selector, xpath?, severity}]}   numbered markers
//   {protocol, type: 'focus', id}                scroll a pin's element into view and flash it
//   {protocol, type: 'hello'}                    send 'ready' (and the console so far) again
// Overlay → parent:
//   {protocol, type: 'ready', page: {url, title}}            on load, hashchange, popstate, hello
//   {protocol, type: 'picking'}                              pick mode is on
//   {protocol, type: 'picked', pin: {selector, xpath, tag, text, box, point, viewport, scroll, page, userAgent}}
//   {protocol, type: 'cancelled'}                            pick mode ended without a pick (Escape)
//   {protocol, type: 'console', entries: [{level, message, source?, at}]}
// The site's scripts share this realm: everything here is best effort against a hostile page, and
// the parent validates every message it gets.
import { finder, attr as finderAttr, className as finderClassName } from '/__agent_gateway__/finder.js'

const PROTOCOL = 'agent-gateway-review/1'
/** Replaced with the JSON-encoded reviewer origin when the file is served (src/reviews/ui/assets.ts). */
const REVIEWER_ORIGIN = '__REVIEWER_ORIGIN__'
const CONSOLE_KEY = Symbol.for('agent-gateway-review/console')
const SELECTOR_MAX = 2000
const TEXT_MAX = 200
const TITLE_MAX = 500
const URL_MAX = 4096
const MAX_PINS = 200
const CONSOLE_MAX = 200
const SEVERITIES = ['blocking', 'important', 'suggestion']
const SEVERITY_COLOURS = { blocking: '#c01c28', important: '#c64600', suggestion: '#1a5fb4' }

const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value)

/* @include clean.js */

function post(message) {
  window.parent.postMessage({ protocol: PROTOCOL, ...message }, REVIEWER_ORIGIN)
}

function pageInfo() {
  return { url: clean(location.pathname + location.search + location.hash, URL_MAX), title: clean(document.title, TITLE_MAX) }
}

// ---- selectors -------------------------------------------------------------------------------

/** Class names of CSS-in-JS and utility frameworks: generated or too generic to name an element. */
const UNSTABLE_CLASS =
  /^(css|sc|jsx|emotion|styled|svelte|astro|chakra|mui|jss|tw|ng|v|data-v)-|^_|^(flex|grid|block|inline|hidden|container|relative|absolute|fixed|sticky|static|contents|group|peer)$|^(text|bg|border|rounded|shadow|font|leading|tracking|items|justify|content|self|place|gap|space|divide|ring|outline|opacity|transition|duration|ease|delay|animate|cursor|select|overflow|overscroll|inset|top|right|bottom|left|z|order|col|row|basis|grow|shrink|w|h|min|max|size|p|px|py|pt|pr|pb|pl|m|mx|my|mt|mr|mb|ml|sm|md|lg|xl|hover|focus|active|dark)-/
/** Attributes that name an element on purpose (tests, forms). */
const PREFERRED_ATTRS = ['id', 'data-testid', 'data-test-id', 'data-test', 'data-cy', 'data-qa', 'name']

function hasControlCharacter(value) {
  for (let i = 0; i < value.length; i++) if (value.charCodeAt(i) < 0x20) return true
  return false
}
const stableValue = (value) => value.length > 0 && value.length <= 100 && !hasControlCharacter(value)
/** Ids frameworks generate (React `:r1:`, `ember123`, long hex or digit runs). */
const generatedId = (value) => /^:|^(ember|react|radix|headlessui|mui|rc|vue)[-_:]?|\d{3,}|[0-9a-f]{8,}/i.test(value)

const finderOptions = {
  timeoutMs: 500,
  idName: (name) => stableValue(name) && !generatedId(name) && /^[A-Za-z][\w-]*$/.test(name),
  className: (name) => !UNSTABLE_CLASS.test(name) && finderClassName(name),
  attr: (name, value) => {
    if (PREFERRED_ATTRS.includes(name) && name !== 'id') return stableValue(value) && !generatedId(value)
    return finderAttr(name, value)
  },
}

function unique(selector, element) {
  try {
    const all = document.querySelectorAll(selector)
    return all.length === 1 && all[0] === element
  } catch {
    return false
  }
}

/** nth-of-type path from <html>: always unique, used when finder fails. */
function structuralSelector(element) {
  const parts = []
  for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
    const tag = node.localName
    if (node === document.documentElement) {
      parts.unshift(':root')
      break
    }
    let index = 1
    for (let sibling = node.previousElementSibling; sibling; sibling = sibling.previousElementSibling) if (sibling.localName === tag) index++
    parts.unshift(`${CSS.escape(tag)}:nth-of-type(${index})`)
  }
  return parts.join(' > ')
}

function selectorOf(element) {
  if (element === document.documentElement) return 'html'
  if (element === document.body) return 'body'
  const tag = CSS.escape(element.localName)
  // An attribute the page's authors put there to name the element wins when it is unique.
  for (const name of PREFERRED_ATTRS) {
    const value = element.getAttribute(name)
    if (value === null || !stableValue(value) || generatedId(value)) continue
    const candidate = name === 'id' ? `#${CSS.escape(value)}` : `${tag}[${name}="${CSS.escape(value)}"]`
    if (unique(candidate, element)) return candidate
  }
  try {
    const found = finder(element, finderOptions)
    if (found.length <= SELECTOR_MAX && unique(found, element)) return found
  } catch {
    // finder gives up on some documents (timeouts, detached roots): fall back to the structure
  }
  return structuralSelector(element)
}

function xpathOf(element) {
  const parts = []
  for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
    const html = node.namespaceURI === 'http://www.w3.org/1999/xhtml'
    const name = node.localName
    let index = 1
    for (let sibling = node.previousElementSibling; sibling; sibling = sibling.previousElementSibling) {
      if (sibling.localName === name && (sibling.namespaceURI === 'http://www.w3.org/1999/xhtml') === html) index++
    }
    parts.unshift(html ? `${name}[${index}]` : `*[local-name()='${name.replace(/'/g, '')}'][${index}]`)
  }
  return `/${parts.join('/')}`
}

function textOf(element) {
  // biome-ignore lint/performance/useDomNodeTextContent: innerText is the visible text (no script or hidden content) the reviewer saw
  const raw = typeof element.innerText === 'string' ? element.innerText : (element.textContent ?? '')
  // Collapse before cutting, but never scan more than a bounded prefix of a huge element.
  return clean(
    raw
      .slice(0, TEXT_MAX * 20)
      .replace(/\s+/g, ' ')
      .trim(),
    TEXT_MAX,
  )
}

function resolve(selector, xpath) {
  let element = null
  try {
    element = document.querySelector(selector)
  } catch {
    element = null
  }
  if (!element && xpath) {
    try {
      element = document.evaluate(xpath, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue
    } catch {
      element = null
    }
  }
  return element instanceof Element && element !== host ? element : null
}

// ---- drawing ---------------------------------------------------------------------------------

const STYLE = `
:host { all: initial; }
.layer { position: fixed; inset: 0; pointer-events: none; overflow: hidden; font: 600 12px/1 system-ui, sans-serif; }
.hl { position: absolute; left: 0; top: 0; box-sizing: border-box; border: 2px solid #1a5fb4; background: rgba(53, 132, 228, 0.15); border-radius: 2px; display: none; }
.hl.on { display: block; }
.hl-label { position: absolute; left: -2px; bottom: 100%; margin-bottom: 2px; padding: 3px 6px; background: #1a5fb4; color: #fff; border-radius: 3px; white-space: nowrap; max-width: 60vw; overflow: hidden; text-overflow: ellipsis; }
.hl-label.below { bottom: auto; top: 100%; margin: 2px 0 0; }
.marker { position: absolute; left: 0; top: 0; width: 22px; height: 22px; border-radius: 50%; color: #fff; display: flex; align-items: center; justify-content: center; box-shadow: 0 0 0 2px #fff, 0 1px 4px rgba(0,0,0,.5); }
.marker[hidden] { display: none; }
.outline { position: absolute; left: 0; top: 0; box-sizing: border-box; border: 3px solid #e5a50a; border-radius: 3px; display: none; }
.outline.on { display: block; animation: flash 0.4s ease-in-out 4 alternate; }
@keyframes flash { from { opacity: 1; } to { opacity: 0.2; } }
@media (prefers-reduced-motion: reduce) { .outline.on { animation: none; } }
.banner { position: absolute; left: 50%; bottom: 12px; transform: translateX(-50%); max-width: calc(100% - 24px); box-sizing: border-box; padding: 8px 12px; border-radius: 6px; background: #241f31; color: #fff; font-weight: 500; line-height: 1.3; text-align: center; display: none; }
.banner.on { display: block; }
`

let host = null
let layer = null
let highlight = null
let highlightLabel = null
let outline = null
let banner = null
const markerLayer = document.createElement('div')

function mount() {
  host = document.createElement('agent-gateway-overlay')
  // Inline !important beats any author stylesheet; `all: initial` first, then what we need.
  for (const [property, value] of [
    ['all', 'initial'],
    ['position', 'fixed'],
    ['inset', '0'],
    ['display', 'block'],
    ['z-index', '2147483647'],
    ['pointer-events', 'none'],
    ['contain', 'strict'],
  ]) {
    host.style.setProperty(property, value, 'important')
  }
  host.setAttribute('aria-hidden', 'true')
  const root = host.attachShadow({ mode: 'closed' })
  try {
    const sheet = new CSSStyleSheet()
    sheet.replaceSync(STYLE)
    root.adoptedStyleSheets = [sheet]
  } catch {
    const style = document.createElement('style')
    style.textContent = STYLE
    root.append(style)
  }
  layer = document.createElement('div')
  layer.className = 'layer'
  highlight = document.createElement('div')
  highlight.className = 'hl'
  highlightLabel = document.createElement('div')
  highlightLabel.className = 'hl-label'
  highlight.append(highlightLabel)
  outline = document.createElement('div')
  outline.className = 'outline'
  banner = document.createElement('div')
  banner.className = 'banner'
  banner.textContent = 'Click an element to pin it. Keyboard: arrow keys move, Enter pins, Escape cancels.'
  markerLayer.className = 'markers'
  layer.append(markerLayer, outline, highlight, banner)
  root.append(layer)
  document.documentElement.append(host)
}

function ensureMounted() {
  if (host && !host.isConnected) document.documentElement.append(host)
}

function place(box, rect) {
  box.style.transform = `translate(${rect.left}px, ${rect.top}px)`
  box.style.width = `${Math.max(rect.width, 0)}px`
  box.style.height = `${Math.max(rect.height, 0)}px`
}

function describeElement(element) {
  let label = element.localName
  if (element.id) label += `#${element.id}`
  const classes = Array.from(element.classList).slice(0, 2)
  if (classes.length > 0) label += `.${classes.join('.')}`
  return clean(label, 80)
}

// ---- pick mode -------------------------------------------------------------------------------

let picking = false
let current = null

function setCurrent(element, scroll) {
  if (!(element instanceof Element) || element === host) return
  current = element
  if (scroll) element.scrollIntoView({ block: 'nearest', inline: 'nearest' })
  drawHighlight()
}

function drawHighlight() {
  if (!picking || !current?.isConnected) {
    highlight.classList.remove('on')
    return
  }
  const rect = current.getBoundingClientRect()
  place(highlight, rect)
  highlightLabel.textContent = describeElement(current)
  highlightLabel.classList.toggle('below', rect.top < 24)
  highlight.classList.add('on')
}

function startPick() {
  ensureMounted()
  picking = true
  const active = document.activeElement
  current = active instanceof Element && active !== document.documentElement && document.body?.contains(active) ? active : document.body
  banner.classList.add('on')
  drawHighlight()
}

function stopPick() {
  picking = false
  current = null
  banner.classList.remove('on')
  highlight.classList.remove('on')
}

const SKIPPED_TAGS = new Set(['head', 'script', 'style', 'template', 'noscript', 'link', 'meta', 'title', 'base'])

function visible(element) {
  if (element.getClientRects().length === 0) return false
  const style = getComputedStyle(element)
  return style.visibility !== 'hidden' && style.visibility !== 'collapse'
}

function walker() {
  return document.createTreeWalker(document.body, NodeFilter.SHOW_ELEMENT, {
    acceptNode: (node) => {
      if (node === host || SKIPPED_TAGS.has(node.localName)) return NodeFilter.FILTER_REJECT
      return visible(node) ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_SKIP
    },
  })
}

function move(key) {
  const body = document.body
  if (!body) return
  const from = current && body.contains(current) ? current : body
  const walk = walker()
  walk.currentNode = from
  let next = null
  if (key === 'ArrowDown') next = walk.nextNode()
  else if (key === 'ArrowUp') next = walk.previousNode()
  else if (key === 'ArrowLeft') next = from === body ? null : from.parentElement
  else if (key === 'ArrowRight') next = walk.firstChild()
  if (next) setCurrent(next, true)
}

function pick(element, clientX, clientY) {
  stopPick()
  try {
    post({ type: 'picked', pin: describePick(element, clientX, clientY) })
  } catch {
    // A page that broke what we rely on (CSS.escape, getBoundingClientRect…): end pick mode cleanly.
    post({ type: 'cancelled' })
  }
}

function describePick(element, clientX, clientY) {
  const rect = element.getBoundingClientRect()
  const fraction = (value, start, size) => (size > 0 && Number.isFinite(value) ? Math.min(1, Math.max(0, (value - start) / size)) : 0.5)
  const point = clientX === undefined ? { x: 0.5, y: 0.5 } : { x: fraction(clientX, rect.left, rect.width), y: fraction(clientY, rect.top, rect.height) }
  const round = (value) => Math.round(value * 100) / 100
  return {
    selector: selectorOf(element),
    xpath: xpathOf(element),
    tag: clean(element.localName, 64),
    text: textOf(element),
    box: { x: round(rect.left + window.scrollX), y: round(rect.top + window.scrollY), width: round(rect.width), height: round(rect.height) },
    point,
    viewport: { width: Math.round(window.innerWidth), height: Math.round(window.innerHeight) },
    scroll: { x: round(window.scrollX), y: round(window.scrollY) },
    page: pageInfo(),
    userAgent: clean(navigator.userAgent, 1000),
  }
}

/** The element an event happened on, as the page sees it (a site's shadow host for its shadow content). */
function eventElement(event) {
  const target = event.target
  if (target === host) return null
  if (target instanceof Element) return target
  return target instanceof Node ? target.parentElement : null
}

function block(event) {
  event.preventDefault()
  event.stopImmediatePropagation()
}

// Capture phase on window: before any handler of the page's elements (only the page's own capture
// listeners on window registered earlier still run first).
const options = { capture: true }
window.addEventListener(
  'mousemove',
  (event) => {
    if (!picking) return
    const element = eventElement(event)
    if (element && element !== current) setCurrent(element, false)
  },
  options,
)
for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'dblclick', 'auxclick']) {
  window.addEventListener(
    type,
    (event) => {
      if (picking) block(event)
    },
    options,
  )
}
for (const type of ['touchstart', 'touchend']) {
  // Not cancelled (that would swallow the click that picks), only hidden from the page.
  window.addEventListener(
    type,
    (event) => {
      if (picking) event.stopImmediatePropagation()
    },
    options,
  )
}
window.addEventListener(
  'click',
  (event) => {
    if (!picking) return
    block(event)
    const element = eventElement(event)
    if (element) pick(element, event.clientX, event.clientY)
  },
  options,
)
window.addEventListener(
  'focusin',
  (event) => {
    if (!picking) return
    const element = eventElement(event)
    if (element && document.body?.contains(element)) setCurrent(element, false)
  },
  options,
)
const PICK_KEYS = new Set(['ArrowDown', 'ArrowUp', 'ArrowLeft', 'ArrowRight', 'Enter', 'Escape'])
window.addEventListener(
  'keydown',
  (event) => {
    if (!picking || !PICK_KEYS.has(event.key) || event.altKey || event.ctrlKey || event.metaKey) return
    block(event)
    if (event.key === 'Escape') {
      stopPick()
      post({ type: 'cancelled' })
    } else if (event.key === 'Enter') {
      if (current?.isConnected) pick(current)
    } else {
      move(event.key)
    }
  },
  options,
)
for (const type of ['keyup', 'keypress']) {
  window.addEventListener(
    type,
    (event) => {
      if (picking && PICK_KEYS.has(event.key)) block(event)
    },
    options,
  )
}

// ---- markers ---------------------------------------------------------------------------------

/** @type {{id: string, n: number, selector: string, xpath: string | undefined, severity: string, element: Element | null, marker: HTMLElement}[]} */
let pins = []
let frameRequested = false
let resolveNeeded = true
/** Selectors are looked up again after DOM changes, at most every RESOLVE_EVERY_MS (pages that animate mutate constantly). */
const RESOLVE_EVERY_MS = 200
let lastResolve = 0
let resolveTimer = 0
let flashTimer = 0
/** The element being flashed by 'focus'. */
let flashed = null

function scheduleDraw(reresolve) {
  if (reresolve) resolveNeeded = true
  if (frameRequested) return
  frameRequested = true
  requestAnimationFrame(drawAll)
}

function drawAll() {
  frameRequested = false
  ensureMounted()
  if (pins.length === 0 && !picking && !flashed) return
  const now = performance.now()
  const reresolve = resolveNeeded && now - lastResolve >= RESOLVE_EVERY_MS
  if (reresolve) {
    resolveNeeded = false
    lastResolve = now
  } else if (resolveNeeded && resolveTimer === 0) {
    resolveTimer = setTimeout(() => {
      resolveTimer = 0
      scheduleDraw(false)
    }, RESOLVE_EVERY_MS)
  }
  const width = window.innerWidth
  const height = window.innerHeight
  for (const pin of pins) {
    if (reresolve || !pin.element?.isConnected) pin.element = resolve(pin.selector, pin.xpath)
    const rect = pin.element?.getBoundingClientRect()
    if (!rect || (rect.width === 0 && rect.height === 0) || rect.bottom < 0 || rect.top > height || rect.right < 0 || rect.left > width) {
      pin.marker.hidden = true
      continue
    }
    const x = Math.min(Math.max(rect.left - 11, 2), width - 24)
    const y = Math.min(Math.max(rect.top - 11, 2), height - 24)
    pin.marker.style.transform = `translate(${x}px, ${y}px)`
    pin.marker.hidden = false
  }
  drawHighlight()
  if (flashed?.isConnected && outline.classList.contains('on')) place(outline, flashed.getBoundingClientRect())
}

function setPins(list) {
  if (!Array.isArray(list)) return
  const next = []
  for (const item of list.slice(0, MAX_PINS)) {
    if (!isObject(item) || typeof item.id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(item.id)) continue
    if (typeof item.selector !== 'string' || item.selector.length === 0 || item.selector.length > SELECTOR_MAX) continue
    const n = Number.isInteger(item.n) && item.n > 0 && item.n < 1000 ? item.n : next.length + 1
    const xpath = typeof item.xpath === 'string' && item.xpath.length <= SELECTOR_MAX ? item.xpath : undefined
    const severity = SEVERITIES.includes(item.severity) ? item.severity : 'important'
    const marker = document.createElement('div')
    marker.className = 'marker'
    marker.textContent = String(n)
    marker.style.background = SEVERITY_COLOURS[severity]
    marker.hidden = true
    next.push({ id: item.id, n, selector: item.selector, xpath, severity, element: null, marker })
  }
  pins = next
  markerLayer.replaceChildren(...pins.map((pin) => pin.marker))
  scheduleDraw(true)
}

function focusPin(id) {
  const pin = pins.find((candidate) => candidate.id === id)
  if (!pin) return
  pin.element = resolve(pin.selector, pin.xpath)
  if (!pin.element) return
  const smooth = !window.matchMedia('(prefers-reduced-motion: reduce)').matches
  pin.element.scrollIntoView({ block: 'center', inline: 'nearest', behavior: smooth ? 'smooth' : 'auto' })
  flashed = pin.element
  outline.classList.remove('on')
  // restart the animation
  void outline.offsetWidth
  place(outline, pin.element.getBoundingClientRect())
  outline.classList.add('on')
  clearTimeout(flashTimer)
  flashTimer = setTimeout(() => {
    outline.classList.remove('on')
    flashed = null
  }, 2500)
  scheduleDraw(false)
}

// ---- start -----------------------------------------------------------------------------------

function start() {
  mount()
  window.addEventListener('scroll', () => scheduleDraw(false), { capture: true, passive: true })
  window.addEventListener('resize', () => scheduleDraw(false), { passive: true })
  new MutationObserver(() => scheduleDraw(true)).observe(document.documentElement, { subtree: true, childList: true, attributes: true, characterData: true })

  window.addEventListener('message', (event) => {
    if (event.origin !== REVIEWER_ORIGIN || event.source !== window.parent) return
    const message = event.data
    if (!isObject(message) || message.protocol !== PROTOCOL) return
    switch (message.type) {
      case 'pick':
        startPick()
        post({ type: 'picking' })
        break
      case 'cancel':
        stopPick()
        break
      case 'pins':
        setPins(message.pins)
        break
      case 'focus':
        if (typeof message.id === 'string') focusPin(message.id)
        break
      case 'hello':
        post({ type: 'ready', page: pageInfo() })
        break
    }
  })
  const announce = () => post({ type: 'ready', page: pageInfo() })
  window.addEventListener('hashchange', announce)
  window.addEventListener('popstate', announce)
  announce()

  // Console entries: what capture.js holds so far, then new ones in small batches.
  const subscribe = window[CONSOLE_KEY]
  if (typeof subscribe === 'function') {
    let queue = []
    let timer = 0
    let first = true
    subscribe((entries) => {
      if (!Array.isArray(entries)) return
      if (first) {
        first = false
        post({ type: 'console', entries: entries.slice(0, CONSOLE_MAX) })
        return
      }
      queue.push(...entries)
      if (timer === 0) {
        timer = setTimeout(() => {
          timer = 0
          const batch = queue
          queue = []
          post({ type: 'console', entries: batch })
        }, 100)
      }
    })
  }
}

// Only in the frame the reviewer page holds (not opened on its own, not in the site's own frames).
if (window.parent !== window && window.parent === window.top) start()
