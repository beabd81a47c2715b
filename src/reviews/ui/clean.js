// Spliced into capture.js, overlay.js and reviewer-messages.js where each says `/* @include clean.js */`
// (src/reviews/ui/assets.ts does it when they are served), so the three scripts share one copy.

/** A well-formed string without NUL (the gateway refuses both), at most max UTF-16 units, never half a surrogate pair; '' for a non-string. */
// biome-ignore lint/correctness/noUnusedVariables: used by the scripts it is spliced into
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
