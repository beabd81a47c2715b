// forms: hosted forms. The page is GET {scheduler_url}/f/{form_id} (plain HTML), submissions are
// POST {scheduler_url}/f/{form_id} (JSON or an HTML form post); the task reads them back.
//   POST /forms {title, fields: [{name, label?, type?, required?}]} → 201 {form_id, submit_url, url}
//   GET  /forms/{id}/submissions?after=&limit=                      → 200 {form_id, submissions, next_after}
import { Type, type Static } from '@sinclair/typebox'
import type { Queryable } from '../../../platform/db/index.ts'
import { AppError } from '../../../platform/errors.ts'
import { escapeHtml } from '../../../platform/html.ts'
import { check, publicUrl, randomId } from '../common.ts'
import { queryInt, type SiblingRoute } from './types.ts'

export const FIELD_TYPES = ['text', 'textarea', 'email', 'number', 'checkbox'] as const
export const MAX_SUBMISSION_VALUE_CHARS = 10_000

export const FormField = Type.Object(
  {
    name: Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]{0,63}$', description: 'Key of the value in a submission' }),
    label: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    // A union of literals, not StringEnum: TypeBox's Value.Check (used for sibling bodies) cannot check Unsafe schemas.
    type: Type.Optional(
      Type.Union(
        FIELD_TYPES.map((v) => Type.Literal(v)),
        { description: 'Default text' },
      ),
    ),
    required: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
)

export const CreateFormBody = Type.Object(
  {
    title: Type.String({ minLength: 1, maxLength: 200 }),
    fields: Type.Array(FormField, { minItems: 1, maxItems: 50 }),
  },
  { additionalProperties: false },
)

export interface StoredField {
  name: string
  label: string
  type: (typeof FIELD_TYPES)[number]
  required: boolean
}

export interface StoredForm {
  id: string
  title: string
  fields: StoredField[]
}

const FORM_ID = '(fm_[a-z2-7]{20})'

function normalizeFields(fields: Static<typeof CreateFormBody>['fields']): StoredField[] {
  const seen = new Set<string>()
  return fields.map((f, i) => {
    if (seen.has(f.name)) throw new AppError('VALIDATION_ERROR', `body.fields.${i}.name ${f.name} is used twice`, { field: `body.fields.${i}.name` })
    seen.add(f.name)
    return { name: f.name, label: f.label ?? f.name, type: f.type ?? 'text', required: f.required === true }
  })
}

export const formsRoutes: SiblingRoute[] = [
  {
    method: 'POST',
    pattern: /^\/forms$/,
    async handle(ctx, request) {
      check(CreateFormBody, request.body)
      const fields = normalizeFields(request.body.fields)
      const id = randomId('fm_')
      await ctx.db.query('insert into scheduler_forms (id, task_id, run_id, title, fields, created_at) values ($1, $2, $3, $4, $5, $6)', [
        id,
        ctx.taskId,
        ctx.runId,
        request.body.title,
        JSON.stringify(fields),
        ctx.clock.now(),
      ])
      const url = publicUrl(ctx.publicSchedulerUrl, `f/${id}`)
      return { status: 201, body: { form_id: id, submit_url: url, url } }
    },
  },
  {
    method: 'GET',
    pattern: new RegExp(`^/forms/${FORM_ID}/submissions$`),
    async handle(ctx, request, [formId]) {
      const owned = await ctx.db.query('select 1 from scheduler_forms where id = $1 and task_id = $2', [formId, ctx.taskId])
      if (owned.length === 0) throw new AppError('not_found', `This task has no form ${formId}`)
      const after = queryInt(request.query, 'after', 0, 0, Number.MAX_SAFE_INTEGER)
      const limit = queryInt(request.query, 'limit', 100, 1, 1000)
      const rows = await ctx.db.query<{ id: bigint; data: unknown; created_at: Date }>(
        'select id, data, created_at from scheduler_form_submissions where form_id = $1 and id > $2 order by id limit $3',
        [formId, after, limit],
      )
      const submissions = rows.map((r) => ({ id: Number(r.id), data: r.data, created_at: r.created_at.toISOString() }))
      return { status: 200, body: { form_id: formId, submissions, next_after: submissions.length === limit ? submissions.at(-1)!.id : null } }
    },
  },
]

export async function loadForm(db: Queryable, formId: string): Promise<StoredForm | undefined> {
  const rows = await db.query<{ id: string; title: string; fields: StoredField[] }>('select id, title, fields from scheduler_forms where id = $1', [formId])
  return rows[0]
}

/**
 * The stored values of one submission: declared fields only (others are dropped), strings cut to
 * no more than MAX_SUBMISSION_VALUE_CHARS, checkboxes as booleans, numbers as numbers. A missing
 * required field or a malformed value is a 400 naming body.<field>.
 */
export function submissionValues(form: StoredForm, input: Record<string, unknown>): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {}
  for (const field of form.fields) {
    const raw = input[field.name]
    const fieldName = `body.${field.name}`
    if (field.type === 'checkbox') {
      const on = raw === true || raw === 'on' || raw === 'true' || raw === '1'
      if (field.required && !on) throw new AppError('VALIDATION_ERROR', `${fieldName} must be checked`, { field: fieldName })
      out[field.name] = on
      continue
    }
    const value = typeof raw === 'string' ? raw.trim() : typeof raw === 'number' && Number.isFinite(raw) ? String(raw) : undefined
    if (value === undefined || value === '') {
      if (field.required) throw new AppError('VALIDATION_ERROR', `${fieldName} is required`, { field: fieldName })
      continue
    }
    if (value.length > MAX_SUBMISSION_VALUE_CHARS)
      throw new AppError('VALIDATION_ERROR', `${fieldName} is longer than ${MAX_SUBMISSION_VALUE_CHARS} characters`, { field: fieldName })
    if (field.type === 'email' && !/^[^\s@]+@[^\s@]+$/.test(value)) throw new AppError('VALIDATION_ERROR', `${fieldName} is not an e-mail address`, { field: fieldName })
    if (field.type === 'number') {
      const n = Number(value)
      if (!Number.isFinite(n)) throw new AppError('VALIDATION_ERROR', `${fieldName} is not a number`, { field: fieldName })
      out[field.name] = n
      continue
    }
    out[field.name] = value
  }
  return out
}

/** The hosted page: every value escaped, posting back to the same URL. */
export function formPage(form: StoredForm): string {
  const inputs = form.fields
    .map((f) => {
      const name = escapeHtml(f.name)
      const required = f.required ? ' required' : ''
      const control =
        f.type === 'textarea'
          ? `<textarea name="${name}" id="${name}"${required}></textarea>`
          : `<input type="${f.type}" name="${name}" id="${name}"${f.type === 'number' ? ' step="any"' : ''}${required}>`
      return `<p><label for="${name}">${escapeHtml(f.label)}</label><br>${control}</p>`
    })
    .join('\n')
  return `<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${escapeHtml(form.title)}</title></head>
<body><h1>${escapeHtml(form.title)}</h1>
<form method="post" action="${escapeHtml(form.id)}">
${inputs}
<p><button type="submit">Submit</button></p>
</form></body></html>
`
}

export async function storeSubmission(db: Queryable, formId: string, values: Record<string, unknown>, now: Date): Promise<number> {
  const rows = await db.query<{ id: bigint }>('insert into scheduler_form_submissions (form_id, data, created_at) values ($1, $2, $3) returning id', [
    formId,
    JSON.stringify(values),
    now,
  ])
  return Number(rows[0]!.id)
}
