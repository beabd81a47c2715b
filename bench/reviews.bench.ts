// Review sessions, measured against floors run side by side on the same machine:
//   1. Creating a session from a 10 MiB zip (40 incompressible files, stored): POST through the real
//      CLI (embedded PGlite, dev chain; the plan bought with x402), p50/p99 wall time per request,
//      sequential. Floor: a bare fastify route that receives the same JSON body, strictly decodes
//      the base64 and writes the bytes to a file: what any service must do with the same upload.
//   2. The reviewer page's time to interactive in Chromium: from navigation to the overlay in the
//      site frame answering the page (the reviewer can pin). Floors: the same site's entry page
//      served by a bare static server, navigated until its `load` event; and that page framed from
//      another origin (a bare parent page, the site on a *.localhost origin as ours is), until the
//      frame's `load` event: what framing a site on its own origin costs in Chromium by itself.
//   node bench/reviews.bench.ts          (BENCH_RUNS=40 creates, BENCH_LOADS=20 page loads)
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { randomBytes } from 'node:crypto'
import os from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import yazl from 'yazl'
import { x402Client } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { startCli } from '../test/helpers/cli.ts'
import { launchChromium, waitForSite } from '../test/helpers/reviewer-driver.ts'

const RUNS = Number(process.env.BENCH_RUNS ?? 40)
const LOADS = Number(process.env.BENCH_LOADS ?? 20)

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

const fmt = (ms: number) => `${ms.toFixed(1)} ms`

function zipOf(files: Array<[string, Buffer]>, compress: boolean): Promise<Buffer> {
  const zip = new yazl.ZipFile()
  for (const [name, data] of files) zip.addBuffer(data, name, { compress })
  zip.end()
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    zip.outputStream.on('data', (chunk: Buffer) => chunks.push(chunk))
    zip.outputStream.on('end', () => resolve(Buffer.concat(chunks)))
    zip.outputStream.on('error', reject)
  })
}

const SITE_HTML = `<!doctype html><html><head><meta charset="utf-8"><title>Bench site</title><link rel="stylesheet" href="site.css"></head>
<body><main><h1>Plans</h1>${'<section><h2>Feature</h2><p>Some text about a feature of the product.</p><button>Try it</button></section>'.repeat(50)}</main><script src="app.js"></script></body></html>`

async function main(): Promise<void> {
  // 10 MiB decoded at most: 40 × 256 KiB of random bytes less the zip's own headers.
  const files: Array<[string, Buffer]> = [['index.html', Buffer.from(SITE_HTML)]]
  for (let i = 0; i < 39; i++) files.push([`assets/blob-${i}.bin`, randomBytes(262_000)])
  const bigZip = await zipOf(files, false)
  if (bigZip.length > 10 * 1024 * 1024) throw new Error(`bench zip is ${bigZip.length} bytes, over 10 MiB`)
  const bigBody = JSON.stringify({ zipData: bigZip.toString('base64') })
  const smallZip = await zipOf(
    [
      ['index.html', Buffer.from(SITE_HTML)],
      ['site.css', Buffer.from('main { max-width: 60em; margin: auto } section { padding: 1em }')],
      ['app.js', Buffer.from('document.querySelectorAll("button").forEach((b) => b.addEventListener("click", () => {}))')],
    ],
    true,
  )

  const cli = await startCli({ env: { LOG_LEVEL: 'error' } })
  const tmp = await mkdtemp(path.join(os.tmpdir(), 'agw-bench-reviews-'))
  const floor = Fastify({ bodyLimit: 32 * 1024 * 1024 })
  floor.post('/upload', async (request) => {
    const text = (request.body as { zipData: string }).zipData
    const bytes = Buffer.from(text, 'base64')
    if (bytes.toString('base64') !== text) throw new Error('not strict base64')
    await writeFile(path.join(tmp, 'upload.zip'), bytes)
    return { bytes: bytes.length }
  })
  floor.get('/framed', async (_request, reply) => {
    const { port } = floor.server.address() as { port: number }
    return reply
      .type('text/html; charset=utf-8')
      .send(
        `<!doctype html><html><head><title>Framed</title></head><body><iframe id="f" src="http://s-floor.localhost:${port}/site/index.html" width="1000" height="700"></iframe></body></html>`,
      )
  })
  floor.get('/site/:name', async (request, reply) => {
    const name = (request.params as { name: string }).name
    if (name === 'index.html') return reply.type('text/html; charset=utf-8').send(SITE_HTML)
    if (name === 'site.css') return reply.type('text/css').send('main { max-width: 60em; margin: auto } section { padding: 1em }')
    return reply.type('text/javascript').send('document.querySelectorAll("button").forEach((b) => b.addEventListener("click", () => {}))')
  })
  const floorUrl = await floor.listen({ port: 0, host: '127.0.0.1' })
  const browser = await launchChromium()
  try {
    const agent = (await (await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })).json()) as { accessToken: string }
    const buyer = privateKeyToAccount(generatePrivateKey())
    await fetch(`${cli.gateway}/dev/faucet`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ address: buyer.address, amountMicros: '6000000' }),
    })
    const paying = wrapFetchWithPayment(fetch, new x402Client().register('eip155:8453', new ExactEvmScheme(buyer)).setSpendControls(false))
    const bought = await paying(`${cli.gateway}/plans/reviews-credit-5/purchase`, { method: 'POST', headers: { 'svc-agent-authorization': `Bearer ${agent.accessToken}` } })
    if (bought.status !== 200) throw new Error(`plan purchase: ${bought.status}`)
    const create = (body: string) =>
      fetch(`${cli.gateway}/api/v1/annotate/reviews`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${agent.accessToken}` }, body })

    // 1. Creating from 10 MiB, then the floor, interleaved in rounds so drift hits both alike.
    const ours: number[] = []
    const theirs: number[] = []
    for (let i = 0; i < 3; i++) {
      await (await create(bigBody)).arrayBuffer()
      await (await fetch(`${floorUrl}/upload`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: bigBody })).arrayBuffer()
    }
    for (let i = 0; i < RUNS; i++) {
      let started = performance.now()
      const response = await create(bigBody)
      const text = await response.text()
      if (response.status !== 200) throw new Error(`create: ${response.status} ${text}`)
      ours.push(performance.now() - started)
      started = performance.now()
      const floorResponse = await fetch(`${floorUrl}/upload`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: bigBody })
      await floorResponse.arrayBuffer()
      theirs.push(performance.now() - started)
    }
    console.log(`\ncreate a review from a ${(bigZip.length / 1048576).toFixed(2)} MiB zip (${files.length} files), ${RUNS} sequential requests`)
    console.log(`  ours:  p50 ${fmt(percentile(ours, 50))}  p99 ${fmt(percentile(ours, 99))}`)
    console.log(`  floor: p50 ${fmt(percentile(theirs, 50))}  p99 ${fmt(percentile(theirs, 99))}  (receive, strict base64 decode, write the file)`)
    console.log(`  ratio: ${(percentile(ours, 50) / percentile(theirs, 50)).toFixed(2)}× at p50, ${(percentile(ours, 99) / percentile(theirs, 99)).toFixed(2)}× at p99`)

    // 2. Time to interactive of the reviewer page, against the bare site's load.
    const session = (await (await create(JSON.stringify({ zipData: smallZip.toString('base64') }))).json()) as { shareUrl: string }
    const tti: number[] = []
    const bare: number[] = []
    const framed: number[] = []
    const context = await browser.newContext()
    for (let i = 0; i < LOADS + 2; i++) {
      let page = await context.newPage()
      let started = performance.now()
      await page.goto(session.shareUrl)
      await waitForSite(page)
      if (i >= 2) tti.push(performance.now() - started)
      await page.close()
      page = await context.newPage()
      started = performance.now()
      await page.goto(`${floorUrl}/site/index.html`, { waitUntil: 'load' })
      if (i >= 2) bare.push(performance.now() - started)
      await page.close()
      page = await context.newPage()
      started = performance.now()
      await page.goto(`${floorUrl}/framed`, { waitUntil: 'load' })
      if (i >= 2) framed.push(performance.now() - started)
      await page.close()
    }
    await context.close()
    console.log(`\nreviewer page time to interactive in Chromium (navigation → overlay ready in the site frame), ${LOADS} loads`)
    console.log(`  ours:  p50 ${fmt(percentile(tti, 50))}  p95 ${fmt(percentile(tti, 95))}`)
    console.log(`  floor: p50 ${fmt(percentile(bare, 50))}  p95 ${fmt(percentile(bare, 95))}  (the site's page alone, to its load event)`)
    console.log(`  floor, framed from another origin: p50 ${fmt(percentile(framed, 50))}  p95 ${fmt(percentile(framed, 95))}  (to the frame's load event)`)
    console.log(
      `  ratio: ${(percentile(tti, 50) / percentile(bare, 50)).toFixed(2)}× the page alone, ${(percentile(tti, 50) / percentile(framed, 50)).toFixed(2)}× the page framed, at p50`,
    )
  } finally {
    await browser.close()
    await floor.close()
    await cli.stop()
    await rm(tmp, { recursive: true, force: true })
  }
}

await main()
