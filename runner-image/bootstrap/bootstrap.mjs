// agent-gateway task bootstrap (node). Runs inside the sandbox (bubblewrap locally, the runner
// image on Kubernetes):
//
//     node bootstrap.mjs /agw/run.json
//
// 1. optionally starts a TCP -> unix-socket forwarder (in a worker thread, so a busy or
//    blocked main thread cannot stall it) so HTTP(S)_PROXY=http://127.0.0.1:<port> reaches the
//    service's egress proxy, and on Node versions without NODE_USE_ENV_PROXY routes fetch() and
//    http/https through the proxy itself;
// 2. installs the declared dependencies into the run's tmp dir (npm install --prefix), its
//    output first;
// 3. prints the sentinel line, defines the helper globals generate_text, call, store_artifact
//    and request_continuation (thin HTTP clients of AGW_HELPER_URL), and imports the entrypoint.
//
// run.json and the status fd: see bootstrap.py.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import net from 'node:net'
import path from 'node:path'
import tls from 'node:tls'
import { pathToFileURL } from 'node:url'
import { Worker } from 'node:worker_threads'

const SENTINEL = '=== agent-gateway: program output follows ==='

function makeStatus(fd) {
  let open = Number.isInteger(fd)
  return {
    send(event, fields = {}) {
      if (!open) return
      try {
        fs.writeSync(fd, `${JSON.stringify({ event, ...fields })}\n`)
      } catch {
        open = false
      }
    },
    close() {
      if (open)
        try {
          fs.closeSync(fd)
        } catch {}
      open = false
    },
  }
}

// --- egress -----------------------------------------------------------------------------------

const FORWARDER = `
const net = require('node:net')
const { parentPort, workerData } = require('node:worker_threads')
net.createServer((client) => {
  const upstream = net.connect(workerData.socket)
  client.on('error', () => upstream.destroy())
  upstream.on('error', () => client.destroy())
  client.pipe(upstream).pipe(client)
}).listen(workerData.port, '127.0.0.1', () => parentPort.postMessage('ready'))
`

async function startForwarder(socket, port) {
  const worker = new Worker(FORWARDER, { eval: true, workerData: { socket, port } })
  await new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  worker.unref()
}

const isLoopback = (host) => host === 'localhost' || /^127\./.test(host) || host === '::1' || host === '[::1]'

/** A socket tunnelled to host:port through the egress proxy's CONNECT (loopback stays local). */
function tunnel(proxySocket, host, port) {
  return new Promise((resolve, reject) => {
    if (isLoopback(host)) {
      // the sandbox's own loopback: connect directly
      const sock = net.connect({ host: host.replace(/^\[|\]$/g, ''), port })
      sock.once('connect', () => {
        sock.off('error', reject)
        resolve(sock)
      })
      sock.once('error', reject)
      return
    }
    const authority = net.isIPv6(host) ? `[${host}]:${port}` : `${host}:${port}`
    const sock = net.connect(proxySocket)
    let buf = Buffer.alloc(0)
    const onData = (chunk) => {
      buf = Buffer.concat([buf, chunk])
      const end = buf.indexOf('\r\n\r\n')
      if (end < 0) return
      sock.off('data', onData)
      const statusLine = buf.subarray(0, buf.indexOf('\r\n')).toString()
      if (/^HTTP\/1\.[01] 200/.test(statusLine)) {
        if (buf.length > end + 4) sock.unshift(buf.subarray(end + 4))
        resolve(sock)
      } else {
        const reason =
          buf
            .subarray(end + 4)
            .toString()
            .trim() || statusLine
        sock.destroy()
        reject(new Error(`egress proxy: ${reason}`))
      }
    }
    sock.on('data', onData)
    sock.once('error', reject)
    sock.once('close', () => reject(new Error('egress proxy closed the connection')))
    sock.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`)
  })
}

/** Node < 22.21 / 24.5 ignores NODE_USE_ENV_PROXY: route fetch() and http(s) through the proxy. */
async function patchProxy(proxySocket) {
  const [major, minor] = process.versions.node.split('.').map(Number)
  if ((major === 22 && minor >= 21) || (major === 24 && minor >= 5) || major >= 25) return 'native'
  // Clients unref idle keep-alive sockets so they do not hold the process open; pass that on
  // to the tunnel socket under the TLS layer.
  const secure = (sock, opts) => {
    const t = tls.connect({ ...opts, socket: sock })
    const { ref, unref } = t
    t.ref = function () {
      sock.ref()
      return ref.call(this)
    }
    t.unref = function () {
      sock.unref()
      return unref.call(this)
    }
    return t
  }

  // fetch: undici's global dispatcher is an Agent; make a twin whose connector tunnels. Node 20
  // loads undici on the first fetch(), so this happens then (saves ~25 ms per run otherwise).
  const realFetch = globalThis.fetch
  let installed
  const install = async () => {
    const sym = Symbol.for('undici.globalDispatcher.1')
    await realFetch('data:,').catch(() => {}) // loads the bundled undici, which installs its Agent
    const Agent = globalThis[sym]?.constructor
    if (!Agent) return
    globalThis[sym] = new Agent({
      connect(opts, callback) {
        let done = false
        const cb = (err, sock) => {
          if (!done) {
            done = true
            callback(err, sock)
          }
        }
        const https = opts.protocol === 'https:'
        tunnel(proxySocket, opts.hostname, Number(opts.port) || (https ? 443 : 80)).then(
          (sock) => {
            if (!https) return cb(null, sock)
            const servername = opts.servername || (net.isIP(opts.hostname) ? undefined : opts.hostname)
            const t = secure(sock, { servername, ALPNProtocols: ['http/1.1'] })
            t.once('secureConnect', () => cb(null, t))
            t.once('error', (err) => cb(err))
          },
          (err) => cb(err),
        )
      },
    })
  }
  globalThis.fetch = function fetch(input, init) {
    installed ??= install()
    return installed.then(() => realFetch(input, init))
  }

  // http.request / https.request without an explicit agent.
  class TunnelAgent extends http.Agent {
    createConnection(opts, cb) {
      tunnel(proxySocket, opts.host, opts.port || 80).then((s) => cb(null, s), cb)
    }
  }
  class TunnelHttpsAgent extends https.Agent {
    createConnection(opts, cb) {
      tunnel(proxySocket, opts.host, opts.port || 443).then((s) => cb(null, secure(s, opts)), cb)
    }
  }
  http.globalAgent = new TunnelAgent({ keepAlive: true })
  https.globalAgent = new TunnelHttpsAgent({ keepAlive: true })
  return 'patched'
}

// --- dependencies -----------------------------------------------------------------------------

async function install(cfg, deps) {
  if (!cfg.npmCli) {
    console.error('agent-gateway: npm is not available in this sandbox; cannot install dependencies')
    return false
  }
  const prefix = path.join(cfg.installDir || '/tmp/.agw', 'node')
  fs.mkdirSync(prefix, { recursive: true })
  fs.writeFileSync(path.join(prefix, 'package.json'), '{ "private": true }\n')
  const args = [
    cfg.npmCli,
    'install',
    '--prefix',
    prefix,
    '--no-audit',
    '--no-fund',
    '--no-save',
    '--no-package-lock',
    '--no-update-notifier',
    '--cache',
    path.join(cfg.installDir || '/tmp/.agw', 'npm-cache'),
  ]
  if (cfg.npmRegistry) args.push('--registry', cfg.npmRegistry)
  args.push('--', ...deps)
  // fd 3 is replaced by a fresh pipe so the install never inherits the status channel.
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit', 'pipe'] })
  const code = await new Promise((resolve) => {
    child.on('error', () => resolve(-1))
    child.on('close', resolve)
  })
  process.env.PATH = `${path.join(prefix, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`
  return code === 0
}

// --- helper globals ---------------------------------------------------------------------------

let helperFetch = globalThis.fetch // re-captured after the proxy setup, before user code runs

async function helper(name, payload) {
  const base = process.env.AGW_HELPER_URL
  const token = process.env.AGW_RUN_TOKEN
  if (!base || !token) {
    throw new Error(`${name}() is not available in this run: no helper endpoint (AGW_HELPER_URL / AGW_RUN_TOKEN are not set)`)
  }
  const body = JSON.stringify(Object.fromEntries(Object.entries(payload).filter(([, v]) => v !== undefined && v !== null)))
  const res = await helperFetch(`${base.replace(/\/$/, '')}/${name}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body,
  })
  const text = await res.text()
  let parsed = null
  try {
    parsed = text ? JSON.parse(text) : null
  } catch {
    parsed = text
  }
  return { status: res.status, body: parsed }
}

const GENERATE_ARGS = ['model_alias', 'model', 'system', 'max_output_tokens', 'temperature', 'reasoning']

const helpers = {
  // Positional arguments as the SPEC lists them; generate_text also takes an options object
  // second (generate_text(prompt, { model_alias: 'quick' })).
  generate_text: (prompt, ...rest) =>
    helper('generate_text', {
      prompt,
      ...(rest.length === 1 && rest[0] !== null && typeof rest[0] === 'object' ? rest[0] : Object.fromEntries(GENERATE_ARGS.map((n, i) => [n, rest[i]]))),
    }),
  call: (capability, path, body, method, max_price_micros) => helper('call', { capability, path, body, method, max_price_micros }),
  store_artifact: (name, data, content_type, stable = false) => {
    const binary = data instanceof ArrayBuffer || ArrayBuffer.isView(data)
    const bytes = binary ? Buffer.from(data instanceof ArrayBuffer ? data : data.buffer, data.byteOffset ?? 0, data.byteLength) : null
    return helper('store_artifact', {
      name,
      ...(bytes ? { data_base64: bytes.toString('base64') } : { data: String(data) }),
      content_type,
      stable: Boolean(stable),
    })
  },
  request_continuation: (delay_sec = 0) => helper('request_continuation', { delay_sec }),
}

// --- main -------------------------------------------------------------------------------------

// stdout/stderr are sockets to the service: make writes block when it is behind, instead of
// queueing unbounded output in memory (a print loop would otherwise die of RLIMIT_DATA).
for (const stream of [process.stdout, process.stderr]) stream._handle?.setBlocking?.(true)

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'))
const status = makeStatus(cfg.statusFd)
status.send('hello', { runtime: 'node', version: process.versions.node })
if (cfg.proxySocket) {
  await startForwarder(cfg.proxySocket, Number(cfg.proxyPort) || 3128)
  await patchProxy(cfg.proxySocket)
}
helperFetch = globalThis.fetch // a script replacing fetch later cannot break the helpers

const deps = cfg.dependencies ?? []
if (deps.length > 0) {
  status.send('install_start')
  const ok = await install(cfg, deps)
  status.send('install_done', { ok })
  if (!ok) {
    console.error('=== agent-gateway: dependency install failed ===')
    process.exit(1)
  }
}

for (const [name, fn] of Object.entries(helpers)) {
  Object.defineProperty(globalThis, name, { value: fn, writable: true, configurable: true, enumerable: false })
}
process.argv = [process.argv[0], cfg.entrypoint]
process.stdout.write(`${SENTINEL}\n`)
status.send('program_start')
status.close()
await import(pathToFileURL(cfg.entrypoint).href)
