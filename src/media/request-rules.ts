// Rules of a song request that its JSON Schema cannot say: section order and overlap, sections
// within the song, and reference image URLs that must be public http(s). Each breach is a 400
// naming the field. Reference images are never fetched by us; they go to an upstream model, so a
// URL naming a private or loopback host is refused here rather than handed to someone who might.
import net from 'node:net'
import { isPrivateHost, normalizeHost } from '../platform/addresses.ts'
import { AppError } from '../platform/errors.ts'
import type { SectionRequest } from './types.ts'

/** The song length when the request names none: the end of its last section, else 60 s. */
export const DEFAULT_DURATION_SEC = 60
export const MIN_DURATION_SEC = 30
export const MAX_DURATION_SEC = 300

const invalid = (field: string, message: string) => new AppError('validation_error', message, { field })

/** Throws a 400 unless `raw` is an http(s) URL whose host is public (see header). */
export function assertPublicHttpUrl(raw: string, field: string): void {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    throw invalid(field, `${field} is not a URL`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(field, `${field} must be an http or https URL`)
  if (url.username || url.password) throw invalid(field, `${field} must not carry credentials`)
  // WHATWG parsing turned decimal, hex and octal IPv4 forms into dotted quads; normalizeHost
  // also drops trailing dots and case (`LOCALHOST..`, `127.0.0.1..`).
  if (!isPrivateHost(url.hostname)) return
  throw invalid(field, net.isIP(normalizeHost(url.hostname)) ? `${field} names a private, loopback or reserved address` : `${field} must name a public host`)
}

export interface SongShape {
  durationSec?: number | undefined
  sections?: SectionRequest[] | undefined
  tailReserveSec?: number | undefined
  referenceImageUrls?: string[] | undefined
}

/** Checks the rules above; returns the song length to aim for. */
export function checkSongRequest(body: SongShape): { durationSec: number } {
  const sections = body.sections ?? []
  let previousEnd = 0
  sections.forEach((section, index) => {
    const field = `body.sections.${index}`
    if (section.endSec <= section.startSec) throw invalid(`${field}.endSec`, `sections[${index}].endSec must be greater than its startSec`)
    if (section.startSec < previousEnd) {
      throw invalid(
        `${field}.startSec`,
        `sections[${index}] starts at ${section.startSec} s, before the previous section ends (${previousEnd} s): sections are ordered and do not overlap`,
      )
    }
    if (body.durationSec !== undefined && section.endSec > body.durationSec) {
      throw invalid(`${field}.endSec`, `sections[${index}] ends at ${section.endSec} s, after the song's durationSec (${body.durationSec} s)`)
    }
    previousEnd = section.endSec
  })
  const durationSec = body.durationSec ?? (sections.length > 0 ? Math.max(MIN_DURATION_SEC, previousEnd) : DEFAULT_DURATION_SEC)
  if (durationSec > MAX_DURATION_SEC) throw invalid('body.sections', `the sections end at ${previousEnd} s; a song is at most ${MAX_DURATION_SEC} s`)
  if (body.tailReserveSec !== undefined && body.tailReserveSec >= durationSec) {
    throw invalid('body.tailReserveSec', 'tailReserveSec must be shorter than the song')
  }
  body.referenceImageUrls?.forEach((url, index) => {
    assertPublicHttpUrl(url, `body.referenceImageUrls.${index}`)
  })
  return { durationSec }
}
