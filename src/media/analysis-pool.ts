// Worker threads for the media DSP, so a 3-minute analysis (about a second of CPU) never blocks
// the event loop that serves other requests. Threads start on first use and exit when idle.
import os from 'node:os'
import Tinypool from 'tinypool'
import type { AnalysisTask } from './analysis-worker.ts'
import type { MasteringPass, MasteringTarget } from './dsp/mastering.ts'
import type { Analysis, Pcm } from './types.ts'

export interface LoudnessReading {
  integratedLufs: number
  rangeLu: number
  truePeakDb: number
  samplePeakDb: number
}

export interface AnalysisPool {
  analyze(pcm: Pcm, options?: { targetBpm?: number | undefined }): Promise<Analysis>
  loudness(pcm: Pcm): Promise<LoudnessReading>
  master(pcm: Pcm, target: MasteringTarget, options: { ceilingMarginDb: number; loudnessOffsetLu: number }): Promise<MasteringPass>
  close(): Promise<void>
}

export function createAnalysisPool(options: { threads?: number } = {}): AnalysisPool {
  const threads = Math.max(1, options.threads ?? os.availableParallelism())
  const pool = new Tinypool({
    filename: new URL('./analysis-worker.ts', import.meta.url).href,
    minThreads: 0,
    maxThreads: threads,
    idleTimeout: 30_000,
  })
  const run = <T>(task: AnalysisTask) => pool.run(task) as Promise<T>
  return {
    analyze: (pcm, analysisOptions = {}) => run<Analysis>({ op: 'analyze', pcm, targetBpm: analysisOptions.targetBpm }),
    loudness: (pcm) => run<LoudnessReading>({ op: 'loudness', pcm }),
    master: (pcm, target, masterOptions) => run<MasteringPass>({ op: 'master', pcm, target, ...masterOptions }),
    close: () => pool.destroy(),
  }
}
