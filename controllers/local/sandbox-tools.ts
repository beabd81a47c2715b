// The host tools a sandbox is built with (bwrap, prlimit) and how executables are found on the
// host; SandboxUnavailableError is what a run rejects with when the host lacks something it needs.

import { constants as fsConstants } from 'node:fs'
import { access } from 'node:fs/promises'
import path from 'node:path'

export class SandboxUnavailableError extends Error {
  override name = 'SandboxUnavailableError'
}

export const isExecutable = (p: string) =>
  access(p, fsConstants.X_OK).then(
    () => true,
    () => false,
  )

/** Where host tools are looked for when the service has no PATH at all (env -i, a bare unit). */
export const FALLBACK_TOOL_DIRS = ['/usr/bin', '/bin', '/usr/local/bin', '/usr/sbin', '/sbin']

/**
 * A host tool (bwrap, prlimit) on `searchPath` (default: the service's PATH), in PATH order. Only
 * when PATH is unset or empty are the standard system dirs searched instead, so an operator who
 * leaves a tool off PATH is believed.
 */
export async function findTool(name: string, searchPath: string | undefined = process.env.PATH): Promise<string | null> {
  const dirs = (searchPath ?? '').split(':').filter((dir) => dir.startsWith('/'))
  for (const dir of dirs.length > 0 ? dirs : FALLBACK_TOOL_DIRS) {
    if (await isExecutable(path.join(dir, name))) return path.join(dir, name)
  }
  return null
}

/** `name` on the service's PATH, or null; no fallback dirs (interpreter discovery lists those itself). */
export async function which(name: string): Promise<string | null> {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && (await isExecutable(path.join(dir, name)))) return path.join(dir, name)
  }
  return null
}

/** bwrap and prlimit (looked up on `searchPath`, default PATH), or the reason the sandbox cannot run here. */
export async function sandboxTools(searchPath?: string): Promise<{ bwrap: string; prlimit: string } | { missing: string }> {
  const bwrap = await findTool('bwrap', searchPath ?? process.env.PATH)
  if (!bwrap) return { missing: 'bwrap (bubblewrap) is not installed (not on PATH): apt-get install bubblewrap' }
  const prlimit = await findTool('prlimit', searchPath ?? process.env.PATH)
  if (!prlimit) return { missing: 'prlimit (util-linux) is not installed (not on PATH): apt-get install util-linux' }
  return { bwrap, prlimit }
}
