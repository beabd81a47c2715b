// reviewer-draft.js: the draft kept in localStorage until the review is submitted, so a reload
// loses nothing (whatever is read back is checked again, as if it came from the frame).
import { announce, config, isObject, limits, state } from './reviewer-page.js'
import { clean, sanitizePin } from './reviewer-messages.js'
import { addConsoleEntries } from './reviewer-console.js'

const draftKey = config ? `agent-gateway-review:${config.reviewId}` : ''
let draftTimer = 0
let draftWarned = false

export function saveDraft() {
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

export function saveDraftSoon() {
  clearTimeout(draftTimer)
  draftTimer = setTimeout(saveDraft, 400)
}

export function clearDraft() {
  clearTimeout(draftTimer)
  try {
    localStorage.removeItem(draftKey)
  } catch {
    // nothing kept
  }
}

export function loadDraft() {
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
