// The README's hand-run examples run as printed, in order, against the real CLI: every ```sh block
// after the quick start that talks to the server is pasted into one bash script (the default ports
// rewritten to this test's), so a variable used by a line is set by the line before it, and a
// curl that fails (network error) or a command that does not exist stops it.
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

/** The ```sh blocks of the README that call the running server (127.0.0.1:40xx or $GW). */
function serverBlocks(readme: string): string[] {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1] as string)
  return blocks.filter((block) => /curl /.test(block) && /127\.0\.0\.1:40\d\d|\$GW/.test(block))
}

t.test('the README examples run in order against a fresh server', async (t) => {
  if (!cli) return t.fail('no CLI')
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')
  const blocks = serverBlocks(readme)
  t.ok(blocks.length >= 4, `found ${blocks.length} blocks`)
  const port = (url: string) => new URL(url).port
  const script = blocks
    .join('\n')
    .replaceAll('127.0.0.1:4020', `127.0.0.1:${port(cli.gateway)}`)
    .replaceAll('127.0.0.1:4021', `127.0.0.1:${port(cli.scheduler)}`)
    .replaceAll('127.0.0.1:4022', `127.0.0.1:${port(cli.memory)}`)
  // -e: a failing command (curl cannot connect, node cannot parse the registration) stops it;
  // -u: a variable used before a line sets it is an error.
  const run = spawnSync('bash', ['-euo', 'pipefail', '-c', script], { cwd: repoRoot, encoding: 'utf8', timeout: 120_000, env: { PATH: process.env.PATH ?? '' } })
  t.equal(run.status, 0, `the examples run: ${run.stderr.slice(-2000)}`)
  t.match(run.stdout, /HTTP\/1\.1 402/, 'the plan purchase answers its 402')
  t.match(run.stdout, /"balanceMicros":"10000000"/, 'the faucet funded the example wallet')
  t.match(run.stdout, /HTTP\/1\.1 403/, 'the review example answers 403 plan_required with the token set above')
})
