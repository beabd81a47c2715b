// The media service in this process: when the media role runs here, or when the gateway runs
// without MEDIA_URL (it then sells from this one). Alone (without the gateway) it serves its
// internal API on its own listener, behind the bearer the gateway presents.
import { ConfigError } from '../platform/config.ts'
import type { Role } from '../platform/roles.ts'
import { early, type RoleModule } from './context.ts'
import { reportMediaTools } from './prerequisites.ts'

const withoutGateway = (roles: readonly Role[]) => roles.includes('media') && !roles.includes('gateway')

export const mediaRole: RoleModule = {
  name: 'media',
  takesPayments: false,
  wants: (config, roles) => roles.includes('media') || (roles.includes('gateway') && !config.mediaUrl),
  checkConfig(config, roles) {
    if (withoutGateway(roles) && !config.mediaInternalToken) {
      throw new ConfigError('MEDIA_INTERNAL_TOKEN', 'is required when the media role runs without the gateway (the gateway presents it)')
    }
  },
  preload(config, roles) {
    // The tools are asked for their versions first, while this process is small and cheap to fork.
    const toolCheck = early(import('../media/prerequisites.ts').then(({ checkMediaPrerequisites }) => checkMediaPrerequisites({ soundfont: config.soundfontPath })))
    const serviceModule = early(import('../media/service.ts'))
    const appModule = withoutGateway(roles) ? early(import('../media/app.ts')) : undefined
    return {
      async open(context) {
        const { config, logger, blobs } = context
        const { createMediaService } = await serviceModule
        const media = createMediaService({
          blobs,
          logger,
          publicMediaUrl: config.publicMediaUrl,
          concurrency: config.mediaConcurrency,
          analysisThreads: config.mediaAnalysisThreads,
          soundfont: config.soundfontPath,
          song: config.songUpstreamUrl ? { url: config.songUpstreamUrl, apiKey: config.songUpstreamApiKey, model: config.songUpstreamModel } : undefined,
          speech: config.speechUpstreamUrl ? { url: config.speechUpstreamUrl, apiKey: config.speechUpstreamApiKey, model: config.speechUpstreamModel } : undefined,
          upstreamTimeoutMs: config.mediaUpstreamTimeoutMs,
          upstreamRetries: config.mediaUpstreamRetries,
          toolCheck,
        })
        // A missing tool is said once, one line per package with its fix; the rest of the product
        // runs, songs/speech answer 503 until it is installed.
        void media
          .prerequisites()
          .then((missing) => reportMediaTools(logger, missing))
          .catch((error: unknown) => logger.warn({ err: error }, 'media: tool check failed'))
        const buildMediaApp = appModule ? (await appModule).buildMediaApp : undefined
        return {
          shares: { media },
          listeners: buildMediaApp
            ? [
                {
                  name: 'media',
                  port: config.mediaPort,
                  diagnostics: { tools: () => media.prerequisites() },
                  build: ({ readiness, diagnostics }) =>
                    buildMediaApp({
                      name: 'media',
                      logger,
                      metrics: context.metrics,
                      bodyLimitBytes: config.bodyLimitBytes,
                      readiness,
                      diagnostics,
                      hosts: context.hosts,
                      service: media,
                      blobs,
                      internalToken: config.mediaInternalToken as string,
                    }),
                },
              ]
            : [],
          stop: () => media.close(),
        }
      },
    }
  },
}
