// Annotation review sessions (SPEC "POST /api/v1/annotate/reviews", "Review session").
import { Type } from '@sinclair/typebox'

/** Base64 length of 10 MiB decoded: 4 × ceil(10485760 / 3). */
export const MAX_ZIP_BASE64_CHARS = 13981016

export const ReviewRequest = Type.Object(
  {
    url: Type.Optional(Type.String({ format: 'uri', maxLength: 2048, description: 'Live page to annotate; mutually exclusive with zipData' })),
    zipData: Type.Optional(
      Type.String({
        maxLength: MAX_ZIP_BASE64_CHARS,
        pattern: '^[A-Za-z0-9+/]*={0,2}$',
        contentEncoding: 'base64',
        contentMediaType: 'application/zip',
        description: 'Base64 zip of static site files (HTML, CSS, JS), at most 10 MiB decoded; the site is hosted for the reviewer. Mutually exclusive with url',
      }),
    ),
    entryFile: Type.String({
      minLength: 1,
      maxLength: 255,
      pattern: '^(?!/)(?!(.*/)?\\.\\.(/|$)).+$',
      default: 'index.html',
      description: 'Entry filename inside the zip (default index.html); used only with zipData',
    }),
    callbackUrl: Type.Optional(Type.String({ format: 'uri', maxLength: 2048, description: 'Receives the full review JSON by POST when the human submits' })),
  },
  {
    additionalProperties: false,
    not: { required: ['url', 'zipData'] },
    description: 'Send exactly one of url or zipData.',
  },
)

export const ReviewSession = Type.Object(
  {
    reviewId: Type.String({ format: 'uuid', description: 'Identifier of the session' }),
    shareUrl: Type.String({ description: 'URL for the human reviewer' }),
    bundleUrl: Type.Optional(Type.String({ description: 'Download URL of the original source zip; only for code-bundle reviews' })),
  },
  { additionalProperties: false },
)
