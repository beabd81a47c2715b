// The media role's own listener (MEDIA_PORT) when it runs apart from the gateway: the internal
// generation API the gateway calls (after it has authorised the payment; never public, a shared
// bearer and the chart's NetworkPolicy keep it so), the hosted audio under /media, and probes.
import { timingSafeEqual } from 'node:crypto'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { SongRequest, SongResult } from '../catalog/schemas/songs.ts'
import { SpeechRequest, SpeechResult } from '../catalog/schemas/speech.ts'
import type { BlobStore } from '../platform/blobs.ts'
import { AppError } from '../platform/errors.ts'
import { createHttpApp, type HttpAppOptions } from '../platform/http.ts'
import { abortOnClose } from '../platform/request-abort.ts'
import { MEDIA_SONGS_PATH, MEDIA_SPEECH_PATH, MEDIA_TOOLS_PATH } from './client.ts'
import { registerAudioHosting } from './hosting.ts'
import type { MediaService } from './service.ts'

export interface MediaAppDeps extends HttpAppOptions {
  service: MediaService
  blobs: BlobStore
  /** Bearer the gateway presents (MEDIA_INTERNAL_TOKEN). */
  internalToken: string
}

const SongOutcomeSchema = Type.Object(
  { result: Type.Omit(SongResult, ['price_usdc']), ordered: Type.Integer({ minimum: 1 }), delivered: Type.Integer({ minimum: 1 }) },
  { additionalProperties: false },
)

export function buildMediaApp(deps: MediaAppDeps): FastifyInstance {
  const app = createHttpApp(deps)
  const expected = Buffer.from(`Bearer ${deps.internalToken}`)
  const authorize = async (request: FastifyRequest) => {
    const given = Buffer.from(request.headers.authorization ?? '')
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw new AppError('bearer_required', 'the internal media API needs the gateway bearer')
  }
  const routes = app.withTypeProvider<TypeBoxTypeProvider>()
  routes.post(MEDIA_SONGS_PATH, { schema: { body: SongRequest, response: { 200: SongOutcomeSchema } }, preHandler: authorize }, async (request, reply) =>
    deps.service.songs(request.body, abortOnClose(reply)),
  )
  routes.post(MEDIA_SPEECH_PATH, { schema: { body: SpeechRequest, response: { 200: Type.Omit(SpeechResult, ['price_usdc']) } }, preHandler: authorize }, async (request, reply) =>
    deps.service.speech(request.body, abortOnClose(reply)),
  )
  routes.get(
    `${MEDIA_TOOLS_PATH}/:kind`,
    {
      schema: {
        params: Type.Object({ kind: Type.Union([Type.Literal('song'), Type.Literal('speech')]) }),
        response: { 200: Type.Object({ missing: Type.Union([Type.String(), Type.Null()]) }, { additionalProperties: false }) },
      },
      preHandler: authorize,
    },
    async (request) => ({ missing: (await deps.service.unavailable?.(request.params.kind)) ?? null }),
  )
  registerAudioHosting(app, { blobs: deps.blobs })
  return app
}
