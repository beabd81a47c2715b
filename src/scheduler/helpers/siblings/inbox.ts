// inbox: an address a task reads mail from. The service has no SMTP listener: messages arrive as
// POST {scheduler_url}/inbox/{inbox_id} {from, subject, text} (an operator's inbound-mail route,
// a mail-to-webhook forwarder, or anybody given the URL).
//   POST /inboxes                                 → 201 {inbox_id, address, ingest_url}
//   GET  /inboxes/{id}/messages?after=&limit=     → 200 {inbox_id, messages: [{id, from, subject, text, received_at}], next_after}
import { Type } from '@sinclair/typebox'
import type { Queryable } from '../../../platform/db/index.ts'
import { AppError } from '../../../platform/errors.ts'
import { check, publicUrl, randomId } from '../common.ts'
import { queryInt, type SiblingRoute } from './types.ts'

export const MAX_MESSAGE_TEXT_CHARS = 1_000_000

export const CreateInboxBody = Type.Union([Type.Undefined(), Type.Null(), Type.Object({}, { additionalProperties: false })])

export const IncomingMessage = Type.Object(
  {
    from: Type.String({ minLength: 1, maxLength: 320 }),
    subject: Type.Optional(Type.String({ maxLength: 998 })),
    text: Type.Optional(Type.String({ maxLength: MAX_MESSAGE_TEXT_CHARS })),
  },
  { additionalProperties: false },
)

const INBOX_ID = '(ib_[a-z2-7]{20})'

export const inboxRoutes: SiblingRoute[] = [
  {
    method: 'POST',
    pattern: /^\/inboxes$/,
    async handle(ctx, request) {
      check(CreateInboxBody, request.body)
      const id = randomId('ib_')
      const address = `${id}@${ctx.inboxDomain}`
      await ctx.db.query('insert into scheduler_inboxes (id, task_id, run_id, address, created_at) values ($1, $2, $3, $4, $5)', [
        id,
        ctx.taskId,
        ctx.runId,
        address,
        ctx.clock.now(),
      ])
      return { status: 201, body: { inbox_id: id, address, ingest_url: publicUrl(ctx.publicSchedulerUrl, `inbox/${id}`) } }
    },
  },
  {
    method: 'GET',
    pattern: new RegExp(`^/inboxes/${INBOX_ID}/messages$`),
    async handle(ctx, request, [inboxId]) {
      const owned = await ctx.db.query('select 1 from scheduler_inboxes where id = $1 and task_id = $2', [inboxId, ctx.taskId])
      if (owned.length === 0) throw new AppError('not_found', `This task has no inbox ${inboxId}`)
      const after = queryInt(request.query, 'after', 0, 0, Number.MAX_SAFE_INTEGER)
      const limit = queryInt(request.query, 'limit', 100, 1, 1000)
      const rows = await ctx.db.query<{ id: bigint; from_address: string; subject: string; body_text: string; received_at: Date }>(
        'select id, from_address, subject, body_text, received_at from scheduler_inbox_messages where inbox_id = $1 and id > $2 order by id limit $3',
        [inboxId, after, limit],
      )
      const messages = rows.map((r) => ({ id: Number(r.id), from: r.from_address, subject: r.subject, text: r.body_text, received_at: r.received_at.toISOString() }))
      return { status: 200, body: { inbox_id: inboxId, messages, next_after: messages.length === limit ? messages.at(-1)!.id : null } }
    },
  },
]

/** Stores a message for `inboxId`; undefined when there is no such inbox. */
export async function ingestMessage(db: Queryable, inboxId: string, message: { from: string; subject?: string; text?: string }, now: Date): Promise<number | undefined> {
  const rows = await db.query<{ id: bigint }>(
    `insert into scheduler_inbox_messages (inbox_id, from_address, subject, body_text, received_at)
     select id, $2, $3, $4, $5 from scheduler_inboxes where id = $1 returning id`,
    [inboxId, message.from, message.subject ?? '', message.text ?? '', now],
  )
  return rows[0] === undefined ? undefined : Number(rows[0].id)
}
