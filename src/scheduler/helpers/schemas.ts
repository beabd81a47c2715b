// Request and response schemas of the helper endpoint (POST {scheduler_url}/internal/v1/runs/{runId}/<helper>)
// and of the siblings' public routes.
import { Type } from '@sinclair/typebox'
import { MicrosString, ProblemSchema, StringEnum } from '../../catalog/schemas/common.ts'
import { CONTENT_TYPE_PATTERN, FILE_NAME_PATTERN } from './common.ts'
import { MAX_OUTPUT_TOKENS } from './llm.ts'
import { LLM_PROFILES } from '../contract/index.ts'

export const RunParams = Type.Object({ runId: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' }) }, { additionalProperties: false })

export const GenerateTextBody = Type.Object(
  {
    prompt: Type.String({ minLength: 1, maxLength: 400_000 }),
    model_alias: Type.Optional(StringEnum(LLM_PROFILES, { description: 'Profile whose model and token prices this call uses' })),
    model: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'A configured upstream model id' })),
    system: Type.Optional(Type.String({ maxLength: 200_000 })),
    max_output_tokens: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_OUTPUT_TOKENS })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 2 })),
    reasoning: Type.Optional(Type.Union([Type.Boolean(), StringEnum(['none', 'minimal', 'low', 'medium', 'high'] as const)])),
  },
  { additionalProperties: false },
)

export const GenerateTextResponse = Type.Object({
  text: Type.String(),
  model: Type.String(),
  usage: Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer() }),
  cost_usdc_micros: MicrosString(),
  metadata: Type.Record(Type.String(), Type.Unknown()),
})

export const CallBody = Type.Object(
  {
    capability: Type.String({ minLength: 1, maxLength: 200, description: 'First-party sibling name or marketplace capability id (publisher/capability)' }),
    path: Type.String({ minLength: 1, maxLength: 2048, pattern: '^/[\\x21-\\x7e]*$', description: 'Path (and query) on the target, starting with /' }),
    body: Type.Optional(Type.Unknown({ description: 'JSON body sent to the target' })),
    method: Type.Optional(Type.String({ pattern: '^(GET|POST|PUT|PATCH|DELETE|get|post|put|patch|delete)$', description: 'Default POST with a body, else GET' })),
    // Checked by the handler so a bad value is PRICE_UNKNOWN (SPEC), not a generic validation error.
    max_price_micros: Type.Optional(Type.Unknown({ description: 'Required for a marketplace capability: most this call may pay, integer micros' })),
  },
  { additionalProperties: false },
)

export const CallResponse = Type.Unknown({ description: "The target's body: JSON as sent, text as a string, other bytes as {content_type, data_base64}" })

export const StoreArtifactBody = Type.Object(
  {
    name: Type.String({ pattern: FILE_NAME_PATTERN, description: 'File name: letters, digits, . _ - (starting with a letter or digit), at most 128' }),
    data: Type.Optional(Type.String({ description: 'Text content (UTF-8)' })),
    data_base64: Type.Optional(Type.String({ description: 'Binary content, standard base64' })),
    content_type: Type.Optional(Type.String({ maxLength: 255, pattern: CONTENT_TYPE_PATTERN })),
    stable: Type.Optional(Type.Boolean({ description: 'true: one fixed URL per (task, name), overwritten; default: a new immutable URL' })),
  },
  { additionalProperties: false },
)

export const StoreArtifactResponse = Type.Object({
  url: Type.String(),
  path: Type.String(),
  bytes: Type.Integer(),
  content_type: Type.String(),
  stable: Type.Boolean(),
})

export const RequestContinuationBody = Type.Object({ delay_sec: Type.Optional(Type.Integer({ minimum: 0, maximum: 600, default: 0 })) }, { additionalProperties: false })

export const RequestContinuationResponse = Type.Object({
  accepted: Type.Boolean(),
  consecutive_continuations: Type.Integer(),
  max_consecutive_continuations: Type.Integer(),
  delay_sec: Type.Integer(),
  reason: Type.Optional(StringEnum(['max_consecutive_continuations', 'insufficient_funds', 'task_not_active'] as const)),
})

export const Problem = ProblemSchema

export const BinaryFile = Type.String({ description: 'The file bytes, with their stored content type' })

export const FormSubmissionResponse = Type.Object({ ok: Type.Literal(true), submission_id: Type.Integer() })
export const InboxIngestResponse = Type.Object({ ok: Type.Literal(true), message_id: Type.Integer() })

const Id = (prefix: string) => Type.String({ pattern: `^${prefix}[a-z2-7]{20}$` })
export const TaskSegment = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' })
export const FileSegment = Type.String({ pattern: FILE_NAME_PATTERN })
export const ShortCodeParams = Type.Object({ code: Type.String({ pattern: '^[A-Za-z0-9]{4,16}$' }) })
export const CdnParams = Type.Object({ taskId: TaskSegment, name: FileSegment })
export const StableArtifactParams = Type.Object({ taskId: TaskSegment, name: FileSegment })
export const ArtifactParams = Type.Object({ taskId: TaskSegment, id: Type.String({ pattern: '^a[a-z2-7]{16}$' }), name: FileSegment })
export const ShotParams = Type.Object({ taskId: TaskSegment, file: Type.String({ pattern: '^sh_[a-z2-7]{20}\\.png$' }) })
export const FormParams = Type.Object({ formId: Id('fm_') })
export const InboxParams = Type.Object({ inboxId: Id('ib_') })
