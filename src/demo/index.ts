// `agent-gateway demo`: the whole product, shown against an already running server the way an
// agent uses it: public HTTP and real client libraries only (x402 payments, SIGN-IN-WITH-X
// owner proofs), never internal modules or the database. See docs/demo.md.
//
// Kept light to start fast: the clients and steps (viem, @x402/*) load only once the arguments
// are read; `--help` needs neither them nor a server.
import { parseArgs } from 'node:util'
import { loadConfig } from '../platform/config.ts'
import type { DemoUrls } from './context.ts'
import type { DemoIo } from './output.ts'

export const DEMO_USAGE = `agent-gateway demo: show the whole product against a running server, as an agent uses it

Usage:
  agent-gateway demo [--gateway URL] [--scheduler URL] [--memory URL]
  agent-gateway demo --help

Start the server first (\`npm start\` in another terminal: every role, the embedded dev chain with
its /dev/faucet). The demo then, with a throwaway wallet funded with test USDC: checks the server
answers, asks the advisor for the operations it needs, registers an agent, buys the
reviews-credit-5 plan with x402 and opens a review session for a tiny site, pays a scheduler task's
escrow, runs it and reads its logs, deletes it for an on-chain refund, buys a song, remembers facts
(one x402 payment each) and recalls them with a wallet proof. One line per step; links at the end.
Exit code 0 when every step passed (some may be skipped, e.g. without bubblewrap), 1 when one failed.

Options:
  --gateway URL     the gateway (default: PUBLIC_BASE_URL, else http://HOST:GATEWAY_PORT, as the server computes it)
  --scheduler URL   the scheduler API (default: PUBLIC_SCHEDULER_URL, else http://HOST:SCHEDULER_PORT)
  --memory URL      the memory service (default: PUBLIC_MEMORY_URL, else http://HOST:MEMORY_PORT)
  -h, --help        this text

Prices are read from each 402, never assumed; on the dev chain the run costs about 5.1 test USDC
(the 5 USDC plan is most of it; the unused escrow is refunded). See docs/demo.md.
`

const parse = (argv: string[]) =>
  parseArgs({
    args: argv,
    allowPositionals: false,
    strict: true,
    options: { gateway: { type: 'string' }, scheduler: { type: 'string' }, memory: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  })

function baseUrl(name: string, value: string): string {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new Error(`--${name}: "${value}" is not a URL`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`--${name}: "${value}" is not an http(s) URL`)
  return value.replace(/\/+$/, '')
}

/** The URLs to call: the flags, else what the server computes from the same environment. */
function resolveUrls(values: { gateway?: string; scheduler?: string; memory?: string }): DemoUrls {
  const needsDefaults = values.gateway === undefined || values.scheduler === undefined || values.memory === undefined
  let defaults: DemoUrls | undefined
  if (needsDefaults) {
    try {
      const config = loadConfig()
      defaults = { gateway: config.publicBaseUrl, scheduler: config.publicSchedulerUrl, memory: config.publicMemoryUrl }
    } catch (error) {
      throw new Error(`cannot work out the default URLs from the environment (${(error as Error).message}); pass --gateway, --scheduler and --memory`)
    }
  }
  return {
    gateway: baseUrl('gateway', values.gateway ?? defaults?.gateway ?? ''),
    scheduler: baseUrl('scheduler', values.scheduler ?? defaults?.scheduler ?? ''),
    memory: baseUrl('memory', values.memory ?? defaults?.memory ?? ''),
  }
}

/**
 * Runs the demo. `argv` are the arguments after `demo`. Returns the exit code: 0 when every step
 * passed (or was skipped), 1 when a step failed, 2 for bad arguments.
 */
export async function runDemo(argv: string[], io: DemoIo = { out: process.stdout, err: process.stderr }): Promise<number> {
  let values: ReturnType<typeof parse>['values']
  try {
    values = parse(argv).values
  } catch (error) {
    io.err.write(`agent-gateway demo: ${(error as Error).message}\n\n${DEMO_USAGE}`)
    return 2
  }
  if (values.help) {
    io.out.write(DEMO_USAGE)
    return 0
  }
  let urls: DemoUrls
  try {
    urls = resolveUrls(values)
  } catch (error) {
    io.err.write(`agent-gateway demo: ${(error as Error).message}\n`)
    return 2
  }
  const { runSteps } = await import('./run.ts')
  return await runSteps(urls, io)
}
