// reviewer-pins.js: the pin list of the editor: a picked element becomes a pin, and each pin's
// item lets the reviewer comment on it, set its severity, show it in the frame or delete it.
import { addPinButton, announce, byId, hiddenText, isObject, limits, pinList, showProblem, state, views } from './reviewer-page.js'
import { pageUrlOf, SEVERITIES, sanitizePin } from './reviewer-messages.js'
import { sendPins, showPin, updatePickButton } from './reviewer-frame.js'
import { saveDraft, saveDraftSoon } from './reviewer-draft.js'

const SEVERITY_LABELS = { blocking: 'Blocking — must be fixed', important: 'Important — should be fixed', suggestion: 'Suggestion — nice to have' }

function newPinId() {
  const bytes = crypto.getRandomValues(new Uint8Array(24))
  let id = 'p_'
  for (const byte of bytes) {
    if (byte < 252 && id.length < 14) id += (byte % 36).toString(36)
  }
  while (id.length < 14) id += Math.floor(Math.random() * 36).toString(36)
  return id
}

export function targetText(pin) {
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

export function numberViews() {
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

export function renderPins() {
  views.clear()
  pinList.replaceChildren(...state.pins.map((pin) => createPinView(pin).li))
  numberViews()
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

export function onPicked(raw) {
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
