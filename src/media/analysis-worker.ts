// The analysis worker thread: CPU-heavy DSP (analysis, mastering, loudness) off the event loop.
// Tasks arrive as plain objects (structured clone); see analysis-pool.ts for the calling side.
import { analyzePcm } from './analyze.ts'
import { measureLoudness } from './dsp/loudness.ts'
import { masterPcm, type MasteringTarget } from './dsp/mastering.ts'
import type { Pcm } from './types.ts'

export type AnalysisTask =
  | { op: 'analyze'; pcm: Pcm; targetBpm?: number | undefined }
  | { op: 'loudness'; pcm: Pcm }
  | { op: 'master'; pcm: Pcm; target: MasteringTarget; ceilingMarginDb: number; loudnessOffsetLu: number }

export default function run(task: AnalysisTask): unknown {
  switch (task.op) {
    case 'analyze':
      return analyzePcm(task.pcm, { targetBpm: task.targetBpm })
    case 'loudness': {
      const report = measureLoudness(task.pcm)
      return { integratedLufs: report.integratedLufs, rangeLu: report.rangeLu, truePeakDb: report.truePeakDb, samplePeakDb: report.samplePeakDb }
    }
    case 'master':
      return masterPcm(task.pcm, task.target, { ceilingMarginDb: task.ceilingMarginDb, loudnessOffsetLu: task.loudnessOffsetLu })
  }
}
