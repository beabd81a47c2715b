// reviewer-frame.js: the frame that shows the site under review: where it goes (a pin's page, the
// live page or its screenshot), which pins it shows, and picking an element in it.
import { addPinButton, announce, byId, config, frame, hideProblem, isObject, limits, send, showProblem, state } from './reviewer-page.js'
import { clean, frameUrlOf, pageKey, pageUrlOf, TITLE_MAX } from './reviewer-messages.js'

const PICK_ANSWER_MS = 3000

export function navigateFrame(url) {
  cancelPick(false, true)
  state.framePage = null
  byId('frame-page').textContent = 'Loading…'
  try {
    frame.contentWindow.location.replace(url)
  } catch {
    frame.src = url
  }
}

export function setSnapshot(on, url) {
  state.snapshot = on
  const toggle = byId('snapshot-toggle')
  toggle.textContent = on ? 'Show the live page' : 'Show a screenshot instead'
  navigateFrame(url ?? (on ? config.snapshotUrl : config.frameUrl))
  announce(on ? 'Showing a screenshot of the page.' : 'Showing the live page.')
}

export function updatePickButton() {
  const picking = state.pick !== 'off'
  addPinButton.textContent = picking ? 'Cancel adding a pin' : 'Add a pin'
  addPinButton.classList.toggle('picking', picking)
}

export function startPick() {
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

export function cancelPick(fromFrame, quiet) {
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

export function onReady(page) {
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

export function sendPins() {
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

export function showPin(pin) {
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
