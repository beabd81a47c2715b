// Whether a sandbox can start on this host at all: the tools, then one trivial sandbox.

import { execFile } from 'node:child_process'
import { SANDBOX_IDENTITY_ARGS, systemMountArgs } from './sandbox-args.ts'
import { acquireIdentity, DEFAULT_UID_BASE } from './sandbox-identity.ts'
import { sandboxTools } from './sandbox-tools.ts'

export type SandboxProbeResult = { ok: true } | { ok: false; reason: string; output: string; timedOut: boolean }

/**
 * Starts one trivial sandbox (`prlimit --core=0 -- bwrap <the run's namespace and mount flags> --
 * true`) as a run would: as a per-run uid when the service is root, since a root-owned bwrap may
 * create user namespaces where the unprivileged run uids may not. Catches what the tools' presence
 * does not: user namespaces disabled by sysctl, AppArmor or a container's seccomp profile, and a
 * bwrap too old for the run's flags. About 5 ms.
 */
export async function probeSandbox(tools: { bwrap: string; prlimit: string }, options: { uidBase?: number; timeoutMs?: number } = {}): Promise<SandboxProbeResult> {
  const mounts = await systemMountArgs()
  const id = acquireIdentity(options.uidBase ?? DEFAULT_UID_BASE)
  const timeoutMs = options.timeoutMs ?? 5000
  try {
    const args = [
      '--core=0',
      '--',
      tools.bwrap,
      ...SANDBOX_IDENTITY_ARGS,
      ...mounts,
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      '--remount-ro',
      '/',
      '--chdir',
      '/tmp',
      '--clearenv',
      '--setenv',
      'PATH',
      '/usr/bin:/bin',
      '--',
      'true',
    ]
    return await new Promise<SandboxProbeResult>((resolve) => {
      execFile(
        tools.prlimit,
        args,
        {
          cwd: '/',
          env: { PATH: '/usr/bin:/bin' },
          timeout: timeoutMs,
          killSignal: 'SIGKILL',
          maxBuffer: 64 * 1024,
          ...(id.setuid ? { uid: id.uid, gid: id.gid } : {}),
        },
        (error, stdout, stderr) => {
          if (!error) return resolve({ ok: true })
          const output = `${stderr}${stdout}`.trim().slice(0, 2000)
          const timedOut = (error as { killed?: boolean }).killed === true
          const firstLine = output.split('\n').find((line) => line.trim()) ?? ''
          const reason = timedOut ? `a trivial bwrap sandbox did not finish within ${timeoutMs} ms` : `bwrap cannot create a sandbox here: ${firstLine || error.message}`
          resolve({ ok: false, reason, output, timedOut })
        },
      )
    })
  } finally {
    id.release()
  }
}

/** True when a sandbox can start here (tools on PATH, and one trivial sandbox starts). */
export async function sandboxAvailable(): Promise<{ ok: true } | { ok: false; reason: string }> {
  const tools = await sandboxTools()
  if ('missing' in tools) return { ok: false, reason: tools.missing }
  const probe = await probeSandbox(tools)
  return probe.ok ? { ok: true } : { ok: false, reason: probe.reason }
}
