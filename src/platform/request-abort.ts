import type { FastifyReply } from 'fastify'

/** Aborted when the caller goes away before its answer is written, so the work it asked for stops. */
export function abortOnClose(reply: FastifyReply): AbortSignal {
  const controller = new AbortController()
  reply.raw.once('close', () => {
    if (!reply.raw.writableEnded) controller.abort(new Error('the caller went away'))
  })
  return controller.signal
}
