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
//
// The page is split into modules (each imported here, preloaded by reviewer.html):
//   reviewer-page.js      configuration, limits, shared state and elements, announcements, send()
//   reviewer-messages.js  validation and capping of what comes from the frame and from storage
//   reviewer-frame.js     the frame: navigation, screenshot toggle, picking, the pins it shows
//   reviewer-pins.js      the pin list: add, edit, delete, show
//   reviewer-console.js   the console messages reported by the page
//   reviewer-draft.js     the draft kept in localStorage
//   reviewer-submit.js    submission, the problems it meets, the submitted (read-only) view
// This module wires them: the frame's messages, the editor's controls, and start().

import { addConsoleEntries, renderConsole } from './reviewer-console.js'
import { clearDraft, loadDraft, saveDraft, saveDraftSoon } from './reviewer-draft.js'
import { cancelPick, onReady, setSnapshot, startPick } from './reviewer-frame.js'
import { addPinButton, announce, byId, config, dialog, frame, isObject, limits, overall, PROTOCOL, send, state, submitButton } from './reviewer-page.js'
import { onPicked, renderPins } from './reviewer-pins.js'
import { onSubmitClick, showDone, submit } from './reviewer-submit.js'

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

  // The frame started loading with the page (its src is in the HTML), so its overlay may have
  // announced itself before this listener existed: ask it again. If it has not started yet, this
  // message is dropped and its own announcement arrives instead.
  send({ type: 'hello' })
  frame.addEventListener('load', () => send({ type: 'hello' }), { once: true })
}

start()
