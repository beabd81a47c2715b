// A MusicalPlan as a Standard MIDI File (format 1) through @tonejs/midi: one track per part,
// drums on channel 10 (index 9, the kit as its program), program, volume, pan and effect sends
// set at tick 0, one tempo and a 4/4 time signature.
import tonejs from '@tonejs/midi'
import type { MusicalPlan } from './plan.ts'

/** Ticks per quarter note: 16th-note swing and 32nd rolls land on whole ticks. */
export const PPQ = 480

const REVERB: Record<string, number> = { ambient: 0.55, cinematic: 0.45, classical: 0.4 }

/** The plan's Standard MIDI File bytes. */
export function planToMidi(plan: MusicalPlan): Buffer {
  const midi = new tonejs.Midi()
  midi.header.setTempo(plan.bpm)
  midi.header.timeSignatures.push({ ticks: 0, timeSignature: [plan.beatsPerBar, 4] })
  midi.header.name = `${plan.genre} in ${plan.key.tonic} ${plan.key.mode}, ${plan.bpm} BPM`
  midi.header.update()
  const reverb = REVERB[plan.genre] ?? 0.25
  for (const part of plan.parts) {
    const track = midi.addTrack()
    track.name = part.name
    track.channel = part.channel
    track.instrument.number = part.program
    track.addCC({ number: 7, value: part.volume, ticks: 0 })
    track.addCC({ number: 10, value: (part.pan + 1) / 2, ticks: 0 })
    track.addCC({ number: 91, value: part.percussion ? reverb * 0.6 : reverb, ticks: 0 })
    track.addCC({ number: 93, value: 0, ticks: 0 })
    for (const note of separated(part.notes)) track.addNote(note)
  }
  return Buffer.from(midi.toArray())
}

/**
 * Notes in ticks, each shortened to end at least a tick before the next onset of the same pitch:
 * tonejs orders same-tick events as given, and an off after the next on would cut the new note.
 */
function separated(notes: MusicalPlan['parts'][number]['notes']): Array<{ midi: number; ticks: number; durationTicks: number; velocity: number }> {
  const out = notes.map((n) => ({ midi: n.midi, ticks: Math.round(n.beat * PPQ), durationTicks: Math.max(1, Math.round(n.beats * PPQ)), velocity: n.velocity }))
  out.sort((a, b) => a.ticks - b.ticks || a.midi - b.midi)
  const latest = new Map<number, (typeof out)[number]>()
  const kept: typeof out = []
  for (const note of out) {
    const previous = latest.get(note.midi)
    if (previous && previous.ticks === note.ticks) continue // a doubled onset: keep one
    if (previous && previous.ticks + previous.durationTicks >= note.ticks) previous.durationTicks = Math.max(1, note.ticks - previous.ticks - 1)
    latest.set(note.midi, note)
    kept.push(note)
  }
  return kept
}
