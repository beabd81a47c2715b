// The README's hand-run examples run verbatim, in order, against the real CLI on ports that are
// not the defaults: every ```sh block after the quick start that talks to the server is pasted into
// one bash script, unchanged, and run with the server's GATEWAY_PORT, SCHEDULER_PORT and
// MEMORY_PORT in its environment (as a shell that started `npm start` with them has). A variable
// used by a line is set by a line before it; a curl that fails (network error), a command that does
// not exist or a port written into an example (rather than taken from those variables) stops it.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { repoRoot, startCli, type CliProcess } from '../helpers/cli.ts'

let cli: CliProcess | undefined

t.before(async () => {
  cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

/** The ```sh blocks of the README that call the running server (they use or set $GW / $MEM, or name a port). */
function serverBlocks(readme: string): string[] {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1] as string)
  return blocks.filter((block) => /\$\{?(GW|MEM)\b|^(GW|MEM)=|(127\.0\.0\.1|localhost):40\d\d/m.test(block))
}

t.test('the README examples run verbatim, in order, against a fresh server on other ports', async (t) => {
  if (!cli) return t.fail('no CLI')
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const blocks = serverBlocks(readme)
  t.ok(blocks.length >= 4, `found ${blocks.length} blocks`)
  const script = blocks.join('\n')
  // A port may appear only as the default of its variable, e.g. ${GATEWAY_PORT:-4020}.
  const hardCoded = script.replaceAll(/\$\{[A-Z_]+_PORT:-\d+\}/g, '').match(/.*(127\.0\.0\.1|localhost):\d{2,5}.*/g) ?? []
  t.same(hardCoded, [], 'no example hard-codes a port')
  t.notSame(
    [cli.gateway, cli.memory].map((url) => new URL(url).port),
    ['4020', '4022'],
    'the server runs on other ports than the defaults',
  )
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/tmp',
    GATEWAY_PORT: cli.env.GATEWAY_PORT ?? '',
    SCHEDULER_PORT: cli.env.SCHEDULER_PORT ?? '',
    MEMORY_PORT: cli.env.MEMORY_PORT ?? '',
    REVIEWS_PORT: cli.env.REVIEWS_PORT ?? '',
  }
  // -e: a failing command (curl cannot connect, node cannot parse the registration) stops it;
  // -u: a variable used before a line sets it is an error.
  const run = spawnSync('bash', ['-euo', 'pipefail', '-c', script], { cwd: repoRoot, encoding: 'utf8', timeout: 180_000, env, stdio: ['ignore', 'pipe', 'pipe'] })
  t.comment(run.stdout.slice(-4000))
  t.equal(run.status, 0, `the examples run: ${run.stderr.slice(-2000)}`)
  t.match(run.stdout, /HTTP\/1\.1 402/, 'the plan purchase answers its 402')
  t.match(run.stdout, /"balanceMicros":"10000000"/, 'the faucet funded the example wallet')
  t.match(run.stdout, /^HTTP 200 OK$/m, '`agent-gateway pay` bought the plan')
  t.match(run.stdout, /"status": "active"/, 'and the plan is active')
  t.match(run.stdout, /^payment receipt \(PAYMENT-RESPONSE\):$/m, 'with the receipt printed')
  t.match(run.stdout, /"transaction": "0x[0-9a-f]{64}"/, 'naming the settlement transaction')
  t.match(run.stdout, /^HTTP 201 Created$/m, '`agent-gateway pay` paid the memory write on the memory port')
  t.match(run.stdout, /HTTP\/1\.1 401/, 'the recall asks for a wallet proof, on the memory port the server has')
  t.match(run.stdout, /HTTP\/1\.1 403/, 'the review example answers 403 plan_required with the token set above')
})
