// The topology drill's song upstream: the media role's SONG_UPSTREAM_URL, a scripted model on
// 127.0.0.1 answering each candidate with a short synthetic song (real audio, made in JS), and
// failing, with a 400 the media role does not retry, every candidate whose seed ends in 1. An order
// of 2 candidates seeded 10k therefore delivers 1 and pays for 1: the whole payment settles and the
// undelivered candidate is refunded on-chain (docs/media.md "Money"). Candidate i has seed + i.
//
// The topology can start the media role with it (startSongUpstream before the roles,
// SONG_UPSTREAM_URL = its url, MEDIA_UPSTREAM_RETRIES=0); when it did not, useSongUpstream
// reconfigures the media role before the load (one restart, as a chart upgrade rolls the pod).
import type { Topology } from './topology.ts'
import { type ScriptedUpstream, startScriptedUpstream } from './scripted-upstream.ts'
import { syntheticSong } from './synthetic-song.ts'

/** The path the drill's upstream answers on: how a media role configured with it is recognised. */
export const SONG_UPSTREAM_PATH = '/drill-songs'

/** Whether a candidate seeded `seed` fails at the drill's upstream. */
export const failsAt = (seed: number) => seed % 10 === 1

export async function startSongUpstream(): Promise<ScriptedUpstream & { songsUrl: string }> {
  const upstream = await startScriptedUpstream()
  // 16 kHz keeps the media role's decode and analysis light on a 2-core machine.
  const songs = new Map<number, Buffer>()
  upstream.route(SONG_UPSTREAM_PATH, {
    handler: (_req, res, recorded) => {
      const body = (recorded.json ?? {}) as { seed?: number; duration_sec?: number }
      if (failsAt(Number(body.seed))) {
        res.writeHead(400, { 'content-type': 'text/plain' })
        res.end('drill upstream: this candidate fails (its seed ends in 1)')
        return
      }
      const seconds = Math.min(300, Math.max(30, Number(body.duration_sec) || 30))
      let song = songs.get(seconds)
      if (!song) songs.set(seconds, (song = syntheticSong({ seconds, bpm: 120, sampleRate: 16_000 })))
      res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': String(song.length) })
      res.end(song)
    },
  })
  return Object.assign(upstream, { songsUrl: `${upstream.url}${SONG_UPSTREAM_PATH}` })
}

/** Whether the topology's media role generates with the drill's upstream (partial failures possible). */
export function songUpstreamInUse(topology: Topology): boolean {
  const media = topology.processes.find((proc) => proc.role === 'media')
  return media?.env.SONG_UPSTREAM_URL?.endsWith(SONG_UPSTREAM_PATH) === true
}

/**
 * Puts the media role on the drill's upstream unless the topology started it so: its environment
 * gains SONG_UPSTREAM_URL and it is restarted once (before the load and the faults).
 */
export async function useSongUpstream(topology: Topology, log: (line: string) => void): Promise<ScriptedUpstream | undefined> {
  if (songUpstreamInUse(topology)) return undefined
  const media = topology.processes.find((proc) => proc.role === 'media')
  if (!media) throw new Error('the topology has no media role')
  const upstream = await startSongUpstream()
  Object.assign(media.env, { SONG_UPSTREAM_URL: upstream.songsUrl, MEDIA_UPSTREAM_RETRIES: '0' })
  await topology.kill(media)
  const ms = await topology.start(media)
  log(`${media.name} restarted on the drill's song upstream ${upstream.songsUrl} in ${(ms / 1000).toFixed(1)} s (candidates seeded …1 fail)`)
  return upstream
}
