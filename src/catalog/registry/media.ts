// The pay-per-call media services of the gateway: song generation and text to speech.
import { SongRequest, SongResult } from '../schemas/songs.ts'
import { SPEECH_MAX_CHARACTERS, SPEECH_VOICES, SpeechRequest, SpeechResult } from '../schemas/speech.ts'
import { defineService, PAYG_HOW, problem } from './common.ts'

export const songs = defineService({
  slug: 'songmodel-3-pro',
  title: 'Song generation (songmodel-3-pro)',
  description:
    'Generates one to three complete songs from a prompt, optionally maps vocal functions onto instruments and masters the audio, ranks candidates with local DSP and returns hosted MP3 URLs. ' +
    '0.080000 USD per song; the first song per claimed account is free.',
  server: 'gateway',
  access: 'payg',
  meter: { name: 'songs', unit: 'song', unitPriceMicros: 80_000n, includedUnits: 1 },
  plans: [],
  operations: [
    {
      operationId: 'generateSongs',
      service: 'songmodel-3-pro',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/audio/songs/songmodel-3-pro',
      summary: 'Generate songs (music with or without vocals) from a text prompt',
      description:
        'Generates candidateCount (1 to 3) complete songs from prompt, ranks them with local DSP (tempo, structure, loudness, selectionTarget hints) and returns the hosted MP3 of the candidate judged objectively closest, ' +
        'with per-candidate scores and analysis. Options: durationSec 30 to 300, instrumental, negativePrompt, up to 20 ordered sections, mastering (targetLufs / truePeakDb / fadeOutSec; omit to return the audio unchanged), ' +
        'instrumentalLeadMapping (1 to 8 items) and up to 10 referenceImageUrls. ' +
        'Price: 0.080000 USD per song (80000 micros); each candidate is billed at the per-song price, so the charge is candidateCount x 0.080000 USD. ' +
        'The first song per account is free (1 included unit; applies to agents claimed by a human with a verified e-mail). ' +
        PAYG_HOW,
      tags: ['audio'],
      access: 'payg',
      proof: 'payment',
      pricing: { kind: 'per-unit', unitsFromBody: 'candidateCount', defaultUnits: 1, maxUnits: 3 },
      schemas: { body: SongRequest, response: { 200: SongResult, 402: problem } },
      keywords: [
        'music',
        'song',
        'track',
        'audio',
        'mp3',
        'compose',
        'soundtrack',
        'jingle',
        'beat',
        'instrumental',
        'vocals',
        'lyrics',
        'mastering',
        'podcast',
        'intro',
        'background music',
      ],
    },
  ],
})

export const speech = defineService({
  slug: 'speechmodel-3.1-flash-tts',
  title: 'Speech generation (speechmodel-3.1-flash-tts)',
  description: 'Converts text to speech and returns a hosted WAV (24 kHz mono 16-bit). 0.015000 USD per started 1,000 characters of input.',
  server: 'gateway',
  access: 'payg',
  // The going rate of hosted TTS APIs (about 15 USD per million characters for standard voices).
  meter: { name: 'speech-characters', unit: '1000 characters', unitPriceMicros: 15_000n, includedUnits: 0 },
  plans: [],
  operations: [
    {
      operationId: 'synthesizeSpeech',
      service: 'speechmodel-3.1-flash-tts',
      server: 'gateway',
      method: 'POST',
      path: '/api/v1/audio/speech/speechmodel-3.1-flash-tts',
      summary: 'Text to speech: synthesize spoken audio (WAV) from text',
      description:
        `Converts input text (1 to ${SPEECH_MAX_CHARACTERS} characters) to speech and returns the hosted audio URL (WAV, 24 kHz mono 16-bit) with size, duration, voice, model and the USDC amount charged. ` +
        `Optional voice (${SPEECH_VOICES.join(', ')}; default alloy) and speed (0.5 to 2). ` +
        'Price: 0.015000 USD per started 1,000 characters of input (15000 micros; 1 to 1,000 characters cost 0.015000, 1,001 to 2,000 cost 0.030000); no free units. ' +
        PAYG_HOW,
      tags: ['audio'],
      access: 'payg',
      proof: 'payment',
      pricing: { kind: 'per-unit', unitsFromText: { field: 'input', perCharacters: 1000 }, maxUnits: Math.ceil(SPEECH_MAX_CHARACTERS / 1000) },
      schemas: { body: SpeechRequest, response: { 200: SpeechResult, 402: problem } },
      keywords: ['tts', 'text to speech', 'voice', 'speak', 'narration', 'read aloud', 'voiceover', 'wav', 'audio'],
    },
  ],
})
