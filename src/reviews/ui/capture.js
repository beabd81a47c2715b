// capture.js: the first script of every page of a site under review (a classic script, injected at
// the start of <head> by the isolated origin at /__agent_gateway__/capture.js), so it runs before
// the site's own scripts. It records what the page's scripts report as going wrong: uncaught errors
// and failed resource loads (`error` on window, capture phase), unhandled promise rejections, and
// calls of console.error / console.warn (the originals are still called). Entries stay in this
// closure; overlay.js reads them through a frozen function on a non-configurable Symbol-keyed
// property of window (`Symbol.for('agent-gateway-review/console')`): call it with a listener, which
// receives the entries so far at once and then each new entry as it comes (arrays of entries).
// The site runs in the same realm and can always lie (log made-up errors, call the function); it
// cannot replace the property or erase what was recorded. Bounds: the `/*LIMIT:…*/` numbers are
// replaced with the values of src/reviews/limits.ts when the file is served (src/reviews/ui/assets.ts).
;(() => {
  const KEY = Symbol.for('agent-gateway-review/console')
  if (Object.getOwnPropertyDescriptor(window, KEY)) return // injected twice: the first one records
  const MAX_ENTRIES = /*LIMIT:REVIEW_MAX_CONSOLE_ENTRIES*/ 200
  const MAX_CHARS = /*LIMIT:CONSOLE_MESSAGE_MAX_CHARS*/ 2000
  const MAX_SOURCE_CHARS = 4096
  const MAX_LISTENERS = 4

  // The site may later replace globals; keep what we use.
  const OwnDate = Date
  const OwnError = Error
  const toIso = Date.prototype.toISOString
  const apply = Reflect.apply
  const freeze = Object.freeze
  const toTag = Object.prototype.toString
  const stringify = JSON.stringify

  const entries = []
  const listeners = []
  let busy = false

  /* @include clean.js */

  const describe = (value) => {
    try {
      if (typeof value === 'string') return value
      if (value instanceof OwnError) return `${value.name}: ${value.message}`
      if (value === null || value === undefined) return String(value)
      if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`
      if (typeof value !== 'object') return String(value)
      if (typeof Element === 'function' && value instanceof Element) return `<${value.tagName.toLowerCase()}>`
      const json = stringify(value)
      return json === undefined ? apply(toTag, value, []) : json
    } catch {
      return apply(toTag, value, [])
    }
  }

  /** `url:line:column` of the first stack frame outside this file, when the engine tells. */
  const callerSource = () => {
    const stack = new OwnError().stack
    if (typeof stack !== 'string') return undefined
    for (const line of stack.split('\n').slice(1)) {
      if (line.includes('/__agent_gateway__/')) continue
      const match = /((?:https?|blob|file):[^\s()]+:\d+:\d+)\)?\s*$/.exec(line)
      return match ? match[1] : undefined
    }
    return undefined
  }

  const record = (level, message, source) => {
    if (entries.length >= MAX_ENTRIES || busy) return
    busy = true
    try {
      const entry = { level, message: clean(String(message), MAX_CHARS), at: apply(toIso, new OwnDate(), []) }
      if (typeof source === 'string' && source !== '') entry.source = clean(source, MAX_SOURCE_CHARS)
      freeze(entry)
      entries.push(entry)
      for (const listener of listeners) {
        try {
          listener([entry])
        } catch {
          // a listener's failure is not the page's
        }
      }
    } catch {
      // recording must never break the page
    } finally {
      busy = false
    }
  }

  window.addEventListener(
    'error',
    (event) => {
      if (event instanceof ErrorEvent) {
        const message = event.message || describe(event.error)
        const source = event.filename ? `${event.filename}:${event.lineno}:${event.colno}` : undefined
        record('error', message, source)
        return
      }
      // A resource that failed to load (<img>, <script>, <link>…): the event does not bubble, but
      // reaches window in the capture phase.
      const target = event.target
      if (typeof Element === 'function' && target instanceof Element) {
        const url = target.currentSrc || target.src || target.href || ''
        record('error', `Failed to load <${target.tagName.toLowerCase()}>${url ? ` ${url}` : ''}`, typeof url === 'string' ? url : undefined)
      }
    },
    true,
  )

  window.addEventListener('unhandledrejection', (event) => {
    record('error', `Unhandled promise rejection: ${describe(event.reason)}`, undefined)
  })

  for (const [method, level] of [
    ['error', 'error'],
    ['warn', 'warning'],
  ]) {
    const original = console[method]
    if (typeof original !== 'function') continue
    console[method] = function (...args) {
      if (!busy) {
        try {
          record(level, args.map(describe).join(' '), callerSource())
        } catch {
          // keep logging even if describing failed
        }
      }
      return apply(original, this, args)
    }
  }

  const subscribe = freeze((listener) => {
    if (typeof listener !== 'function' || listeners.length >= MAX_LISTENERS) return
    listeners.push(listener)
    try {
      listener(entries.slice())
    } catch {
      // ignore
    }
  })
  Object.defineProperty(window, KEY, { value: subscribe, enumerable: false, configurable: false, writable: false })
})()
