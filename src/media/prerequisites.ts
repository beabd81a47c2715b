// System tools the media role runs: ffmpeg/ffprobe (every decode and MP3 encode), fluidsynth and
// a GM soundfont (the offline composer), espeak-ng (offline speech). Checked cheaply — one
// `-version` each, in parallel — so a host that lacks one says which and the command that fixes it.
import { access } from 'node:fs/promises'
import { runTool } from './audio-io/process.ts'
import { DEFAULT_SOUNDFONT } from './providers/offline/fluidsynth.ts'

export type MediaTool = 'ffmpeg' | 'ffprobe' | 'fluidsynth' | 'soundfont' | 'espeak-ng'

export interface MediaPrerequisiteProblem {
  tool: MediaTool
  /** What is wrong, one line. */
  reason: string
  /** The exact command or setting that fixes it. */
  fix: string
}

export interface MediaPrerequisiteReport {
  ok: boolean
  /** Version line of each tool (the soundfont's path), null when missing. */
  tools: Record<string, string | null>
  problems: MediaPrerequisiteProblem[]
}

export interface MediaPrerequisiteOptions {
  ffmpeg?: string | undefined
  ffprobe?: string | undefined
  fluidsynth?: string | undefined
  espeak?: string | undefined
  soundfont?: string | undefined
  /** Per tool. Default 5 s. */
  timeoutMs?: number | undefined
}

/** Debian/Ubuntu: every media tool at once. */
export const MEDIA_INSTALL_COMMAND = 'apt-get install -y ffmpeg fluidsynth fluid-soundfont-gm espeak-ng'

const PACKAGES: Record<MediaTool, string> = { ffmpeg: 'ffmpeg', ffprobe: 'ffmpeg', fluidsynth: 'fluidsynth', soundfont: 'fluid-soundfont-gm', 'espeak-ng': 'espeak-ng' }

async function version(binary: string, args: string[], timeoutMs: number): Promise<{ line: string } | { error: Error & { kind?: string } }> {
  try {
    const { stdout, stderr } = await runTool(binary, args, { timeoutMs, maxStdoutBytes: 1024 * 1024 })
    const text = `${stdout.toString('utf8')}\n${stderr}`.trim()
    return {
      line:
        text
          .split('\n')
          .find((l) => l.trim())
          ?.trim() ?? binary,
    }
  } catch (error) {
    return { error: error as Error & { kind?: string } }
  }
}

/** Checks every media tool; never throws. */
export async function checkMediaPrerequisites(options: MediaPrerequisiteOptions = {}): Promise<MediaPrerequisiteReport> {
  const timeoutMs = options.timeoutMs ?? 5000
  const soundfont = options.soundfont ?? DEFAULT_SOUNDFONT
  const binaries: Array<[MediaTool, string, string[]]> = [
    ['ffmpeg', options.ffmpeg ?? 'ffmpeg', ['-hide_banner', '-version']],
    ['ffprobe', options.ffprobe ?? 'ffprobe', ['-hide_banner', '-version']],
    ['fluidsynth', options.fluidsynth ?? 'fluidsynth', ['--version']],
    ['espeak-ng', options.espeak ?? 'espeak-ng', ['--version']],
  ]
  const [results, soundfontPresent] = await Promise.all([
    Promise.all(binaries.map(([, binary, args]) => version(binary, args, timeoutMs))),
    access(soundfont).then(
      () => true,
      () => false,
    ),
  ])
  const tools: Record<string, string | null> = {}
  const problems: MediaPrerequisiteProblem[] = []
  binaries.forEach(([tool, binary], k) => {
    const result = results[k]!
    if ('line' in result) {
      tools[tool] = result.line
      return
    }
    if (result.error.kind === 'timeout') {
      // It is there and started: a machine too busy to print a version in time is no reason to
      // refuse work for the next 30 s (the job itself has its own limits and reports its own error).
      tools[tool] = `${binary} (did not print its version within ${timeoutMs} ms)`
      return
    }
    tools[tool] = null
    const missing = result.error.kind === 'unavailable'
    problems.push({
      tool,
      reason: missing ? `${tool} is not installed (${binary} not found)` : `${binary} does not run: ${result.error.message}`,
      fix: missing ? `apt-get install -y ${PACKAGES[tool]} (all media tools: ${MEDIA_INSTALL_COMMAND})` : `reinstall it: apt-get install --reinstall -y ${PACKAGES[tool]}`,
    })
  })
  tools.soundfont = soundfontPresent ? soundfont : null
  if (!soundfontPresent) {
    problems.push({
      tool: 'soundfont',
      reason: `the General MIDI soundfont ${soundfont} is missing (the offline composer renders with it)`,
      fix:
        soundfont === DEFAULT_SOUNDFONT
          ? `apt-get install -y ${PACKAGES.soundfont} (all media tools: ${MEDIA_INSTALL_COMMAND})`
          : `point the soundfont setting at an existing .sf2 file, or unset it and apt-get install -y ${PACKAGES.soundfont}`,
    })
  }
  return { ok: problems.length === 0, tools, problems }
}
