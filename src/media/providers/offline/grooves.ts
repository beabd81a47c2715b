// Drum patterns of the offline composer: one bar of 16 steps per layer. 'x' accent, 'o' normal,
// '-' ghost, '.' rest. A layer plays from `min` intensity (and up to `max`); kick variants are
// picked by the seed. Notes are General MIDI percussion (channel 10).
import type { Groove } from './vocabulary.ts'

export type DrumElement = 'kick' | 'snare' | 'cymbals' | 'toms' | 'perc'

export interface DrumLayer {
  note: number
  steps: string
  min: number
  max?: number
  element: DrumElement
}

export interface GrooveSpec {
  kicks: string[]
  /** Kick note and the intensity it starts at. */
  kick?: { note: number; min: number; velocity?: 'ghost' }
  layers: DrumLayer[]
  /** 32nd-note hat rolls on the last beat of odd bars from this intensity (trap). */
  rollsFrom?: number
}

const L = (note: number, steps: string, min: number, element: DrumElement, max?: number): DrumLayer => ({ note, steps, min, element, ...(max ? { max } : {}) })

export const GROOVES: Record<Exclude<Groove, 'none'>, GrooveSpec> = {
  'four-on-floor': {
    kicks: ['x...x...x...x...'],
    kick: { note: 36, min: 3 },
    layers: [L(39, '....x.......x...', 5, 'snare'), L(42, '..o...o...o...o.', 2, 'cymbals', 6), L(46, '..o...o...o...o.', 7, 'cymbals'), L(42, '-.-.-.-.-.-.-.-.', 7, 'cymbals')],
  },
  backbeat: {
    kicks: ['x.......x.......', 'x......xx.......', 'x.....x...x.....', 'x.......x.x.....'],
    kick: { note: 36, min: 4 },
    layers: [L(38, '....x.......x...', 4, 'snare'), L(42, 'o.o.o.o.o.o.o.o.', 3, 'cymbals', 7), L(51, 'x.o.x.o.x.o.x.o.', 8, 'cymbals')],
  },
  'boom-bap': {
    kicks: ['x......x..x.....', 'x.........x.....', 'x......x.x......', 'x..x......x..x..'],
    kick: { note: 36, min: 3 },
    layers: [L(38, '....x.......x...', 4, 'snare'), L(42, 'o.o.o.o.o.o.o.o.', 2, 'cymbals', 6), L(42, 'o-o-o-o-o-o-o-o-', 7, 'cymbals')],
  },
  trap: {
    kicks: ['x......x..x.....', 'x.....x...x..x..', 'x.......x..x....'],
    kick: { note: 36, min: 4 },
    layers: [L(39, '........x.......', 4, 'snare'), L(38, '........x.......', 6, 'snare'), L(42, 'o-o-o-o-o-o-o-o-', 3, 'cymbals'), L(46, '......o.......o.', 7, 'cymbals')],
    rollsFrom: 7,
  },
  breakbeat: {
    kicks: ['x.........x.....', 'x.........x..x..', 'x.x.......x.....'],
    kick: { note: 36, min: 4 },
    layers: [L(38, '....x.......x...', 4, 'snare'), L(38, '.......-.-....-.', 7, 'snare'), L(42, 'o.o.o.o.o.o.o.o.', 3, 'cymbals', 7), L(51, 'o.o.o.o.o.o.o.o.', 8, 'cymbals')],
  },
  shuffle: {
    kicks: ['x.......x.......', 'x......ox.......'],
    kick: { note: 36, min: 4 },
    layers: [L(38, '....x.......x...', 4, 'snare'), L(42, 'o.o.o.o.o.o.o.o.', 3, 'cymbals', 7), L(51, 'o.o.o.o.o.o.o.o.', 8, 'cymbals')],
  },
  jazz: {
    kicks: ['x.......-.......'],
    kick: { note: 36, min: 6, velocity: 'ghost' },
    layers: [L(51, 'o...x.-.o...x.-.', 2, 'cymbals'), L(44, '....x.......x...', 3, 'cymbals'), L(38, '......-.......-.', 6, 'snare')],
  },
  'one-drop': {
    kicks: ['........x.......'],
    kick: { note: 36, min: 3 },
    layers: [L(37, '........x.......', 4, 'snare'), L(42, '..o...o...o...o.', 2, 'cymbals', 7), L(42, 'o.o.o.o.o.o.o.o.', 8, 'cymbals')],
  },
  metal: {
    kicks: ['x.x.x.x.x.x.x.x.'],
    kick: { note: 36, min: 4 },
    layers: [L(36, '-x-x-x-x-x-x-x-x', 8, 'kick'), L(38, '....x.......x...', 4, 'snare'), L(51, 'o.o.o.o.o.o.o.o.', 3, 'cymbals', 8), L(57, 'x...x...x...x...', 9, 'cymbals')],
  },
  funk: {
    kicks: ['x..x..x...x..x..', 'x.x....x..x.....'],
    kick: { note: 36, min: 4 },
    layers: [L(38, '....x..-.-..x..-', 4, 'snare'), L(42, 'o-o-o-o-o-o-o-o-', 3, 'cymbals'), L(46, '..............o.', 6, 'cymbals')],
  },
  halftime: {
    kicks: ['x.......x.......'],
    kick: { note: 36, min: 5 },
    layers: [L(38, '........x.......', 6, 'snare'), L(45, 'x..x..x.........', 8, 'toms'), L(41, '..........x.x.x.', 8, 'toms')],
  },
  latin: {
    kicks: ['o..-o..-o..-o..-'],
    kick: { note: 36, min: 4 },
    layers: [L(37, 'x..x..x...x.x...', 3, 'snare'), L(42, '-o-o-o-o-o-o-o-o', 3, 'cymbals')],
  },
}

/** GM percussion notes per element (what "no hi-hats" and friends remove). */
export const DRUM_ELEMENT_NOTES: Record<DrumElement, number[]> = {
  kick: [35, 36],
  snare: [37, 38, 39, 40],
  cymbals: [42, 44, 46, 49, 51, 52, 55, 57, 59],
  toms: [41, 43, 45, 47, 48, 50],
  perc: [],
}

export const STEP_VELOCITY: Record<string, number> = { x: 1, o: 0.8, '-': 0.45 }
