// store_artifact(name, data, content_type?, stable?): a public file of the task.
//   stable=true  → {scheduler_url}/artifacts/{taskId}/{name}, one URL per (task, name), replaced
//                  on every store (served with Cache-Control: no-cache);
//   default      → {scheduler_url}/artifacts/{taskId}/{id}/{name}, a new URL per call that never
//                  changes (served as immutable).
// Caps (rates.hard_caps): max_artifact_bytes per file; max_artifacts_per_run and
// max_artifact_bytes_per_run per run, counted with one conditional UPDATE before the write.
import type { BlobStore } from '../../platform/blobs.ts'
import type { Clock } from '../../platform/clock.ts'
import type { Db } from '../../platform/db/index.ts'
import { AppError } from '../../platform/errors.ts'
import type { SchedulerRates } from '../domain/rates.ts'
import { decodeBase64, isContentType, publishFile, randomId } from './common.ts'
import { releaseArtifact, reserveArtifact } from './meters.ts'
import type { HelperRun } from './run.ts'

export interface StoreArtifactInput {
  name: string
  data?: string
  data_base64?: string
  content_type?: string
  stable?: boolean
}

export interface StoreArtifactOutput {
  url: string
  /** URL path below {scheduler_url}, e.g. /artifacts/t_x/report.html. */
  path: string
  bytes: number
  content_type: string
  stable: boolean
}

export interface ArtifactDeps {
  db: Db
  blobs: BlobStore
  clock: Clock
  rates: SchedulerRates
  publicSchedulerUrl: string
}

export function artifactPath(taskId: string, name: string, stable: boolean): string {
  return stable ? `artifacts/${taskId}/${name}` : `artifacts/${taskId}/${randomId('a', 16)}/${name}`
}

export async function storeArtifact(deps: ArtifactDeps, run: HelperRun, input: StoreArtifactInput): Promise<StoreArtifactOutput> {
  if (!run.spec.artifacts.enabled) {
    throw new AppError('VALIDATION_ERROR', 'store_artifact needs artifacts on the task: create it with "artifacts": {"enabled": true}', { field: 'task.artifacts' })
  }
  if ((input.data === undefined) === (input.data_base64 === undefined)) {
    throw new AppError('VALIDATION_ERROR', 'Send exactly one of data (text) and data_base64 (bytes)', { field: input.data === undefined ? 'body.data' : 'body.data_base64' })
  }
  let data: Buffer
  if (input.data_base64 !== undefined) {
    const decoded = decodeBase64(input.data_base64)
    if (decoded === undefined) throw new AppError('VALIDATION_ERROR', 'body.data_base64 is not valid base64', { field: 'body.data_base64' })
    data = decoded
  } else {
    data = Buffer.from(input.data!, 'utf8')
  }
  const contentType = input.content_type ?? (input.data !== undefined ? 'text/plain; charset=utf-8' : 'application/octet-stream')
  if (!isContentType(contentType)) throw new AppError('VALIDATION_ERROR', 'body.content_type is not a media type (type/subtype)', { field: 'body.content_type' })
  const caps = deps.rates.hard_caps
  const dataField = input.data === undefined ? 'body.data_base64' : 'body.data'
  if (data.length > caps.max_artifact_bytes) {
    throw new AppError('payload_too_large', `An artifact holds at most ${caps.max_artifact_bytes} bytes; this one has ${data.length}`, { field: dataField })
  }
  const reserved = await reserveArtifact(deps.db, run.runId, data.length, caps.max_artifacts_per_run, caps.max_artifact_bytes_per_run)
  if (!reserved.ok) {
    if (reserved.refusal === 'run_ended') throw new AppError('TOKEN_EXPIRED', `Run ${run.runId} has ended`, { field: 'header.authorization' })
    if (reserved.refusal === 'count_cap') {
      throw new AppError('RATE_LIMIT', `A run stores at most ${caps.max_artifacts_per_run} artifacts (max_artifacts_per_run)`, {
        extensions: { max_artifacts_per_run: caps.max_artifacts_per_run, artifacts_count: reserved.meters.artifacts_count },
      })
    }
    throw new AppError(
      'payload_too_large',
      `A run stores at most ${caps.max_artifact_bytes_per_run} artifact bytes (max_artifact_bytes_per_run); ${reserved.meters.artifacts_bytes} are used`,
      {
        field: dataField,
        extensions: { max_artifact_bytes_per_run: caps.max_artifact_bytes_per_run, artifacts_bytes: reserved.meters.artifacts_bytes.toString() },
      },
    )
  }
  const stable = input.stable === true
  try {
    const file = await publishFile(deps, {
      path: artifactPath(run.taskId, input.name, stable),
      taskId: run.taskId,
      runId: run.runId,
      kind: 'artifact',
      name: input.name,
      contentType,
      data,
      stable,
    })
    return { url: file.url, path: `/${file.path}`, bytes: file.bytes, content_type: contentType, stable }
  } catch (err) {
    await releaseArtifact(deps.db, run.runId, data.length)
    throw err
  }
}
