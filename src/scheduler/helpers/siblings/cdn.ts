// cdn: a task's public files at GET {scheduler_url}/cdn/{taskId}/{name}; publishing a name again
// replaces the file. Size cap: hard_caps.max_artifact_bytes.
//   POST /files {name, data_base64, content_type?} → 201 {name, url, bytes, content_type}
//   GET  /files                                     → 200 {files: [{name, url, bytes, content_type, updated_at}]}
import { Type } from '@sinclair/typebox'
import { AppError } from '../../../platform/errors.ts'
import { CONTENT_TYPE_PATTERN, FILE_NAME_PATTERN, check, decodeBase64, publicUrl, publishFile } from '../common.ts'
import type { SiblingRoute } from './types.ts'

export const PublishFileBody = Type.Object(
  {
    name: Type.String({ pattern: FILE_NAME_PATTERN, description: 'File name: letters, digits, . _ - (starting with a letter or digit), at most 128' }),
    data_base64: Type.String({ description: 'The bytes, standard base64' }),
    content_type: Type.Optional(Type.String({ maxLength: 255, pattern: CONTENT_TYPE_PATTERN, description: 'Default application/octet-stream' })),
  },
  { additionalProperties: false },
)

export function cdnPath(taskId: string, name: string): string {
  return `cdn/${taskId}/${name}`
}

export const cdnRoutes: SiblingRoute[] = [
  {
    method: 'POST',
    pattern: /^\/files$/,
    async handle(ctx, request) {
      check(PublishFileBody, request.body)
      const data = decodeBase64(request.body.data_base64)
      if (data === undefined) throw new AppError('VALIDATION_ERROR', 'body.data_base64 is not valid base64', { field: 'body.data_base64' })
      const cap = ctx.rates.hard_caps.max_artifact_bytes
      if (data.length > cap) throw new AppError('payload_too_large', `A CDN file holds at most ${cap} bytes; this one has ${data.length}`, { field: 'body.data_base64' })
      const file = await publishFile(ctx, {
        path: cdnPath(ctx.taskId, request.body.name),
        taskId: ctx.taskId,
        runId: ctx.runId,
        kind: 'cdn',
        name: request.body.name,
        contentType: request.body.content_type ?? 'application/octet-stream',
        data,
      })
      return { status: 201, body: { name: request.body.name, url: file.url, bytes: file.bytes, content_type: file.content_type } }
    },
  },
  {
    method: 'GET',
    pattern: /^\/files$/,
    async handle(ctx) {
      const rows = await ctx.db.query<{ path: string; name: string; bytes: bigint; content_type: string; updated_at: Date }>(
        "select path, name, bytes, content_type, updated_at from scheduler_public_files where task_id = $1 and kind = 'cdn' order by name limit 1000",
        [ctx.taskId],
      )
      return {
        status: 200,
        body: {
          files: rows.map((r) => ({
            name: r.name,
            url: publicUrl(ctx.publicSchedulerUrl, r.path),
            bytes: Number(r.bytes),
            content_type: r.content_type,
            updated_at: r.updated_at.toISOString(),
          })),
        },
      }
    },
  },
]
