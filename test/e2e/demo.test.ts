// `agent-gateway demo` end to end: the real CLI serves every role (embedded PGlite, the dev chain
// and its faucet), and the demo runs as a separate process against it, with the same environment,
// so its default URLs are the ones the server computed. It must pass every step (the scheduler's
// only if this host can run sandboxes: otherwise they are skipped, with nothing paid), end with the
// refund's transaction hash, and hand out links that work. Against a port where nothing listens it
// exits 1 naming step 1.
import t from 'tap'
import { spawn } from 'node:child_process'
import path from 'node:path'
import { freePort, repoRoot, startCli, type CliProcess } from '../helpers/cli.ts'
import { sandboxAvailable } from '../../controllers/local/sandbox.ts'

// The demo through the real CLI, as a user runs it: `agent-gateway demo [args]`.
const DEMO_COMMAND = [path.join(repoRoot, 'bin/agent-gateway.js'), 'demo']

const STEP_COUNT = 12

let cli: CliProcess
const sandbox = await sandboxAvailable()

t.before(async () => {
  cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

function demo(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...DEMO_COMMAND, ...args], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    const timer = setTimeout(() => child.kill('SIGKILL'), 100_000)
    child.once('error', reject)
    child.once('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

/** The line of step `n` (✓ passed, – skipped, ✗ failed). */
function stepLine(stdout: string, n: number): string {
  return stdout.split('\n').find((line) => new RegExp(`^[✓–✗] ${n}/${STEP_COUNT} `).test(line)) ?? ''
}

t.test('the demo runs every step against `serve`, with its defaults taken from the same environment', async (t) => {
  const { code, stdout, stderr } = await demo([], cli.env)
  t.comment(stdout)
  t.equal(code, 0, `exit 0 ${stderr}`)
  t.equal(stderr, '', 'nothing on stderr')
  t.match(stdout, `uses ${cli.gateway} (scheduler ${cli.scheduler}, memory ${cli.memory})`, 'the default URLs are the ones the server computed')

  const expected: Array<[number, RegExp]> = [
    [1, /are ready$/],
    [2, /^✓ 2\/12 throwaway wallet 0x[0-9a-fA-F]{40} funded with 10\.000000 test USDC by \/dev\/faucet$/],
    [3, /the advisor \(GET \/advisor\/agent\/guide\) found the 9 operations/],
    [4, /registered agent agt_/],
    [5, /bought plan reviews-credit-5 with x402 \(5\.000000 USDC, tx 0x[0-9a-f]{64}\), credit 5\.000000 USDC$/],
    [6, /review session [0-9a-f-]{36} for a 2-file site .*plan credit left 4\.980000 USDC/],
    [10, /song: 30\.0 s audio\/mpeg for 0\.080000 USDC paid with x402 \(tx 0x[0-9a-f]{64}\)$/],
    [11, /remembered 2 facts, one x402 payment each \(0\.001000 USDC each/],
    [12, /recalled \d+ memories with a SIGN-IN-WITH-X proof/],
  ]
  if (sandbox.ok) {
    expected.push(
      [7, /scheduler task \S+ created: escrow \d+\.\d{6} USDC paid with x402 \(tx 0x[0-9a-f]{64}\)/],
      [8, /ran task \S+ now \(POST …\/runs\): succeeded \(.*exit 0, cost \d+\.\d{6} USDC\)$/],
      [9, /deleted task \S+: \d+\.\d{6} USDC of escrow refunded on-chain \(tx 0x[0-9a-f]{64}\)$/],
    )
  } else {
    expected.push([7, /^– 7\/12 create a paid scheduler task: skipped \(the scheduler cannot run scripts here: .*; fix: .*nothing was paid\)$/])
    for (const n of [8, 9]) expected.push([n, /^– .*: skipped \(no task: the scheduler cannot run scripts here/])
  }
  for (const [n, pattern] of expected.sort(([a], [b]) => a - b)) {
    const line = stepLine(stdout, n)
    t.match(line, pattern, `step ${n}/${STEP_COUNT}: ${line}`)
  }
  t.notMatch(stdout, /^✗/m, 'no step failed')
  t.match(stdout, /"The demo agent keeps its release notes in a notebook with an ultramarine cover\."/, 'the recalled fact is shown')

  const links = Object.fromEntries([...stdout.matchAll(/^ {2}(review page|song|run logs)\S* .*?(https?:\/\/\S+)$/gm)].map((match) => [match[1], match[2]]))
  t.match(links['review page'], new RegExp(`^${cli.gateway}/reviews/[A-Za-z0-9_-]{64}$`), 'the shareUrl is listed')
  t.equal((await fetch(links['review page'] ?? '')).status, 200, 'and opens')
  t.match(links.song, /\/media\/audio\/[0-9a-f]{64}\.mp3$/, 'the song is listed')
  const audio = await fetch(links.song ?? '')
  t.equal(audio.headers.get('content-type'), 'audio/mpeg', 'and plays')
  await audio.arrayBuffer()

  if (sandbox.ok) {
    const refund = /^refund tx (0x[0-9a-f]{64})$/m.exec(stdout)
    t.ok(refund, 'the refund transaction is named')
    t.match(stepLine(stdout, 9), refund?.[1] ?? 'missing', 'the one the delete step reported')
    t.match(stdout, /ledger \(GET …\/ledger\): charge \+\d+\.\d{6} \(tx 0x[0-9a-f]{8}…\), run_cost -\d+\.\d{6}, refund -\d+\.\d{6} \(tx 0x[0-9a-f]{8}…\); sum 0\.000000/)
    t.ok(links['run logs'], 'the run logs are listed')
    t.match(await (await fetch(links['run logs'] ?? '')).text(), /hello from the agent-gateway demo/, 'and hold what the script printed')
    t.match(stdout, /^all steps passed$/m)
  } else {
    t.match(stdout, /^refund tx: none \(/m)
    t.match(stdout, /^all steps passed \(3 skipped: /m)
  }
  t.match(stdout, /^wallet 0x[0-9a-fA-F]{40}: 10\.000000 USDC from the faucet, \d+\.\d{6} left, \d+\.\d{6} spent \(refunds counted\)/m, 'the wallet line says what it all cost')
})

t.test('against a port where nothing listens the demo exits 1 naming step 1', async (t) => {
  const port = await freePort()
  const nowhere = `http://127.0.0.1:${port}`
  const { code, stdout, stderr } = await demo(['--gateway', nowhere, '--scheduler', cli.scheduler, '--memory', cli.memory], cli.env)
  t.equal(code, 1)
  t.match(stdout, /^✗ 1\/12 the server answers: failed$/m)
  t.match(stderr, `demo failed at step 1/12 (the server answers): nothing answers at ${nowhere} (the gateway) — start it with \`npm start\` in another terminal`)
  t.match(stderr, `asked: GET ${nowhere}/readyz`)
  t.notMatch(stdout, /^✓ 2\//m, 'nothing after it ran')
})

t.test('bad arguments: exit 2 with the usage; --help: exit 0', async (t) => {
  const bad = await demo(['--gatway', 'http://x'], cli.env)
  t.equal(bad.code, 2)
  t.match(bad.stderr, /Unknown option '--gatway'/)
  t.match(bad.stderr, /Usage:/)
  const help = await demo(['--help'], cli.env)
  t.equal(help.code, 0)
  t.match(help.stdout, /agent-gateway demo \[--gateway URL\] \[--scheduler URL\] \[--memory URL\]/)
})
