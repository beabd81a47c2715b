// The status writes' JSON, pure: the port's patch semantics (mergeStatus, as Postgres' jsonb
// merge), and the bodies that carry them to the API server: an RFC 7386 merge patch from the
// stored status (diffMergePatch) or without it (flatStatusPatch), and a server-side apply
// configuration that nulls what went away (applyConfiguration).
import { isRecord, type Json, type JsonRecord } from './json.ts'

function stripNulls(value: Json): Json {
  if (Array.isArray(value)) return value.map(stripNulls)
  if (!isRecord(value)) return value
  const out: JsonRecord = {}
  for (const [key, child] of Object.entries(value)) if (child !== null && child !== undefined) out[key] = stripNulls(child)
  return out
}

function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, i) => deepEqual(item, b[i]))
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a)
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && deepEqual(a[k], b[k]))
  }
  return false
}

/**
 * The status after a patch, with the Postgres backend's semantics: top-level keys replace, a null
 * value removes its key, and nulls are stripped everywhere (jsonb_strip_nulls).
 */
export function mergeStatus(current: Json, patch: Json): JsonRecord {
  const out: JsonRecord = isRecord(current) ? { ...current } : {}
  if (isRecord(patch)) {
    for (const [key, value] of Object.entries(patch)) {
      if (value === null) delete out[key]
      else if (value !== undefined) out[key] = value
    }
  }
  return stripNulls(out) as JsonRecord
}

/** RFC 7386 merge patch turning `current` into `desired` (desired holds no nulls; arrays are atomic). */
export function diffMergePatch(current: Json, desired: JsonRecord): JsonRecord {
  const patch: JsonRecord = {}
  const base = isRecord(current) ? current : {}
  for (const key of Object.keys(base)) if (!(key in desired)) patch[key] = null
  for (const [key, value] of Object.entries(desired)) {
    const old = base[key]
    if (isRecord(old) && isRecord(value)) {
      const inner = diffMergePatch(old, value)
      if (Object.keys(inner).length > 0) patch[key] = inner
    } else if (!deepEqual(old, value)) patch[key] = value
  }
  return patch
}

/**
 * A status patch as an RFC 7386 merge patch with the port's semantics whatever the stored status
 * is, or undefined when that needs the stored status. A merge patch replaces scalars and arrays
 * whole and deletes a key given null, like mergeStatus; it merges nested objects key by key, where
 * mergeStatus replaces them whole (so a patch holding one is left to the read-merge-write path).
 * Nulls inside arrays are stripped as mergeStatus strips them. Stored statuses carry no nulls
 * (this store strips them on every write, and the CRD schemas prune them except in a Run's nullable
 * exitCode), so the only difference: an exitCode another client left null stays until rewritten,
 * where the read path would drop it with this write.
 */
export function flatStatusPatch(patch: Json): JsonRecord | undefined {
  if (!isRecord(patch)) return undefined
  const out: JsonRecord = {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === undefined) continue
    if (isRecord(value)) return undefined
    out[key] = Array.isArray(value) ? stripNulls(value) : value
  }
  return out
}

/** `desired` in full plus an explicit null for every key of `current` it drops (at any depth). */
export function applyConfiguration(current: Json, desired: JsonRecord): JsonRecord {
  const out: JsonRecord = {}
  const base = isRecord(current) ? current : {}
  for (const key of Object.keys(base)) if (!(key in desired)) out[key] = null
  for (const [key, value] of Object.entries(desired)) {
    const old = base[key]
    out[key] = isRecord(old) && isRecord(value) ? applyConfiguration(old, value) : value
  }
  return out
}
