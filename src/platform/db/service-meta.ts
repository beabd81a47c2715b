// Values the service generates once per database and every process shares (the secrets that are
// not configured: MPP challenges, scheduler and review keys, the offer-receipt signing key), kept
// as JSON strings in service_meta.
import type { Queryable } from './index.ts'

/**
 * The string kept under `key`, made by `generate` the first time any process asks. Replicas
 * starting at once both insert; the conflict keeps the first, and both read it back.
 */
export async function generatedOnce(db: Queryable, key: string, generate: () => string): Promise<string> {
  await db.query(`insert into service_meta (key, value) values ($1, $2) on conflict (key) do nothing`, [key, JSON.stringify(generate())])
  const rows = await db.query<{ value: unknown }>(`select value from service_meta where key = $1`, [key])
  const value = rows[0]?.value
  if (typeof value !== 'string') throw new Error(`${key} missing from service_meta`)
  return value
}
