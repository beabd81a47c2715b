// reviewer-page.js: what every module of the reviewer page shares (see reviewer.js): the review's
// configuration and limits, the page's state and elements, and the ways to tell the reviewer
// something (the live region, the problem box) and to post to the frame.

export const PROTOCOL = 'agent-gateway-review/1'
const DEFAULT_LIMITS = {
  maxPins: 200,
  commentMaxChars: 10000,
  textMaxChars: 200,
  selectorMaxChars: 2000,
  maxConsoleEntries: 200,
  consoleMessageMaxChars: 2000,
}

export const byId = (id) => document.getElementById(id)
export const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value)

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

export const config = readConfig()
export const limits = { ...DEFAULT_LIMITS, ...(isObject(config?.limits) ? config.limits : {}) }

export const frame = byId('site-frame')
const live = byId('live')
export const problemBox = byId('problem')
export const addPinButton = byId('add-pin')
export const pinList = byId('pins')
export const overall = byId('overall-comment')
export const submitButton = byId('submit')
export const dialog = byId('confirm')

export const state = {
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
export const views = new Map()

let announceTimer = 0
export function announce(text) {
  clearTimeout(announceTimer)
  live.textContent = ''
  announceTimer = setTimeout(() => {
    live.textContent = text
  }, 60)
}

export function showProblem(lines) {
  problemBox.replaceChildren(
    ...lines.map((line) => {
      const p = document.createElement('p')
      p.textContent = line
      return p
    }),
  )
  problemBox.hidden = false
}

export function hideProblem() {
  problemBox.hidden = true
  problemBox.replaceChildren()
}

export function hiddenText(text) {
  const span = document.createElement('span')
  span.className = 'visually-hidden'
  span.textContent = text
  return span
}

export function send(message) {
  frame.contentWindow?.postMessage({ protocol: PROTOCOL, ...message }, config.siteOrigin)
}
