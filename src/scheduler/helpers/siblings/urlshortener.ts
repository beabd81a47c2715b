// urlshortener: short links of a task, served publicly as GET {scheduler_url}/s/{code} → 302.
//   POST /links {url}      → 201 {code, short_url, url}
//   GET  /links/{code}     → 200 {code, short_url, url, hits, created_at} (the task's own links)
import { Type } from '@sinclair/typebox'
import { isUniqueViolation } from '../../../platform/db/index.ts'
import { AppError } from '../../../platform/errors.ts'
import { check, publicUrl, shortCode } from '../common.ts'
import type { SiblingContext, SiblingRoute } from './types.ts'

export const CreateLinkBody = Type.Object(
  { url: Type.String({ minLength: 1, maxLength: 2048, description: 'Absolute http(s) URL the short link redirects to' }) },
  { additionalProperties: false },
)

const CODE = '([A-Za-z0-9]{4,16})'

function linkView(ctx: Pick<SiblingContext, 'publicSchedulerUrl'>, row: { code: string; url: string }) {
  return { code: row.code, short_url: publicUrl(ctx.publicSchedulerUrl, `s/${row.code}`), url: row.url }
}

export const urlshortenerRoutes: SiblingRoute[] = [
  {
    method: 'POST',
    pattern: /^\/links$/,
    async handle(ctx, request) {
      check(CreateLinkBody, request.body)
      let target: URL
      try {
        target = new URL(request.body.url)
      } catch {
        throw new AppError('VALIDATION_ERROR', 'body.url must be an absolute URL', { field: 'body.url' })
      }
      if (target.protocol !== 'http:' && target.protocol !== 'https:') {
        throw new AppError('VALIDATION_ERROR', 'body.url must be an http or https URL', { field: 'body.url' })
      }
      for (let attempt = 0; ; attempt++) {
        const code = shortCode()
        try {
          await ctx.db.query('insert into scheduler_short_links (code, task_id, run_id, url, created_at) values ($1, $2, $3, $4, $5)', [
            code,
            ctx.taskId,
            ctx.runId,
            target.href,
            ctx.clock.now(),
          ])
          return { status: 201, body: linkView(ctx, { code, url: target.href }) }
        } catch (err) {
          if (!isUniqueViolation(err) || attempt >= 3) throw err
        }
      }
    },
  },
  {
    method: 'GET',
    pattern: new RegExp(`^/links/${CODE}$`),
    async handle(ctx, _request, [code]) {
      const rows = await ctx.db.query<{ code: string; url: string; hits: bigint; created_at: Date }>(
        'select code, url, hits, created_at from scheduler_short_links where code = $1 and task_id = $2',
        [code, ctx.taskId],
      )
      const row = rows[0]
      if (row === undefined) throw new AppError('not_found', `This task has no short link ${code}`)
      return { status: 200, body: { ...linkView(ctx, row), hits: Number(row.hits), created_at: row.created_at.toISOString() } }
    },
  },
]

/** The public redirect target of `code`, counting the hit; undefined when there is none. */
export async function resolveShortLink(db: SiblingContext['db'], code: string): Promise<string | undefined> {
  const rows = await db.query<{ url: string }>('update scheduler_short_links set hits = hits + 1 where code = $1 returning url', [code])
  return rows[0]?.url
}
