// reviewer-submit.js: submitting the review (checked, confirmed, sent once), the problems the
// server reports, and the read-only view of a submitted review.
import {
  addPinButton,
  announce,
  byId,
  config,
  dialog,
  hiddenText,
  hideProblem,
  isObject,
  limits,
  overall,
  problemBox,
  showProblem,
  state,
  submitButton,
  views,
} from './reviewer-page.js'
import { clean, sanitizePin } from './reviewer-messages.js'
import { cancelPick, sendPins, showPin } from './reviewer-frame.js'
import { numberViews, targetText } from './reviewer-pins.js'
import { clearDraft, saveDraft } from './reviewer-draft.js'

const SEVERITY_SHORT = { blocking: 'Blocking', important: 'Important', suggestion: 'Suggestion' }

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

export function onSubmitClick() {
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

export async function submit() {
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

export function showDone(review, justNow) {
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
