// A scripted upstream for the media providers: a real node:http server on 127.0.0.1 whose answer to
// each request is a step the test queued (audio bytes, JSON, a status with Retry-After, a delay, a
// connection reset, a truncated body, or any handler), plus fixed routes (an audio_url's file).
// Every request is recorded (method, path, headers, body, parsed JSON) for assertions. Unscripted
// requests get 599 so a test that under-scripts fails loudly.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface RecordedRequest {
  method: string
  path: string
  headers: IncomingMessage['headers']
  body: Buffer
  /** The body parsed as JSON, or undefined when it is not JSON. */
  json: unknown
}

export type Step =
  /** 200 (or `status`) with these bytes; Content-Type default audio/wav. */
  | { audio: Buffer; contentType?: string; status?: number; headers?: Record<string, string> }
  /** 200 (or `status`) with this value as application/json. */
  | { json: unknown; status?: number; headers?: Record<string, string> }
  /** A bare status (500, 503, 401, 429 …) with an optional text body and headers (Retry-After). */
  | { status: number; text?: string; headers?: Record<string, string> }
  /** Waits, then plays `then` (default a 200 WAV) — unless the client gave up first. */
  | { delayMs: number; then?: Step }
  /** Destroys the socket without answering. */
  | { reset: true }
  /** Announces `bytes.length + missing` bytes, sends `bytes`, then destroys the socket. */
  | { truncate: Buffer; missing: number; contentType?: string }
  /** Anything else. */
  | { handler: (req: IncomingMessage, res: ServerResponse, recorded: RecordedRequest) => void }

export interface ScriptedUpstream {
  /** http://127.0.0.1:port (no trailing slash). */
  readonly url: string
  readonly port: number
  readonly requests: RecordedRequest[]
  /** Queue steps, played one per request in order. */
  script(...steps: Step[]): void
  /** Answer every request for `path` (any method) with `step`, before the queue. */
  route(path: string, step: Step): void
  close(): Promise<void>
}

export async function startScriptedUpstream(): Promise<ScriptedUpstream> {
  const queue: Step[] = []
  const routes = new Map<string, Step>()
  const requests: RecordedRequest[] = []
  const timers = new Set<NodeJS.Timeout>()

  const play = (step: Step, req: IncomingMessage, res: ServerResponse, recorded: RecordedRequest): void => {
    if ('handler' in step) {
      step.handler(req, res, recorded)
      return
    }
    if ('reset' in step) {
      req.socket.destroy()
      return
    }
    if ('delayMs' in step) {
      const timer = setTimeout(() => {
        timers.delete(timer)
        if (!res.destroyed && !req.socket.destroyed) play(step.then ?? { audio: wavBytes() }, req, res, recorded)
      }, step.delayMs)
      timers.add(timer)
      return
    }
    if ('truncate' in step) {
      res.writeHead(200, { 'content-type': step.contentType ?? 'audio/wav', 'content-length': String(step.truncate.length + step.missing) })
      res.write(step.truncate, () => setImmediate(() => req.socket.destroy()))
      return
    }
    if ('audio' in step) {
      res.writeHead(step.status ?? 200, { 'content-type': step.contentType ?? 'audio/wav', 'content-length': String(step.audio.length), ...step.headers })
      res.end(step.audio)
      return
    }
    if ('json' in step) {
      const body = Buffer.from(JSON.stringify(step.json))
      res.writeHead(step.status ?? 200, { 'content-type': 'application/json', 'content-length': String(body.length), ...step.headers })
      res.end(body)
      return
    }
    const body = Buffer.from(step.text ?? '')
    res.writeHead(step.status, { 'content-type': 'text/plain', 'content-length': String(body.length), ...step.headers })
    res.end(body)
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      let json: unknown
      try {
        json = body.length > 0 ? JSON.parse(body.toString('utf8')) : undefined
      } catch {
        json = undefined
      }
      const path = req.url ?? '/'
      const recorded: RecordedRequest = { method: req.method ?? '', path, headers: req.headers, body, json }
      requests.push(recorded)
      const step = routes.get(path.split('?')[0]!) ?? queue.shift() ?? { status: 599, text: `scripted upstream: nothing scripted for ${req.method} ${path}` }
      play(step, req, res, recorded)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    script: (...steps) => void queue.push(...steps),
    route: (path, step) => void routes.set(path, step),
    close: async () => {
      for (const timer of timers) clearTimeout(timer)
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** A small valid PCM WAV: 16-bit mono, a 440 Hz tone (default 0.1 s at 8 kHz). */
export function wavBytes(options: { sampleRate?: number; samples?: number } = {}): Buffer {
  const rate = options.sampleRate ?? 8000
  const samples = options.samples ?? 800
  const data = Buffer.alloc(samples * 2)
  for (let i = 0; i < samples; i++) data.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), i * 2)
  const header = Buffer.alloc(44)
  header.write('RIFF', 0, 'ascii')
  header.writeUInt32LE(36 + data.length, 4)
  header.write('WAVE', 8, 'ascii')
  header.write('fmt ', 12, 'ascii')
  header.writeUInt32LE(16, 16)
  header.writeUInt16LE(1, 20) // PCM
  header.writeUInt16LE(1, 22) // mono
  header.writeUInt32LE(rate, 24)
  header.writeUInt32LE(rate * 2, 28) // byte rate
  header.writeUInt16LE(2, 32) // block align
  header.writeUInt16LE(16, 34) // bits per sample
  header.write('data', 36, 'ascii')
  header.writeUInt32LE(data.length, 40)
  return Buffer.concat([header, data])
}

/**
 * A hand-made MP3: `frames` MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz, 417 bytes each) with
 * zeroed side information (silence), optionally behind an empty ID3v2.4 tag.
 */
export function mp3Bytes(options: { frames?: number; id3?: boolean } = {}): Buffer {
  const frame = Buffer.alloc(417)
  frame.set([0xff, 0xfb, 0x90, 0x64])
  const frames = Array.from({ length: options.frames ?? 3 }, () => frame)
  const tag = Buffer.from([0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0, 0])
  return Buffer.concat(options.id3 ? [tag, ...frames] : frames)
}
