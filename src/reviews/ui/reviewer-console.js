// reviewer-console.js: the console messages the page's scripts reported (kept once each, capped)
// and their list in the panel.
import { byId, limits, state } from './reviewer-page.js'
import { sanitizeConsoleEntry } from './reviewer-messages.js'

export function addConsoleEntries(entries) {
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

export function renderConsole() {
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
