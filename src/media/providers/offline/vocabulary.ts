// The offline composer's vocabulary: the words of a prompt it understands and what each one
// decides. Genres set tempo range, mode bias, groove and General MIDI instrumentation; moods nudge
// them; instrument words name GM programs (0-based: 0 = Acoustic Grand Piano). docs/media.md
// carries the same tables for users. Phrases match whole words, longest first.
import tonejsMaps from '@tonejs/midi/dist/InstrumentMaps.js'

export type Groove = 'four-on-floor' | 'backbeat' | 'boom-bap' | 'trap' | 'breakbeat' | 'shuffle' | 'jazz' | 'one-drop' | 'metal' | 'funk' | 'halftime' | 'latin' | 'none'
export type BassStyle = 'held' | 'eighths' | 'root-fifth' | 'offbeat' | 'syncopated' | 'walking' | 'sub' | 'reggae'
export type ChordStyle = 'sustain' | 'stabs' | 'strum' | 'arpeggio' | 'comp' | 'skank' | 'block'
export type Mode = 'major' | 'minor'

export interface GenreStyle {
  name: string
  words: string[]
  /** Tempo range, BPM. */
  bpm: [number, number]
  /** Probability of a major key before moods (0 = always minor). */
  major: number
  groove: Groove
  /** Delay of the off-beat subdivision, as a fraction of it (0 straight, 0.33 triplet feel). */
  swing: number
  /** Which subdivision swings: 8ths (shuffle, jazz) or 16ths (hip hop, funk). */
  swingUnit: 8 | 16
  sevenths: boolean
  bass: BassStyle
  chords: ChordStyle
  /** GM program candidates per part (the seed picks one); pad null: no pad by default. */
  lead: number[]
  chordPrograms: number[]
  pad: number[] | null
  bassPrograms: number[]
  /** GM drum kit (program on channel 10): 0 Standard, 8 Room, 16 Power, 24 Electronic, 25 TR-808, 32 Jazz, 40 Brush, 48 Orchestra. */
  kit: number
  drums: boolean
  /** Lead note density, 0..1. */
  density: number
  /** Special progression (blues: the 12-bar). */
  progression?: 'blues'
}

// biome-ignore format: one genre per line reads as a table
export const GENRES: GenreStyle[] = [
  g('lofi', ['lofi', 'lo-fi', 'lo fi', 'chillhop', 'lofi hip hop'], [70, 90], 0.4, 'boom-bap', 0.2, 16, true, 'syncopated', 'comp', [4, 11, 0], [4, 0], [89], [33, 32], 8, true, 0.35),
  g('hip hop', ['hip hop', 'hip-hop', 'hiphop', 'rap', 'boom bap', 'boom-bap'], [85, 98], 0.3, 'boom-bap', 0.12, 16, true, 'syncopated', 'comp', [0, 80, 11], [0, 4], [89], [38, 33], 0, true, 0.4),
  g('trap', ['trap', 'drill'], [130, 150], 0.15, 'trap', 0, 16, false, 'sub', 'sustain', [10, 12, 81], [89, 4], [89], [38, 39], 25, true, 0.35),
  g('house', ['house', 'deep house', 'tech house'], [120, 126], 0.5, 'four-on-floor', 0, 16, true, 'offbeat', 'stabs', [81, 80], [0, 4], [89, 90], [38, 39], 24, true, 0.45),
  g('techno', ['techno', 'minimal techno', 'industrial'], [125, 135], 0.2, 'four-on-floor', 0, 16, false, 'offbeat', 'stabs', [81, 84], [90, 81], [95, 89], [38, 39], 24, true, 0.3),
  g('trance', ['trance', 'psytrance', 'progressive trance'], [134, 140], 0.3, 'four-on-floor', 0, 16, false, 'offbeat', 'arpeggio', [81], [90, 81], [89], [38], 24, true, 0.5),
  g('edm', ['edm', 'electro', 'electronic', 'dance', 'big room', 'future bass'], [124, 128], 0.5, 'four-on-floor', 0, 16, false, 'offbeat', 'stabs', [81, 80], [90, 81], [89], [38, 39], 24, true, 0.5),
  g('disco', ['disco', 'nu disco', 'nu-disco'], [115, 124], 0.75, 'four-on-floor', 0, 16, true, 'eighths', 'strum', [61, 48], [27, 4], [48], [33, 36], 0, true, 0.5),
  g('drum and bass', ['drum and bass', 'drum n bass', 'drum & bass', 'dnb', 'd&b', 'jungle', 'liquid dnb'], [170, 176], 0.25, 'breakbeat', 0, 16, true, 'sub', 'sustain', [81, 4], [4, 0], [89, 90], [38, 39], 24, true, 0.45),
  g('ambient', ['ambient', 'drone', 'new age', 'soundscape', 'meditation'], [60, 80], 0.5, 'none', 0, 8, true, 'held', 'sustain', [88, 92, 11], [89, 94], [89, 95, 92], [89], 0, false, 0.2),
  g('cinematic', ['cinematic', 'orchestral', 'film score', 'soundtrack', 'score', 'trailer', 'epic orchestral'], [70, 110], 0.35, 'halftime', 0, 8, false, 'held', 'arpeggio', [60, 48, 56], [48, 49], [49, 89], [43, 42], 48, true, 0.35),
  g('classical', ['classical', 'baroque', 'sonata', 'string quartet', 'chamber music', 'symphony'], [70, 120], 0.6, 'none', 0, 8, false, 'held', 'arpeggio', [40, 0, 73], [0, 48], null, [42], 0, false, 0.5),
  g('rock', ['rock', 'alt rock', 'alternative rock', 'hard rock', 'indie rock', 'grunge', 'indie'], [100, 140], 0.5, 'backbeat', 0, 8, false, 'eighths', 'strum', [29, 30], [29, 27], null, [34, 33], 0, true, 0.5),
  g('punk', ['punk', 'pop punk', 'pop-punk'], [160, 190], 0.7, 'backbeat', 0, 8, false, 'eighths', 'strum', [30], [30, 29], null, [34], 16, true, 0.55),
  g('metal', ['metal', 'heavy metal', 'thrash', 'metalcore', 'doom metal'], [120, 170], 0.1, 'metal', 0, 8, false, 'eighths', 'strum', [30, 29], [30], null, [34, 33], 16, true, 0.55),
  g('pop', ['pop', 'synth pop', 'synthpop', 'k-pop', 'kpop', 'dance pop', 'indie pop', 'radio'], [95, 124], 0.7, 'backbeat', 0, 16, false, 'root-fifth', 'block', [80, 0, 81], [0, 4], [89], [33, 38], 0, true, 0.5),
  g('synthwave', ['synthwave', 'retrowave', 'outrun', 'vaporwave', 'darksynth', '80s', 'eighties'], [84, 118], 0.35, 'backbeat', 0, 16, false, 'eighths', 'arpeggio', [81, 80], [90, 81], [89, 90], [38, 39], 24, true, 0.45),
  g('r&b', ['r&b', 'rnb', 'r and b', 'neo soul', 'neo-soul', 'soul', 'rhythm and blues', 'slow jam'], [65, 95], 0.45, 'boom-bap', 0.1, 16, true, 'syncopated', 'comp', [4, 80], [4, 0], [89], [33, 38], 0, true, 0.45),
  g('funk', ['funk', 'p-funk', 'g-funk'], [95, 115], 0.4, 'funk', 0.08, 16, true, 'syncopated', 'comp', [62, 61, 16], [28, 7], null, [36, 37], 0, true, 0.55),
  g('jazz', ['jazz', 'swing', 'bebop', 'smooth jazz', 'big band'], [90, 150], 0.6, 'jazz', 0.3, 8, true, 'walking', 'comp', [65, 66, 56], [0], null, [32], 32, true, 0.55),
  g('blues', ['blues', 'delta blues', 'blues rock', 'rhythm blues'], [70, 120], 1, 'shuffle', 0.3, 8, true, 'walking', 'comp', [26, 22, 29], [0, 16], null, [33, 32], 0, true, 0.45, 'blues'),
  g('country', ['country', 'bluegrass', 'western', 'honky tonk', 'honky-tonk', 'americana'], [90, 130], 0.9, 'backbeat', 0, 8, false, 'root-fifth', 'strum', [40, 105, 25], [25, 3], null, [32, 33], 0, true, 0.5),
  g('folk', ['folk', 'acoustic', 'singer songwriter', 'singer-songwriter', 'indie folk', 'celtic'], [85, 120], 0.7, 'backbeat', 0, 8, false, 'root-fifth', 'strum', [73, 40, 22], [25, 24], null, [32], 40, true, 0.45),
  g('reggae', ['reggae', 'dub', 'ska', 'dancehall', 'rocksteady'], [72, 88], 0.7, 'one-drop', 0.1, 16, false, 'reggae', 'skank', [16, 56, 65], [27, 16], null, [33], 0, true, 0.4),
  g('latin', ['latin', 'bossa nova', 'bossa', 'samba', 'salsa'], [110, 140], 0.5, 'latin', 0, 16, true, 'root-fifth', 'comp', [73, 65, 56], [24, 0], null, [32, 33], 0, true, 0.5),
  g('chiptune', ['chiptune', '8-bit', '8 bit', 'video game', 'retro game'], [120, 160], 0.75, 'backbeat', 0, 16, false, 'eighths', 'arpeggio', [80], [80, 81], null, [38, 80], 24, true, 0.6),
]

/** The style used when no genre word is found (a mood may imply another, see MOODS). */
export const DEFAULT_GENRE = 'pop'

function g(
  name: string,
  words: string[],
  bpm: [number, number],
  major: number,
  groove: Groove,
  swing: number,
  swingUnit: 8 | 16,
  sevenths: boolean,
  bass: BassStyle,
  chords: ChordStyle,
  lead: number[],
  chordPrograms: number[],
  pad: number[] | null,
  bassPrograms: number[],
  kit: number,
  drums: boolean,
  density: number,
  progression?: 'blues',
): GenreStyle {
  return {
    name,
    words,
    bpm,
    major,
    groove,
    swing,
    swingUnit,
    sevenths,
    bass,
    chords,
    lead,
    chordPrograms,
    pad,
    bassPrograms,
    kit,
    drums,
    density,
    ...(progression ? { progression } : {}),
  }
}

export interface MoodStyle {
  name: string
  words: string[]
  /** Tempo multiplier. */
  tempo: number
  /** Added to the genre's major probability. */
  major: number
  /** Added to every section's intensity (1..10). */
  intensity: number
  /** Added to the lead density. */
  density: number
  swing?: number
  sevenths?: boolean
  /** A pad plays throughout. */
  pad?: boolean
  /** The genre this mood implies when the prompt names none. */
  genre?: string
}

export const MOODS: MoodStyle[] = [
  { name: 'happy', words: ['happy', 'joyful', 'cheerful', 'fun', 'sunny', 'feel good', 'feel-good'], tempo: 1.05, major: 0.6, intensity: 0.5, density: 0.1 },
  { name: 'sad', words: ['sad', 'sorrowful', 'heartbroken', 'heartbreak', 'grief', 'mournful', 'tearful'], tempo: 0.85, major: -0.6, intensity: -1, density: -0.1 },
  {
    name: 'melancholic',
    words: ['melancholic', 'melancholy', 'wistful', 'bittersweet', 'nostalgic', 'somber', 'sombre', 'lonely', 'reflective', 'introspective'],
    tempo: 0.9,
    major: -0.4,
    intensity: -0.5,
    density: -0.05,
  },
  { name: 'dark', words: ['dark', 'sinister', 'ominous', 'menacing', 'gloomy', 'brooding', 'gritty'], tempo: 0.95, major: -0.7, intensity: 0, density: 0 },
  { name: 'epic', words: ['epic', 'heroic', 'grand', 'majestic', 'anthemic', 'massive'], tempo: 1, major: 0, intensity: 1.5, density: 0.05, genre: 'cinematic' },
  { name: 'triumphant', words: ['triumphant', 'victorious', 'celebratory', 'festive'], tempo: 1.05, major: 0.6, intensity: 1, density: 0.1 },
  {
    name: 'chill',
    words: ['chill', 'chilled', 'relaxed', 'relaxing', 'calm', 'peaceful', 'mellow', 'laid back', 'laid-back', 'soothing', 'cozy', 'study', 'lounge'],
    tempo: 0.88,
    major: 0.1,
    intensity: -1.5,
    density: -0.15,
    genre: 'lofi',
  },
  {
    name: 'energetic',
    words: ['energetic', 'upbeat', 'driving', 'hype', 'powerful', 'intense', 'high energy', 'high-energy', 'workout', 'party'],
    tempo: 1.1,
    major: 0.1,
    intensity: 1.5,
    density: 0.15,
  },
  { name: 'romantic', words: ['romantic', 'tender', 'sensual', 'love', 'intimate', 'warm', 'ballad'], tempo: 0.88, major: 0.2, intensity: -0.5, density: -0.05, sevenths: true },
  { name: 'uplifting', words: ['uplifting', 'hopeful', 'inspiring', 'inspirational', 'euphoric', 'bright', 'optimistic'], tempo: 1.05, major: 0.6, intensity: 0.5, density: 0.05 },
  { name: 'aggressive', words: ['aggressive', 'angry', 'fierce', 'heavy', 'brutal', 'furious', 'hard'], tempo: 1.1, major: -0.5, intensity: 2, density: 0.1, genre: 'rock' },
  {
    name: 'dreamy',
    words: ['dreamy', 'ethereal', 'floating', 'hazy', 'atmospheric', 'spacey', 'spacy', 'cosmic', 'airy', 'lush'],
    tempo: 0.88,
    major: 0.1,
    intensity: -1,
    density: -0.2,
    pad: true,
    genre: 'ambient',
  },
  {
    name: 'mysterious',
    words: ['mysterious', 'eerie', 'suspenseful', 'tense', 'spooky', 'haunting', 'creepy'],
    tempo: 0.95,
    major: -0.6,
    intensity: -0.5,
    density: -0.1,
    pad: true,
  },
  { name: 'playful', words: ['playful', 'quirky', 'whimsical', 'bouncy', 'silly', 'cute'], tempo: 1.1, major: 0.5, intensity: 0, density: 0.15 },
  { name: 'groovy', words: ['groovy', 'funky', 'jazzy', 'bluesy', 'soulful', 'smooth'], tempo: 1, major: 0, intensity: 0, density: 0.05, swing: 0.06, sevenths: true },
  { name: 'slow', words: ['slow', 'slower', 'downtempo', 'down-tempo', 'unhurried'], tempo: 0.82, major: 0, intensity: -0.5, density: -0.05 },
  { name: 'fast', words: ['fast', 'faster', 'uptempo', 'up-tempo', 'rapid', 'frantic'], tempo: 1.15, major: 0, intensity: 0.5, density: 0.05 },
]

export type InstrumentHint = 'melodic' | 'chordal' | 'bass' | 'pad' | 'vocal'

export interface InstrumentWord {
  words: string[]
  /** GM programs; the first one the genre also uses wins, else the first. */
  programs: number[]
  hint: InstrumentHint
  /** Octave the melody is centred on (C4 = MIDI 60 is octave 4). */
  octave: number
}

const i = (words: string[], programs: number[], hint: InstrumentHint, octave = 5): InstrumentWord => ({ words, programs, hint, octave })

/** Instrument words → GM programs. */
export const INSTRUMENTS: InstrumentWord[] = [
  i(['piano', 'grand piano', 'acoustic piano', 'keyboard'], [0], 'chordal'),
  i(['bright piano'], [1], 'chordal'),
  i(['honky tonk piano', 'honky-tonk piano', 'saloon piano'], [3], 'chordal'),
  i(['electric piano', 'rhodes', 'wurlitzer', 'wurli', 'keys', 'e-piano'], [4, 5], 'chordal'),
  i(['harpsichord'], [6], 'chordal'),
  i(['clavinet', 'clav'], [7], 'chordal', 4),
  i(['celesta'], [8], 'melodic', 6),
  i(['glockenspiel', 'glock'], [9], 'melodic', 6),
  i(['music box'], [10], 'melodic', 6),
  i(['vibraphone', 'vibes'], [11], 'melodic'),
  i(['marimba'], [12], 'melodic'),
  i(['xylophone'], [13], 'melodic', 6),
  i(['bells', 'tubular bells', 'chimes'], [14], 'melodic'),
  i(['organ', 'hammond', 'hammond organ', 'b3'], [16, 17], 'chordal'),
  i(['rock organ'], [18], 'chordal'),
  i(['church organ', 'pipe organ'], [19], 'chordal'),
  i(['accordion'], [21], 'chordal'),
  i(['harmonica', 'blues harp'], [22], 'melodic'),
  i(['nylon guitar', 'classical guitar', 'spanish guitar', 'flamenco guitar'], [24], 'chordal', 4),
  i(['acoustic guitar', 'steel guitar', 'guitar', 'guitars'], [25], 'chordal', 4),
  i(['jazz guitar', 'hollow body guitar'], [26], 'chordal', 4),
  i(['electric guitar', 'electric guitars'], [27, 29, 30], 'chordal', 4),
  i(['clean guitar', 'clean electric guitar'], [27], 'chordal', 4),
  i(['muted guitar', 'funk guitar', 'palm muted guitar'], [28], 'chordal', 4),
  i(['overdriven guitar', 'overdrive guitar', 'crunchy guitar', 'crunch guitar'], [29], 'chordal', 4),
  i(['distorted guitar', 'distortion guitar', 'heavy guitar', 'power chords'], [30], 'chordal', 4),
  i(['acoustic bass', 'upright bass', 'double bass', 'stand-up bass'], [32], 'bass', 2),
  i(['bass', 'bass guitar', 'electric bass', 'finger bass', 'bassline', 'bass line'], [33], 'bass', 2),
  i(['picked bass'], [34], 'bass', 2),
  i(['fretless bass'], [35], 'bass', 2),
  i(['slap bass'], [36, 37], 'bass', 2),
  i(['synth bass', '808', '808 bass', 'sub bass', 'sub-bass', 'reese'], [38, 39], 'bass', 2),
  i(['violin', 'fiddle', 'solo violin'], [40], 'melodic'),
  i(['viola'], [41], 'melodic', 4),
  i(['cello', 'cellos'], [42], 'melodic', 4),
  i(['contrabass'], [43], 'bass', 2),
  i(['tremolo strings'], [44], 'pad'),
  i(['pizzicato', 'pizzicato strings'], [45], 'melodic'),
  i(['harp'], [46], 'chordal'),
  i(['timpani'], [47], 'bass', 3),
  i(['strings', 'string section', 'string ensemble', 'orchestra', 'violins'], [48], 'pad'),
  i(['slow strings', 'lush strings'], [49], 'pad'),
  i(['synth strings'], [50], 'pad'),
  i(['choir', 'choir aahs', 'chorus voices', 'chant', 'chanting'], [52], 'vocal'),
  i(['voice', 'voices', 'vocal', 'vocals', 'oohs', 'voice oohs', 'singing', 'singer', 'humming', 'vocal chops'], [53], 'vocal'),
  i(['synth voice', 'vocoder', 'talkbox'], [54], 'vocal'),
  i(['orchestra hit', 'orchestral hit'], [55], 'melodic'),
  i(['trumpet', 'trumpets'], [56], 'melodic'),
  i(['trombone'], [57], 'melodic', 4),
  i(['tuba'], [58], 'bass', 2),
  i(['muted trumpet'], [59], 'melodic'),
  i(['french horn', 'horn', 'french horns'], [60], 'melodic', 4),
  i(['brass', 'brass section', 'horns', 'horn section'], [61], 'melodic'),
  i(['synth brass'], [62], 'melodic'),
  i(['soprano sax', 'soprano saxophone'], [64], 'melodic'),
  i(['saxophone', 'sax', 'alto sax', 'alto saxophone'], [65], 'melodic'),
  i(['tenor sax', 'tenor saxophone'], [66], 'melodic', 4),
  i(['baritone sax', 'baritone saxophone', 'bari sax'], [67], 'melodic', 3),
  i(['oboe'], [68], 'melodic'),
  i(['english horn', 'cor anglais'], [69], 'melodic'),
  i(['bassoon'], [70], 'melodic', 3),
  i(['clarinet'], [71], 'melodic'),
  i(['piccolo'], [72], 'melodic', 6),
  i(['flute', 'flutes'], [73], 'melodic'),
  i(['recorder'], [74], 'melodic'),
  i(['pan flute', 'pan pipes', 'panpipes'], [75], 'melodic'),
  i(['whistle', 'tin whistle'], [78], 'melodic', 6),
  i(['ocarina'], [79], 'melodic'),
  i(['synth lead', 'square lead', 'chip lead', 'square wave'], [80, 81], 'melodic'),
  i(['saw lead', 'sawtooth', 'lead synth', 'synth', 'synths', 'synthesizer', 'supersaw'], [81, 80], 'melodic'),
  i(['pad', 'pads', 'synth pad', 'warm pad'], [89], 'pad'),
  i(['polysynth', 'poly synth'], [90], 'pad'),
  i(['choir pad'], [91], 'vocal'),
  i(['sitar'], [104], 'melodic', 4),
  i(['banjo'], [105], 'chordal', 4),
  i(['shamisen'], [106], 'melodic'),
  i(['koto'], [107], 'melodic'),
  i(['kalimba', 'thumb piano'], [108], 'melodic'),
  i(['bagpipe', 'bagpipes'], [109], 'melodic'),
  i(['steel drums', 'steel drum', 'steel pan'], [114], 'melodic'),
]

/** GM programs that sound like a voice: none of them play when `instrumental` is true. */
export const VOCAL_PROGRAMS: ReadonlySet<number> = new Set([52, 53, 54, 85, 91])

/** Words that turn the drum kit on (and pick one). */
export const DRUM_WORDS: Array<{ words: string[]; kit?: number }> = [
  { words: ['drums', 'drum', 'percussion', 'beat', 'beats', 'drum kit', 'groove'] },
  { words: ['drum machine', 'electronic drums', 'electronic beat'], kit: 24 },
  { words: ['808s', 'tr-808', '808 drums'], kit: 25 },
  { words: ['brushes', 'brush drums'], kit: 40 },
  { words: ['jazz drums'], kit: 32 },
  { words: ['live drums', 'acoustic drums'], kit: 8 },
  { words: ['orchestral percussion', 'taiko'], kit: 48 },
]

/** Exclusion words (negative prompt, "no …"/"without …" in the prompt) beyond instrument words. */
export const ELEMENT_WORDS: Array<{ words: string[]; element: ExcludedElement }> = [
  { words: ['drums', 'drum', 'percussion', 'beat', 'beats', 'drum kit', 'drum machine'], element: 'drums' },
  { words: ['kick', 'kick drum', 'bass drum', 'kicks'], element: 'kick' },
  { words: ['snare', 'snares', 'clap', 'claps'], element: 'snare' },
  { words: ['hi-hat', 'hi-hats', 'hihat', 'hihats', 'hi hat', 'hi hats', 'hats', 'cymbals', 'cymbal', 'crash', 'ride'], element: 'cymbals' },
  { words: ['bass', 'bassline', 'bass line', 'low end', 'sub bass', '808'], element: 'bass' },
  { words: ['vocals', 'vocal', 'voice', 'voices', 'singing', 'singer', 'choir', 'lyrics', 'vocal chops', 'humming'], element: 'vocals' },
  { words: ['pad', 'pads', 'drone'], element: 'pad' },
  { words: ['melody', 'lead', 'solo', 'solos'], element: 'lead' },
]
export type ExcludedElement = 'drums' | 'kick' | 'snare' | 'cymbals' | 'bass' | 'vocals' | 'pad' | 'lead'

/** Family words that exclude a whole GM range (negative prompt). */
export const FAMILY_WORDS: Array<{ words: string[]; programs: number[] }> = [
  { words: ['piano', 'pianos', 'keys', 'keyboard'], programs: range(0, 7) },
  { words: ['guitar', 'guitars'], programs: range(24, 31) },
  { words: ['synth', 'synths', 'synthesizer', 'synthesizers', 'electronic'], programs: [...range(80, 103), 38, 39, 50, 51, 54, 62, 63] },
  { words: ['strings', 'string'], programs: range(40, 51) },
  { words: ['brass', 'horns'], programs: range(56, 63) },
  { words: ['sax', 'saxophone', 'saxophones'], programs: range(64, 67) },
  { words: ['woodwinds', 'woodwind', 'winds'], programs: range(64, 79) },
  { words: ['organ', 'organs'], programs: range(16, 20) },
  { words: ['bells', 'mallets', 'chimes'], programs: range(8, 15) },
]

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, k) => from + k)
}

export type SectionKind = 'intro' | 'verse' | 'pre-chorus' | 'chorus' | 'drop' | 'bridge' | 'breakdown' | 'solo' | 'interlude' | 'outro'

/** Section names → kind (first match wins) and the kind's default intensity (1..10). */
export const SECTION_KINDS: Array<{ kind: SectionKind; pattern: RegExp; intensity: number }> = [
  { kind: 'pre-chorus', pattern: /\bpre[\s-]?chorus\b|\bbuild[\s-]?up\b|\bbuild\b|\brise\b|\blift\b/, intensity: 6 },
  { kind: 'intro', pattern: /\bintro|\bopening\b|\bprelude\b/, intensity: 3 },
  { kind: 'outro', pattern: /\boutro|\bcoda\b|\bending\b|\bend\b|\bfade/, intensity: 3 },
  { kind: 'chorus', pattern: /\bchorus|\bhook\b|\brefrain\b|\bclimax\b/, intensity: 8 },
  { kind: 'drop', pattern: /\bdrop\b|\bpeak\b/, intensity: 9 },
  { kind: 'breakdown', pattern: /\bbreak[\s-]?down\b|\bbreak\b/, intensity: 3 },
  { kind: 'bridge', pattern: /\bbridge\b|\bmiddle[\s-]?8\b|\bmiddle eight\b/, intensity: 4 },
  { kind: 'solo', pattern: /\bsolo\b|\binstrumental break\b/, intensity: 7 },
  { kind: 'interlude', pattern: /\binterlude\b|\btransition\b/, intensity: 4 },
  { kind: 'verse', pattern: /\bverse\b/, intensity: 5 },
]

/** Words of a section description that set its intensity when the request gives none. */
export const INTENSITY_WORDS: Array<{ words: string[]; intensity: number }> = [
  { words: ['silent', 'near silence', 'whisper', 'barely'], intensity: 1 },
  { words: ['quiet', 'soft', 'minimal', 'sparse', 'stripped', 'stripped back', 'gentle', 'calm', 'delicate'], intensity: 3 },
  { words: ['building', 'rising', 'growing', 'swelling', 'tension'], intensity: 6 },
  { words: ['full', 'big', 'energetic', 'powerful', 'climax', 'loud', 'peak', 'huge', 'explosive', 'intense', 'full band'], intensity: 9 },
]

const NAMES: readonly string[] = tonejsMaps.instrumentByPatchID
const KITS: Record<number, string> = {
  0: 'standard kit',
  8: 'room kit',
  16: 'power kit',
  24: 'electronic kit',
  25: 'tr-808 kit',
  32: 'jazz kit',
  40: 'brush kit',
  48: 'orchestra kit',
}

/** The General MIDI name of a program (0-based), or of a drum kit. */
export function programName(program: number, percussion = false): string {
  if (percussion) return KITS[program] ?? `kit ${program}`
  return NAMES[program] ?? `program ${program}`
}
