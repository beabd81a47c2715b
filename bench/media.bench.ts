// Media DSP and the offline song pipeline, measured side by side with independent tools on the
// same files and the same machine:
//   1. Analysis of a 3-minute 44.1 kHz stereo song (rendered by the offline composer): our whole
//      Analysis (loudness with true peak, tempo/beats/downbeat, key, sections, cues, curves,
//      stereo) on one thread, against ffmpeg's ebur128 filter (loudness and true peak only) and
//      aubio's tempo on the same WAV. CPU time of this thread (ours) and of the child (theirs).
//   2. An offline 60 s song end to end: generate (compose + fluidsynth), decode, analyse, master
//      (gain + true-peak limiter + fade, re-measured after MP3 until within tolerance), encode.
//   node bench/media.bench.ts            (BENCH_RUNS=5 by default)
import { spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { analyzePcm } from '../src/media/analyze.ts'
import { decodeToPcm, encodeMp3 } from '../src/media/audio-io/ffmpeg.ts'
import { writeWav16 } from '../src/media/audio-io/wav.ts'
import { measureLoudness } from '../src/media/dsp/loudness.ts'
import { masterPcm } from '../src/media/dsp/mastering.ts'
import { createOfflineSongProvider } from '../src/media/providers/offline/song-provider.ts'
import type { Pcm } from '../src/media/types.ts'

const RUNS = Number(process.env.BENCH_RUNS ?? 5)

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

/** CPU seconds of this thread's work in `fn` (user + system of the process, which runs nothing else meanwhile). */
function cpuOf(fn: () => void): number {
  const before = process.cpuUsage()
  fn()
  const used = process.cpuUsage(before)
  return (used.user + used.system) / 1e6
}

/** Runs a tool to completion; returns its wall seconds and output. */
function tool(command: string, args: string[]): Promise<{ wall: number; out: string }> {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (chunk) => (out += chunk))
    child.stderr.on('data', (chunk) => (out += chunk))
    child.on('error', reject)
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${command} exited ${code}: ${out.slice(-500)}`))
      resolve({ wall: (performance.now() - started) / 1000, out })
    })
  })
}

/** CPU seconds of this process's reaped children (cutime + cstime of /proc/self/stat, in USER_HZ ticks). */
async function childrenCpu(): Promise<number> {
  const stat = await readFile('/proc/self/stat', 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[13]) + Number(fields[14])) / 100
}

/** A tool's CPU seconds: the growth of the children's CPU across its run. */
async function toolCpu(command: string, args: string[]): Promise<number> {
  const before = await childrenCpu()
  await tool(command, args)
  return (await childrenCpu()) - before
}

async function main(): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agw-media-bench-'))
  try {
    const provider = createOfflineSongProvider({})
    const signal = new AbortController().signal
    console.log(`media bench: ${RUNS} runs each, median reported; ${os.cpus()[0]?.model ?? 'cpu'}, load ${os.loadavg()[0]?.toFixed(2)}`)

    // 1. Analysis of a 3-minute song.
    const song = await provider.generate({ prompt: 'uplifting pop with piano and strings, 118 bpm', seed: 3, durationSec: 180, instrumental: true, signal })
    const pcm: Pcm = await decodeToPcm(song.bytes, { signal })
    const wavFile = path.join(dir, 'song.wav')
    await writeFile(wavFile, writeWav16(pcm))
    const seconds = (pcm.channels[0]?.length ?? 0) / pcm.sampleRate
    console.log(`\n1. analysis of ${seconds.toFixed(1)} s, ${pcm.sampleRate} Hz, ${pcm.channels.length} channels`)
    analyzePcm(pcm) // warm-up (JIT)
    const ours = Array.from({ length: RUNS }, () => cpuOf(() => analyzePcm(pcm)))
    const loudnessOnly = Array.from({ length: RUNS }, () => cpuOf(() => measureLoudness(pcm)))
    const ffmpeg: number[] = []
    const aubio: number[] = []
    for (let run = 0; run < RUNS; run += 1) {
      ffmpeg.push(await toolCpu('ffmpeg', ['-nostdin', '-hide_banner', '-i', wavFile, '-af', 'ebur128=peak=true:framelog=verbose', '-f', 'null', '-']))
      aubio.push(await toolCpu('aubio', ['tempo', '-i', wavFile]))
    }
    const analysis = analyzePcm(pcm)
    const aubioBpm = (await tool('aubio', ['tempo', '-i', wavFile])).out.trim()
    console.log(
      `   ours, full Analysis        ${median(ours).toFixed(3)} s CPU  (bpm ${analysis.tempo.bpm}, key ${analysis.key?.tonic} ${analysis.key?.mode}, ${analysis.sections.length} sections)`,
    )
    console.log(`   ours, loudness + true peak ${median(loudnessOnly).toFixed(3)} s CPU  (I ${analysis.loudness?.integratedLufs} LUFS, TP ${analysis.loudness?.truePeakDb} dBTP)`)
    console.log(`   ffmpeg ebur128 (loudness)  ${median(ffmpeg).toFixed(3)} s CPU  → ours/ffmpeg ${(median(loudnessOnly) / median(ffmpeg)).toFixed(2)}× (loudness only)`)
    console.log(`   aubio tempo                ${median(aubio).toFixed(3)} s CPU  (${aubioBpm})`)
    console.log(`   ours (everything) / (ffmpeg + aubio) = ${(median(ours) / (median(ffmpeg) + median(aubio))).toFixed(2)}×`)

    // 2. An offline 60 s song end to end.
    console.log('\n2. offline 60 s song, end to end (wall seconds per stage, median)')
    const stages: Record<string, number[]> = { generate: [], decode: [], analyse: [], master: [], 'encode mp3': [], 're-measure': [] }
    for (let run = 0; run < RUNS; run += 1) {
      let at = performance.now()
      const lap = (stage: string) => {
        const now = performance.now()
        stages[stage]!.push((now - at) / 1000)
        at = now
      }
      const made = await provider.generate({ prompt: 'chill lofi hip hop with a mellow piano', seed: 100 + run, durationSec: 60, instrumental: true, signal })
      lap('generate')
      const decoded = await decodeToPcm(made.bytes, { signal })
      lap('decode')
      analyzePcm(decoded)
      lap('analyse')
      const mastered = masterPcm(decoded, { targetLufs: -14, truePeakDb: -1, fadeOutSec: 1 })
      lap('master')
      const mp3 = await encodeMp3(mastered.pcm, { signal })
      lap('encode mp3')
      measureLoudness(await decodeToPcm(mp3, { signal }))
      lap('re-measure')
    }
    let total = 0
    for (const [stage, values] of Object.entries(stages)) {
      total += median(values)
      console.log(`   ${stage.padEnd(12)} ${median(values).toFixed(3)} s`)
    }
    console.log(`   ${'total'.padEnd(12)} ${total.toFixed(3)} s for 60 s of audio`)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

await main()
