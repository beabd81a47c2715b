// reviewer.js: the reviewer page (src/reviews/ui/reviewer.html, a module script; plain ES2020, no
// build step). It shows the site under review in a sandboxed iframe on the review's isolated origin
// and talks to the overlay inside it (overlay.js) by postMessage only:
//
// Page → overlay (target origin: config.siteOrigin):
//   {protocol, type: 'pick'} | {protocol, type: 'cancel'} | {protocol, type: 'hello'}
//   {protocol, type: 'pins', pins: [{id, n, selector, xpath?, severity}]}   (the pins of the frame's page)
//   {protocol, type: 'focus', id}
// Overlay → page (accepted only with event.origin === siteOrigin and event.source === the frame):
//   {protocol, type: 'ready', page: {url, title}} | {protocol, type: 'picking'} | {protocol, type: 'cancelled'}
//   {protocol, type: 'picked', pin: {selector, xpath, tag, text, box, point, viewport, scroll, page, userAgent}}
//   {protocol, type: 'console', entries: [{level, message, source?, at}]}
// The site's own scripts can post to this page too: every field is checked and capped, 'picked' is
// taken only while the reviewer is adding a pin, and a pin needs the reviewer's comment to be sent.
// The capability (in this page's address and in submitUrl) never goes to the frame: no URL
// parameter, no message, no referrer (the page and the iframe say no-referrer), no window.name.

const PROTOCOL = 'agent-gateway-review/1'
const SEVERITIES = ['blocking', 'important', 'suggestion']
const SEVERITY_LABELS = { blocking: 'Blocking — must be fixed', important: 'Important — should be fixed', suggestion: 'Suggestion — nice to have' }
const SEVERITY_SHORT = { blocking: 'Blocking', important: 'Important', suggestion: 'Suggestion' }
const DEFAULT_LIMITS = {
  maxPins: 200,
  commentMaxChars: 10000,
  textMaxChars: 200,
  selectorMaxChars: 2000,
  maxConsoleEntries: 200,
  consoleMessageMaxChars: 2000,
}
const PAGE_URL_MAX = 4096
const TITLE_MAX = 500
const USER_AGENT_MAX = 1000
const SOURCE_MAX = 4096
const PICK_ANSWER_MS = 3000
const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/

const byId = (id) => document.getElementById(id)
const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value)
const finite = (value) => typeof value === 'number' && Number.isFinite(value)

/** A well-formed string without NUL (the gateway refuses both), at most max UTF-16 units. */
function clean(value, max) {
  let out = typeof value === 'string' ? value : ''
  out = typeof out.toWellFormed === 'function' ? out.toWellFormed() : out.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD')
  out = out.split('\0').join('\uFFFD')
  if (out.length > max) {
    out = out.slice(0, max)
    if (/[\uD800-\uDBFF]$/.test(out)) out = out.slice(0, -1)
  }
  return out
}

function readConfig() {
  try {
    const value = JSON.parse(byId('review-config')?.textContent ?? '')
    if (!isObject(value) || typeof value.reviewId !== 'string' || typeof value.siteOrigin !== 'string' || typeof value.submitUrl !== 'string') return null
    if (!isObject(value.source) || (value.source.kind !== 'zip' && value.source.kind !== 'url')) return null
    const origin = new URL(value.siteOrigin).origin
    if (origin !== value.siteOrigin || origin === location.origin) return null
    if (new URL(value.frameUrl).origin !== origin) return null
    if (value.snapshotUrl !== null && value.snapshotUrl !== undefined && new URL(value.snapshotUrl).origin !== origin) return null
    return value
  } catch {
    return null
  }
}

const config = readConfig()
const limits = { ...DEFAULT_LIMITS, ...(isObject(config?.limits) ? config.limits : {}) }

const frame = byId('site-frame')
const live = byId('live')
const problemBox = byId('problem')
const addPinButton = byId('add-pin')
const pinList = byId('pins')
const overall = byId('overall-comment')
const submitButton = byId('submit')
const dialog = byId('confirm')

const state = {
  comment: '',
  /** ReviewPin objects, in the order shown (n = index + 1). */
  pins: [],
  console: [],
  consoleKeys: new Set(),
  /** 'off' | 'requested' (waiting for the overlay's 'picking') | 'active' */
  pick: 'off',
  pickTimer: 0,
  submitting: false,
  done: false,
  locked: false,
  /** Pins shown as markers once submitted. */
  donePins: [],
  /** The frame's current page as pins name it (mapped like page.url), or null before 'ready'. */
  framePage: null,
  pendingFocus: null,
  snapshot: false,
}
/** id → the pin's list item and controls. */
const views = new Map()

// ---- small helpers ---------------------------------------------------------------------------

let announceTimer = 0
function announce(text) {
  clearTimeout(announceTimer)
  live.textContent = ''
  announceTimer = setTimeout(() => {
    live.textContent = text
  }, 60)
}

function showProblem(lines) {
  problemBox.replaceChildren(
    ...lines.map((line) => {
      const p = document.createElement('p')
      p.textContent = line
      return p
    }),
  )
  problemBox.hidden = false
}

function hideProblem() {
  problemBox.hidden = true
  problemBox.replaceChildren()
}

function hiddenText(text) {
  const span = document.createElement('span')
  span.className = 'visually-hidden'
  span.textContent = text
  return span
}

function send(message) {
  frame.contentWindow?.postMessage({ protocol: PROTOCOL, ...message }, config.siteOrigin)
}

function newPinId() {
  const bytes = crypto.getRandomValues(new Uint8Array(24))
  let id = 'p_'
  for (const byte of bytes) {
    if (byte < 252 && id.length < 14) id += (byte % 36).toString(36)
  }
  while (id.length < 14) id += Math.floor(Math.random() * 36).toString(36)
  return id
}

/** page.url of a pin from the overlay's location.pathname + search + hash. */
function pageUrlOf(path) {
  if (typeof path !== 'string' || !path.startsWith('/') || path.startsWith('//') || path.length > PAGE_URL_MAX) return null
  if (config.source.kind !== 'url') return clean(path, PAGE_URL_MAX)
  // Pins on the screenshot name the live page it shows (their point says where on it).
  if (path.startsWith('/__agent_gateway__/snapshot')) return clean(config.source.url, PAGE_URL_MAX)
  try {
    const base = new URL(config.source.url)
    const url = new URL(path, base)
    if (url.origin !== base.origin) return null
    return url.href.length <= PAGE_URL_MAX ? clean(url.href, PAGE_URL_MAX) : null
  } catch {
    return null
  }
}

/** Where the frame shows a page named by page.url. */
function frameUrlOf(pageUrl) {
  try {
    if (config.source.kind === 'url') {
      const url = new URL(pageUrl)
      return config.siteOrigin + url.pathname + url.search + url.hash
    }
    return new URL(pageUrl, config.siteOrigin).origin === config.siteOrigin ? config.siteOrigin + pageUrl : null
  } catch {
    return null
  }
}

const pageKey = (url) => (typeof url === 'string' ? url.split('#')[0] : '')

function isoOrNow(value) {
  return typeof value === 'string' && ISO_DATE.test(value) && !Number.isNaN(Date.parse(value)) ? value : new Date().toISOString()
}

// ---- validation of what comes from the frame and from storage --------------------------------

/** A ReviewPin built from untrusted fields (the overlay's message, a stored draft), or null. */
function sanitizePin(raw) {
  if (!isObject(raw)) return null
  if (typeof raw.id !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(raw.id)) return null
  if (!SEVERITIES.includes(raw.severity)) return null
  if (typeof raw.selector !== 'string' || raw.selector.length === 0 || raw.selector.length > limits.selectorMaxChars) return null
  const selector = clean(raw.selector, limits.selectorMaxChars)
  const xpath = typeof raw.xpath === 'string' && raw.xpath.length > 0 && raw.xpath.length <= limits.selectorMaxChars ? clean(raw.xpath, limits.selectorMaxChars) : undefined
  const tag = typeof raw.tag === 'string' ? clean(raw.tag.toLowerCase(), 64) : ''
  if (tag.length === 0) return null
  const b = raw.box
  const coordinate = (value) => finite(value) && Math.abs(value) <= 1e9
  if (!isObject(b) || !coordinate(b.x) || !coordinate(b.y) || !coordinate(b.width) || !coordinate(b.height) || b.width < 0 || b.height < 0) return null
  const v = raw.viewport
  const size = (value) => finite(value) && value >= 0 && value <= 100000
  if (!isObject(v) || !size(v.width) || !size(v.height)) return null
  const s = raw.scroll
  if (!isObject(s) || !coordinate(s.x) || !coordinate(s.y)) return null
  if (!isObject(raw.page) || typeof raw.page.url !== 'string' || raw.page.url.length > PAGE_URL_MAX) return null
  const p = raw.point
  const fraction = (value) => Math.min(1, Math.max(0, value))
  const pin = {
    id: raw.id,
    comment: clean(raw.comment, limits.commentMaxChars),
    severity: raw.severity,
    selector,
  }
  if (xpath !== undefined) pin.xpath = xpath
  pin.tag = tag
  pin.text = clean(raw.text, limits.textMaxChars)
  pin.box = { x: b.x, y: b.y, width: b.width, height: b.height }
  if (isObject(p) && finite(p.x) && finite(p.y)) pin.point = { x: fraction(p.x), y: fraction(p.y) }
  pin.viewport = { width: Math.round(v.width), height: Math.round(v.height) }
  pin.scroll = { x: s.x, y: s.y }
  pin.page = { url: clean(raw.page.url, PAGE_URL_MAX), title: clean(raw.page.title, TITLE_MAX) }
  pin.userAgent = clean(typeof raw.userAgent === 'string' ? raw.userAgent : navigator.userAgent, USER_AGENT_MAX)
  pin.createdAt = isoOrNow(raw.createdAt)
  return pin
}

function sanitizeConsoleEntry(raw) {
  if (!isObject(raw) || (raw.level !== 'error' && raw.level !== 'warning') || typeof raw.message !== 'string') return null
  const entry = { level: raw.level, message: clean(raw.message, limits.consoleMessageMaxChars) }
  if (typeof raw.source === 'string' && raw.source.length > 0) entry.source = clean(raw.source, SOURCE_MAX)
  entry.at = isoOrNow(raw.at)
  return entry
}

// ---- draft -----------------------------------------------------------------------------------

const draftKey = config ? `agent-gateway-review:${config.reviewId}` : ''
let draftTimer = 0
let draftWarned = false

function saveDraft() {
  clearTimeout(draftTimer)
  draftTimer = 0
  if (state.done || state.locked) return
  try {
    localStorage.setItem(draftKey, JSON.stringify({ version: 1, comment: state.comment, pins: state.pins, console: state.console, savedAt: new Date().toISOString() }))
  } catch {
    if (!draftWarned) {
      draftWarned = true
      announce('This browser does not let the page keep a draft. Do not reload before you submit.')
    }
  }
}

function saveDraftSoon() {
  clearTimeout(draftTimer)
  draftTimer = setTimeout(saveDraft, 400)
}

function clearDraft() {
  clearTimeout(draftTimer)
  try {
    localStorage.removeItem(draftKey)
  } catch {
    // nothing kept
  }
}

function loadDraft() {
  let draft
  try {
    draft = JSON.parse(localStorage.getItem(draftKey) ?? 'null')
  } catch {
    return false
  }
  if (!isObject(draft) || draft.version !== 1) return false
  state.comment = clean(draft.comment, limits.commentMaxChars)
  const seen = new Set()
  for (const raw of Array.isArray(draft.pins) ? draft.pins.slice(0, limits.maxPins) : []) {
    const pin = sanitizePin(raw)
    if (pin && !seen.has(pin.id)) {
      seen.add(pin.id)
      state.pins.push(pin)
    }
  }
  addConsoleEntries(Array.isArray(draft.console) ? draft.console : [])
  return state.pins.length > 0 || state.comment !== '' || state.console.length > 0
}

// ---- pins list -------------------------------------------------------------------------------

function targetText(pin) {
  const snippet = pin.text.length > 80 ? `${pin.text.slice(0, 79)}…` : pin.text
  return snippet ? `<${pin.tag}> “${snippet}”` : `<${pin.tag}>`
}

function createPinView(pin) {
  const li = document.createElement('li')
  li.className = `pin sev-${pin.severity}`
  li.id = `pin-${pin.id}`

  const head = document.createElement('div')
  head.className = 'pin-head'
  const heading = document.createElement('h4')
  const target = document.createElement('span')
  target.className = 'pin-target'
  target.textContent = targetText(pin)
  head.append(heading, target)

  const page = document.createElement('p')
  page.className = 'pin-page'
  page.textContent = `On ${pin.page.url}${pin.page.title ? ` (${pin.page.title})` : ''}`

  const commentField = document.createElement('div')
  commentField.className = 'field'
  const commentLabel = document.createElement('label')
  const comment = document.createElement('textarea')
  comment.id = `comment-${pin.id}`
  comment.rows = 3
  comment.maxLength = limits.commentMaxChars
  comment.required = true
  comment.value = pin.comment
  commentLabel.htmlFor = comment.id
  commentField.append(commentLabel, comment)

  const severityField = document.createElement('div')
  severityField.className = 'field'
  const severityLabel = document.createElement('label')
  const severity = document.createElement('select')
  severity.id = `severity-${pin.id}`
  severityLabel.htmlFor = severity.id
  for (const value of SEVERITIES) {
    const option = document.createElement('option')
    option.value = value
    option.textContent = SEVERITY_LABELS[value]
    severity.append(option)
  }
  severity.value = pin.severity
  severityField.append(severityLabel, severity)

  const actions = document.createElement('div')
  actions.className = 'pin-actions'
  const show = document.createElement('button')
  show.type = 'button'
  show.className = 'secondary'
  const remove = document.createElement('button')
  remove.type = 'button'
  remove.className = 'danger'
  actions.append(show, remove)

  li.append(head, page, commentField, severityField, actions)

  comment.addEventListener('input', () => {
    pin.comment = comment.value
    if (comment.value.trim() !== '') {
      comment.removeAttribute('aria-invalid')
      li.classList.remove('invalid')
    }
    saveDraftSoon()
  })
  severity.addEventListener('change', () => {
    if (!SEVERITIES.includes(severity.value)) return
    pin.severity = severity.value
    li.className = `pin sev-${pin.severity}`
    sendPins()
    saveDraft()
  })
  show.addEventListener('click', () => showPin(pin))
  remove.addEventListener('click', () => deletePin(pin.id))

  const view = { li, heading, commentLabel, comment, severityLabel, severity, show, remove }
  views.set(pin.id, view)
  return view
}

function numberViews() {
  state.pins.forEach((pin, index) => {
    const view = views.get(pin.id)
    if (!view) return
    const n = index + 1
    view.heading.textContent = `Pin ${n}`
    view.commentLabel.replaceChildren('Comment', hiddenText(` for pin ${n}`))
    view.severityLabel.replaceChildren('Severity', hiddenText(` of pin ${n}`))
    view.show.replaceChildren('Show', hiddenText(` pin ${n}`))
    view.remove.replaceChildren('Delete', hiddenText(` pin ${n}`))
  })
  byId('pin-count').textContent = `(${state.pins.length})`
  byId('no-pins').hidden = state.pins.length > 0
  addPinButton.disabled = state.pins.length >= limits.maxPins || state.submitting || state.locked
}

function renderPins() {
  views.clear()
  pinList.replaceChildren(...state.pins.map((pin) => createPinView(pin).li))
  numberViews()
}

function sendPins() {
  const list = state.done ? state.donePins : state.pins
  const key = pageKey(state.framePage)
  const pins = []
  list.forEach((pin, index) => {
    if (key === '' || pageKey(pin.page.url) !== key) return
    const item = { id: pin.id, n: index + 1, selector: pin.selector, severity: pin.severity }
    if (pin.xpath) item.xpath = pin.xpath
    pins.push(item)
  })
  send({ type: 'pins', pins })
}

function showPin(pin) {
  if (pageKey(pin.page.url) === pageKey(state.framePage) && !state.snapshot) {
    send({ type: 'focus', id: pin.id })
    return
  }
  const target = frameUrlOf(pin.page.url)
  if (!target) return
  state.pendingFocus = pin.id
  if (state.snapshot) setSnapshot(false, target)
  else navigateFrame(target)
  announce(`Opening ${pin.page.url} to show the pin.`)
}

function deletePin(id) {
  const index = state.pins.findIndex((pin) => pin.id === id)
  if (index < 0 || state.submitting) return
  state.pins.splice(index, 1)
  views.get(id)?.li.remove()
  views.delete(id)
  numberViews()
  sendPins()
  saveDraft()
  const next = state.pins[index] ?? state.pins[index - 1]
  if (next) views.get(next.id)?.comment.focus()
  else addPinButton.focus()
  announce(`Pin ${index + 1} deleted.${state.pins.length > index ? ' The pins after it were renumbered.' : ''}`)
}

// ---- console ---------------------------------------------------------------------------------

function addConsoleEntries(entries) {
  let added = 0
  for (const raw of entries.slice(0, limits.maxConsoleEntries)) {
    if (state.console.length >= limits.maxConsoleEntries) break
    const entry = sanitizeConsoleEntry(raw)
    if (!entry) continue
    // The same message from the same place is kept once (reloads and repeats add nothing).
    const key = `${entry.level}\u0001${entry.message}\u0001${entry.source ?? ''}`
    if (state.consoleKeys.has(key)) continue
    state.consoleKeys.add(key)
    state.console.push(entry)
    added++
  }
  if (added > 0) renderConsole()
  return added
}

function renderConsole() {
  const box = byId('console-box')
  box.hidden = state.console.length === 0
  const errors = state.console.filter((entry) => entry.level === 'error').length
  const warnings = state.console.length - errors
  byId('console-summary').textContent = `Console messages from the page: ${errors} error${errors === 1 ? '' : 's'}, ${warnings} warning${warnings === 1 ? '' : 's'}`
  byId('console-list').replaceChildren(
    ...state.console.map((entry) => {
      const li = document.createElement('li')
      li.className = entry.level
      li.textContent = `${entry.level === 'error' ? 'Error' : 'Warning'}: ${entry.message}${entry.source ? ` (${entry.source})` : ''}`
      return li
    }),
  )
}

// ---- the frame -------------------------------------------------------------------------------

function navigateFrame(url) {
  cancelPick(false, true)
  state.framePage = null
  byId('frame-page').textContent = 'Loading…'
  try {
    frame.contentWindow.location.replace(url)
  } catch {
    frame.src = url
  }
}

function setSnapshot(on, url) {
  state.snapshot = on
  const toggle = byId('snapshot-toggle')
  toggle.textContent = on ? 'Show the live page' : 'Show a screenshot instead'
  navigateFrame(url ?? (on ? config.snapshotUrl : config.frameUrl))
  announce(on ? 'Showing a screenshot of the page.' : 'Showing the live page.')
}

function updatePickButton() {
  const picking = state.pick !== 'off'
  addPinButton.textContent = picking ? 'Cancel adding a pin' : 'Add a pin'
  addPinButton.classList.toggle('picking', picking)
}

function startPick() {
  if (state.done || state.locked || state.submitting || state.pick !== 'off') return
  if (state.pins.length >= limits.maxPins) {
    showProblem([`A review holds at most ${limits.maxPins} pins.`])
    return
  }
  hideProblem()
  state.pick = 'requested'
  updatePickButton()
  send({ type: 'pick' })
  // Keyboard picking happens in the frame: give it the focus.
  frame.focus()
  clearTimeout(state.pickTimer)
  state.pickTimer = setTimeout(() => {
    if (state.pick !== 'requested') return
    state.pick = 'off'
    updatePickButton()
    showProblem(['The page is not ready for pins (its review overlay did not answer). Wait until it has loaded, or go back to a page of the site under review.'])
    addPinButton.focus()
  }, PICK_ANSWER_MS)
}

function cancelPick(fromFrame, quiet) {
  if (state.pick === 'off') return
  const wasFocusedInFrame = document.activeElement === frame
  state.pick = 'off'
  clearTimeout(state.pickTimer)
  updatePickButton()
  if (!fromFrame) send({ type: 'cancel' })
  if (quiet) return
  if (fromFrame || wasFocusedInFrame) addPinButton.focus()
  announce('Adding a pin was cancelled.')
}

function onReady(page) {
  if (!isObject(page)) return
  const url = pageUrlOf(page.url)
  state.framePage = url
  const title = clean(page.title, TITLE_MAX)
  byId('frame-page').textContent = url ? `Showing ${url}${title ? ` — ${title}` : ''}` : ''
  if (state.pick !== 'off') cancelPick(true, true)
  sendPins()
  if (state.pendingFocus) {
    send({ type: 'focus', id: state.pendingFocus })
    state.pendingFocus = null
  }
}

function onPicked(raw) {
  if (!isObject(raw)) return
  clearTimeout(state.pickTimer)
  state.pick = 'off'
  updatePickButton()
  const pageUrl = isObject(raw.page) ? pageUrlOf(raw.page.url) : null
  const pin = pageUrl
    ? sanitizePin({
        ...raw,
        id: newPinId(),
        comment: '',
        severity: 'important',
        page: { url: pageUrl, title: raw.page.title },
        userAgent: navigator.userAgent,
        createdAt: new Date().toISOString(),
      })
    : null
  if (!pin) {
    showProblem(['That element could not be pinned (the page described it in a way this page does not accept). Try its parent or a nearby element.'])
    addPinButton.focus()
    return
  }
  if (state.pins.length >= limits.maxPins) return
  state.pins.push(pin)
  pinList.append(createPinView(pin).li)
  numberViews()
  sendPins()
  saveDraft()
  const view = views.get(pin.id)
  view.li.scrollIntoView({ block: 'nearest' })
  view.comment.focus()
  announce(`Pin ${state.pins.length} added on ${targetText(pin)}. Write your comment.`)
}

window.addEventListener('message', (event) => {
  if (!config || event.origin !== config.siteOrigin || event.source === null || event.source !== frame.contentWindow) return
  const message = event.data
  if (!isObject(message) || message.protocol !== PROTOCOL || typeof message.type !== 'string') return
  switch (message.type) {
    case 'ready':
      onReady(message.page)
      break
    case 'picking':
      if (state.pick === 'requested') {
        state.pick = 'active'
        clearTimeout(state.pickTimer)
        announce('Click an element in the page to pin it, or use the arrow keys to move and Enter to pin. Escape cancels.')
      }
      break
    case 'picked':
      if (state.pick !== 'off' && !state.done && !state.locked) onPicked(message.pin)
      break
    case 'cancelled':
      cancelPick(true, false)
      break
    case 'console':
      if (!state.done && Array.isArray(message.entries) && addConsoleEntries(message.entries) > 0) saveDraftSoon()
      break
  }
})

// ---- submission ------------------------------------------------------------------------------

function setBusy(busy) {
  state.submitting = busy
  submitButton.disabled = busy || state.locked
  submitButton.textContent = busy ? 'Submitting…' : 'Submit review'
  submitButton.setAttribute('aria-busy', String(busy))
  overall.readOnly = busy
  for (const view of views.values()) {
    view.comment.readOnly = busy
    view.severity.disabled = busy
    view.remove.disabled = busy
  }
  numberViews()
}

/** The first thing that keeps the draft from being sent, or null. */
function checkDraft() {
  let first = null
  const missing = []
  state.pins.forEach((pin, index) => {
    const view = views.get(pin.id)
    if (pin.comment.trim() === '') {
      missing.push(index + 1)
      view?.comment.setAttribute('aria-invalid', 'true')
      view?.li.classList.add('invalid')
      if (first === null) first = view?.comment ?? null
    }
  })
  if (missing.length === 0) return null
  const which = missing.length === 1 ? `Pin ${missing[0]} is missing its comment.` : `Pins ${missing.join(', ')} are missing their comments.`
  return { message: `${which} Say what is wrong, or delete the pin.`, focus: first }
}

function onSubmitClick() {
  if (state.submitting || state.done || state.locked) return
  hideProblem()
  cancelPick(false, true)
  state.comment = overall.value
  const issue = checkDraft()
  if (issue) {
    showProblem([issue.message])
    issue.focus?.focus()
    return
  }
  const n = state.pins.length
  const c = state.console.length
  byId('confirm-summary').textContent =
    `You are sending ${n} pin${n === 1 ? '' : 's'}${state.comment.trim() ? ' and an overall comment' : ''}${c > 0 ? `, with ${c} console message${c === 1 ? '' : 's'} from the page` : ''}.`
  dialog.showModal()
  byId('confirm-no').focus()
}

function fieldProblem(field) {
  if (typeof field !== 'string') return null
  const pinMatch = /pins\D{1,3}(\d+)/.exec(field)
  if (pinMatch) {
    const pin = state.pins[Number(pinMatch[1])]
    const view = pin && views.get(pin.id)
    if (view) {
      view.li.classList.add('invalid')
      view.comment.setAttribute('aria-invalid', 'true')
      return { label: `pin ${Number(pinMatch[1]) + 1}`, focus: view.comment }
    }
  }
  if (/comment$/.test(field)) return { label: 'the overall comment', focus: overall }
  if (/console/.test(field)) return { label: 'the console messages', focus: null }
  return { label: field, focus: null }
}

async function submit() {
  if (state.submitting || state.done || state.locked) return
  setBusy(true)
  announce('Submitting your review…')
  const body = {
    comment: clean(state.comment.trim(), limits.commentMaxChars),
    pins: state.pins.map((pin) => ({ ...pin, comment: clean(pin.comment.trim(), limits.commentMaxChars) })),
    console: state.console.slice(0, limits.maxConsoleEntries),
  }
  let response
  try {
    response = await fetch(config.submitUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, application/problem+json' },
      body: JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
      redirect: 'error',
    })
  } catch {
    setBusy(false)
    saveDraft()
    showProblem(['The review could not be sent (no answer from the server). Your review is kept on this device; check the connection and press “Submit review” again.'])
    announce('Not submitted: the server could not be reached. Your review is kept.')
    submitButton.focus()
    return
  }
  let answer = null
  try {
    answer = await response.json()
  } catch {
    answer = null
  }
  if (response.ok) {
    clearDraft()
    showDone(isObject(answer) && Array.isArray(answer.pins) ? answer : body, true)
    return
  }
  setBusy(false)
  const detail =
    isObject(answer) && typeof answer.detail === 'string' ? clean(answer.detail, 2000) : isObject(answer) && typeof answer.title === 'string' ? clean(answer.title, 500) : ''
  if (response.status >= 400 && response.status < 500) {
    const lines = [`The review was not accepted: ${detail || `the server answered ${response.status}`}.`.replace(/\.\.$/, '.')]
    const where = fieldProblem(isObject(answer) ? answer.field : undefined)
    if (where) lines.push(`The problem is in ${where.label}.`)
    if (isObject(answer) && Array.isArray(answer.errors)) {
      for (const error of answer.errors.slice(0, 5)) {
        if (isObject(error) && typeof error.message === 'string') lines.push(`${typeof error.field === 'string' ? `${clean(error.field, 200)}: ` : ''}${clean(error.message, 500)}`)
      }
    }
    if (response.status === 409 || response.status === 410 || response.status === 404) {
      // Already submitted (or gone): nothing more can be sent from here.
      state.locked = true
      submitButton.disabled = true
      addPinButton.disabled = true
      lines.push('This review can no longer be submitted. Reload the page to see its current state.')
    }
    showProblem(lines)
    announce('Not submitted. See the problem above the submit button.')
    ;(where?.focus ?? problemBox).focus?.()
    return
  }
  saveDraft()
  showProblem([
    `The server could not take the review right now (status ${response.status}${detail ? `: ${detail}` : ''}). Your review is kept on this device; try again in a moment.`,
  ])
  announce('Not submitted: a server error. Your review is kept.')
  submitButton.focus()
}

// ---- submitted (read-only) -------------------------------------------------------------------

function showDone(review, justNow) {
  state.done = true
  cancelPick(false, true)
  byId('editor').hidden = true
  const done = byId('done')
  done.hidden = false
  const submittedAt = typeof review.submittedAt === 'string' && !Number.isNaN(Date.parse(review.submittedAt)) ? new Date(review.submittedAt) : justNow ? new Date() : null
  byId('done-when').textContent = submittedAt ? `Submitted on ${submittedAt.toLocaleString()}. It can't be changed.` : 'This review was submitted. It can no longer be changed.'
  const comment = clean(review.comment, limits.commentMaxChars)
  byId('done-comment').textContent = comment || '(none)'
  state.donePins = (Array.isArray(review.pins) ? review.pins : []).map(sanitizePin).filter((pin) => pin !== null)
  byId('done-pins').replaceChildren(
    ...state.donePins.map((pin, index) => {
      const li = document.createElement('li')
      li.className = `pin sev-${pin.severity}`
      const head = document.createElement('div')
      head.className = 'pin-head'
      const heading = document.createElement('h4')
      heading.textContent = `Pin ${index + 1}`
      const badge = document.createElement('span')
      badge.className = `severity-badge sev-${pin.severity}`
      badge.textContent = SEVERITY_SHORT[pin.severity]
      const target = document.createElement('span')
      target.className = 'pin-target'
      target.textContent = targetText(pin)
      head.append(heading, badge, target)
      const page = document.createElement('p')
      page.className = 'pin-page'
      page.textContent = `On ${pin.page.url}`
      const text = document.createElement('p')
      text.className = 'prewrap'
      text.textContent = pin.comment
      const show = document.createElement('button')
      show.type = 'button'
      show.className = 'secondary'
      show.append('Show', hiddenText(` pin ${index + 1}`))
      show.addEventListener('click', () => showPin(pin))
      li.append(head, page, text, show)
      return li
    }),
  )
  if (state.donePins.length === 0) {
    const li = document.createElement('li')
    li.textContent = 'No pins.'
    byId('done-pins').append(li)
  }
  sendPins()
  if (justNow) {
    byId('done-title').focus()
    announce('Review submitted. Thank you.')
  }
}

// ---- start -----------------------------------------------------------------------------------

function isTextField(target) {
  if (!(target instanceof Element)) return false
  if (target.closest('textarea, select, [contenteditable=""], [contenteditable="true"]')) return true
  return target instanceof HTMLInputElement && !['button', 'checkbox', 'radio', 'submit', 'reset', 'range', 'color', 'file'].includes(target.type)
}

function start() {
  if (!config) {
    const panel = byId('panel')
    const p = document.createElement('p')
    p.className = 'problem'
    p.textContent = 'This review page could not start (its configuration is missing or broken). Reload it, or ask for a new link.'
    panel.append(p)
    return
  }

  // Header: what is being reviewed.
  const source = config.source
  const sourceLine = byId('source-line')
  if (source.kind === 'zip') {
    byId('review-title').textContent = 'Review of an uploaded site'
    sourceLine.textContent = `Entry page: ${source.entryFile}`
    if (typeof source.bundleUrl === 'string' && source.bundleUrl !== '') {
      const bundle = document.createElement('a')
      bundle.className = 'button secondary'
      bundle.href = source.bundleUrl
      bundle.rel = 'noreferrer'
      bundle.download = ''
      bundle.textContent = 'Download the source (zip)'
      byId('top-actions').prepend(bundle)
    }
  } else {
    byId('review-title').textContent = 'Review of a live page'
    sourceLine.textContent = `Page: ${source.url}`
    if (config.snapshotUrl) {
      const toggle = byId('snapshot-toggle')
      toggle.hidden = false
      toggle.addEventListener('click', () => setSnapshot(!state.snapshot))
    }
  }

  if (config.status === 'submitted') {
    clearDraft()
    showDone(isObject(config.review) ? config.review : { comment: '', pins: [] }, false)
  } else {
    const restored = loadDraft()
    byId('editor').hidden = false
    overall.maxLength = limits.commentMaxChars
    overall.value = state.comment
    renderPins()
    renderConsole()
    if (restored) announce(`Your draft was restored: ${state.pins.length} pin${state.pins.length === 1 ? '' : 's'}.`)
    overall.addEventListener('input', () => {
      state.comment = overall.value
      saveDraftSoon()
    })
    addPinButton.addEventListener('click', () => {
      if (state.pick === 'off') startPick()
      else cancelPick(false, false)
    })
    submitButton.addEventListener('click', onSubmitClick)
    byId('confirm-yes').addEventListener('click', () => {
      dialog.close()
      submit()
    })
    byId('confirm-no').addEventListener('click', () => {
      dialog.close()
      submitButton.focus()
    })
    document.addEventListener('keydown', (event) => {
      if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey || dialog.open) return
      if (event.key === 'Escape' && state.pick !== 'off') {
        event.preventDefault()
        cancelPick(false, false)
      } else if ((event.key === 'p' || event.key === 'P') && !isTextField(event.target) && !state.done && state.pick === 'off') {
        event.preventDefault()
        startPick()
      }
    })
    window.addEventListener('pagehide', saveDraft)
  }

  // The frame loads only now, with the message listener in place.
  frame.src = config.frameUrl
}

start()
