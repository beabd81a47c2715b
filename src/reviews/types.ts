// Ports and shapes shared by the parts of review sessions: the zip reader, the service (create,
// read, submit), the isolated origin that hosts sites and proxies live pages, the reviewer page and
// the callback delivery. The review JSON's schema lives in src/catalog/schemas/reviews.ts.
import type { Static } from '@sinclair/typebox'
import type { ReviewDocument, ReviewPin, ReviewSubmission, ConsoleEntry } from '../catalog/schemas/reviews.ts'
import type { StaticAsset } from '../platform/html.ts'

export type { ReviewDocument, ReviewPin, ReviewSubmission, ConsoleEntry }
export type ReviewJson = Static<typeof ReviewDocument>
export type SubmissionJson = Static<typeof ReviewSubmission>

/** Why a zip was refused (problem+json `reason`, listed in docs/reviews.md). */
export type ZipRejection =
  | 'base64' // not strict base64 (RFC 4648 §4 alphabet, padded, length % 4 = 0)
  | 'too_large' // more than ZIP_MAX_BYTES decoded (413)
  | 'not_zip' // no PK\x03\x04 magic, or no central directory
  | 'corrupt' // yauzl could not read an entry
  | 'entry_count' // more than ZIP_MAX_ENTRIES (413)
  | 'entry_too_large' // one entry inflates past ZIP_MAX_ENTRY_BYTES (413)
  | 'total_too_large' // all entries inflate past ZIP_MAX_TOTAL_BYTES (413)
  | 'ratio' // inflated/compressed above ZIP_MAX_RATIO (413)
  | 'size_mismatch' // an entry inflates to other than its declared size
  | 'unsafe_path' // absolute, `..`, backslash, drive letter, control characters, empty segment, too long
  | 'symlink'
  | 'encrypted'
  | 'duplicate_path' // two entries with the same path after NFC normalisation (or differing only in case)
  | 'reserved_path' // under the isolated origin's own prefix (/__agent_gateway__/)
  | 'empty' // no file left
  | 'entry_file_missing' // entryFile is not among the files (field body.entryFile)

/** One file of an uploaded site, read from the zip in memory. */
export interface SiteFileData {
  /** `/`-separated, NFC, no leading slash, single top folder stripped (e.g. `css/site.css`). */
  path: string
  data: Buffer
  contentType: string
  /** Hex sha256 of data. */
  sha256: string
}

export interface ReadSite {
  files: SiteFileData[]
  /** entryFile as found (after the same normalisation as the paths). */
  entryFile: string
  /** Sum of the files' bytes. */
  totalBytes: number
  /** The decoded archive (kept as the bundle). */
  zip: Buffer
}

/** A hosted file: where its bytes are in the blob store. */
export interface SiteFile {
  path: string
  blobKey: string
  contentType: string
  bytes: number
  sha256: string
}

/**
 * What the isolated origin serves for one site label; from `expiresAt` (ms since the epoch) on it
 * answers 410 instead.
 */
export type HostedSite =
  | { kind: 'zip'; reviewId: string; label: string; entryFile: string; files: ReadonlyMap<string, SiteFile>; expiresAt?: number }
  | { kind: 'url'; reviewId: string; label: string; url: string; expiresAt?: number }

/** Finds the site of a label (the host's first DNS label); cached by the caller as it never changes (expiry is a time in it). */
export interface SiteDirectory {
  siteByLabel(label: string): Promise<HostedSite | undefined>
}

/**
 * Where sites and the reviewer page live. Each review's site has its own origin
 * (`PUBLIC_REVIEWS_URL` with `{site}` replaced by the review's label, e.g.
 * `http://s-3k…q.localhost:4025`); the reviewer page is on the gateway's origin.
 */
export interface ReviewOrigins {
  /** The gateway's origin: the reviewer page's, and the only frame ancestor a site accepts. */
  readonly reviewer: string
  /** Origin of a site label. */
  site(label: string): string
  /** The label a Host header names, or undefined when it is not a site host. */
  labelOfHost(host: string | undefined): string | undefined
  /** CSP source matching every site origin (the reviewer page's frame-src), e.g. `http://*.localhost:4025`. */
  readonly sitePattern: string
}

/** Path prefix of the isolated origin's own files (overlay scripts, proxied cross-origin resources). */
export const SITE_RESERVED_PREFIX = '/__agent_gateway__/'

/**
 * The overlay the isolated origin adds to every HTML page of a site: `headTags` go first in
 * <head> (before the site's own scripts, so console errors are caught from the start); the files
 * they load are served at SITE_RESERVED_PREFIX + name.
 */
export interface SiteAssets {
  readonly headTags: string
  get(name: string): StaticAsset | undefined
}

/** What the reviewer page shows (rendered into its HTML as inert JSON, never as script). */
export interface ReviewerPageView {
  reviewId: string
  status: 'open' | 'submitted'
  source: { kind: 'zip'; entryFile: string; bundleUrl: string } | { kind: 'url'; url: string }
  /** The site frame's first address (site origin + entry path, or + the live page's path). */
  frameUrl: string
  /** The site frame's origin: the only origin whose messages the page accepts. */
  siteOrigin: string
  /** The screenshot page of a live URL on the site origin (the fallback), or null for bundles. */
  snapshotUrl: string | null
  /** POST the ReviewSubmission here (same origin as the page). */
  submitUrl: string
  /** The submitted review, when status is submitted. */
  review: ReviewJson | null
}

/** The reviewer page's files: the page itself and what it loads from /reviews/assets/. */
export interface ReviewerAssets {
  render(view: ReviewerPageView): string
  get(name: string): StaticAsset | undefined
}
