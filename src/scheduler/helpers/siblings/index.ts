// The first-party siblings by name (the rate card's SIBLINGS), each a table of routes.
import { cdnRoutes } from './cdn.ts'
import { formsRoutes } from './forms.ts'
import { inboxRoutes } from './inbox.ts'
import { screenshotRoutes } from './screenshot.ts'
import type { SiblingRoute } from './types.ts'
import { urlshortenerRoutes } from './urlshortener.ts'
import type { SiblingName } from '../../contract/index.ts'

export const SIBLING_ROUTES: Readonly<Record<SiblingName, readonly SiblingRoute[]>> = {
  urlshortener: urlshortenerRoutes,
  cdn: cdnRoutes,
  forms: formsRoutes,
  screenshot: screenshotRoutes,
  inbox: inboxRoutes,
}

export { dispatch } from './types.ts'
export type { ScreenshotConfig, SiblingContext, SiblingRequest, SiblingResponse, SiblingRoute } from './types.ts'
