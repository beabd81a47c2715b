// `agent-gateway pay URL` end to end: the real CLI serves every role on the embedded default (the
// dev chain and its /dev/faucet), and `pay` runs as a separate process, as a user runs it. On a 402
// it funds a throwaway wallet from the faucet with exactly what the challenge asks, pays with the
// real @x402/fetch client, and prints the answer and the PAYMENT-RESPONSE receipt; the money is
// checked on-chain. Nothing asked, nothing funded; over --max-usd, nothing funded or paid.
import t from 'tap'
import { spawn } from 'node:child_process'
import path from 'node:path'
import { freePort, repoRoot, startCli, type CliProcess } from '../helpers/cli.ts'
import { balanceOf } from '../helpers/dev-chain.ts'

const PAYEE = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'
const PLAN = 'scheduler-credit-5'

let cli: CliProcess

t.before(async () => {
  cli = await startCli()
})
t.teardown(async () => {
  await cli?.stop('SIGKILL')
})

function pay(args: string[], env: Record<string, string> = cli.env): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), 'pay', ...args], { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000)
    child.once('error', reject)
    child.once('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

async function register(): Promise<string> {
  const response = await fetch(`${cli.gateway}/auth/register`, { method: 'POST' })
  return ((await response.json()) as { accessToken: string }).accessToken
}

/** The JSON document printed after `label` (a line of its own), parsed. */
function printedJson(stdout: string, label: RegExp): Record<string, unknown> {
  const start = stdout.search(label)
  if (start < 0) throw new Error(`no ${label} in:\n${stdout}`)
  const rest = stdout.slice(start)
  const open = rest.search(/^\{$/m)
  const close = rest.search(/^\}$/m)
  return JSON.parse(rest.slice(open, close + 1)) as Record<string, unknown>
}

t.test('a plan purchase: funded with exactly the price, paid with x402, the answer and the receipt printed', async (t) => {
  const token = await register()
  const payeeBefore = await balanceOf(cli.gateway, PAYEE)
  const url = `${cli.gateway}/plans/${PLAN}/purchase`
  const { code, stdout, stderr } = await pay([url, '--method', 'POST', '-H', `Svc-Agent-Authorization: Bearer ${token}`])
  t.comment(stdout)
  t.equal(code, 0, `exit 0 ${stderr}`)
  t.equal(stderr, '', 'nothing on stderr')
  t.match(stdout, `agent-gateway pay: POST ${url}`)
  t.match(stdout, /^402 asked 5\.000000 USDC \(x402 exact on eip155:8453, pay to 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\)$/m, 'what the 402 asked')
  const funded = /^throwaway wallet (0x[0-9a-fA-F]{40}) funded with 5\.000000 test USDC by (\S+)\/dev\/faucet \(tx 0x[0-9a-f]{64}\)$/m.exec(stdout)
  t.ok(funded, 'the wallet was funded from the faucet with exactly the price')
  t.equal(funded?.[2], cli.gateway, 'the faucet of the gateway it paid')
  t.match(stdout, /^HTTP 200 OK$/m)
  t.match(printedJson(stdout, /^HTTP 200 OK$/m), { planId: PLAN, status: 'active', creditMicros: '5000000' }, 'the answer')
  const receipt = printedJson(stdout, /^payment receipt \(PAYMENT-RESPONSE\):$/m)
  t.match(receipt, { success: true, transaction: /^0x[0-9a-f]{64}$/, network: 'eip155:8453', payer: funded?.[1] }, 'the receipt')
  t.equal(await balanceOf(cli.gateway, funded?.[1] ?? ''), 0n, 'the wallet spent all it was given')
  t.equal((await balanceOf(cli.gateway, PAYEE)) - payeeBefore, 5_000_000n, 'the payee received the price on-chain')
})

t.test('a memory write on another service: --data sends JSON (POST), the faucet is the gateway of the environment', async (t) => {
  const { code, stdout, stderr } = await pay([`${cli.memory}/api/v1/memories`, '--data', '{"content":"The user prefers dark mode in every editor","tags":["prefs"]}'])
  t.equal(code, 0, `exit 0 ${stderr}`)
  t.match(stdout, `agent-gateway pay: POST ${cli.memory}/api/v1/memories`)
  t.match(stdout, /^402 asked 0\.001000 USDC/m)
  t.match(stdout, new RegExp(`^throwaway wallet 0x[0-9a-fA-F]{40} funded with 0\\.001000 test USDC by ${cli.gateway}/dev/faucet`, 'm'))
  t.match(stdout, /^HTTP 201 Created$/m)
  t.match(printedJson(stdout, /^HTTP 201 /m), { rail: 'payg' })
  t.match(printedJson(stdout, /^payment receipt/m), { success: true, transaction: /^0x[0-9a-f]{64}$/ })
})

t.test('nothing asked: the answer is printed, no wallet is funded', async (t) => {
  const { code, stdout } = await pay([`${cli.gateway}/manifest.json`])
  t.equal(code, 0)
  t.match(stdout, /^no payment asked: nothing funded, nothing paid$/m)
  t.match(stdout, /^HTTP 200 OK$/m)
  t.notMatch(stdout, /funded with/)
  t.notMatch(stdout, /payment receipt/)
})

t.test('over --max-usd: refused before anything is funded or paid, exit 1', async (t) => {
  const token = await register()
  const { code, stdout, stderr } = await pay([`${cli.gateway}/plans/${PLAN}/purchase`, '-X', 'POST', '-H', `authorization: Bearer ${token}`, '--max-usd', '1'])
  t.equal(code, 1)
  t.notMatch(stdout, /funded with/, 'no wallet funded')
  t.match(stderr, /agent-gateway pay: the x402 client would not pay/)
  t.match(stderr, /--max-usd/, 'it names the option that stopped it')
})

t.test('errors: bad arguments exit 2 with the usage; nothing listening exits 1 naming the address', async (t) => {
  const none = await pay([])
  t.equal(none.code, 2)
  t.match(none.stderr, /agent-gateway pay: a URL is required/)
  t.match(none.stderr, /Usage:\n {2}agent-gateway pay URL/)
  const badJson = await pay([`${cli.gateway}/manifest.json`, '--data', '{nope'])
  t.equal(badJson.code, 2)
  t.match(badJson.stderr, /--data is not JSON/)
  const badHeader = await pay([`${cli.gateway}/manifest.json`, '-H', 'no colon'])
  t.equal(badHeader.code, 2)
  t.match(badHeader.stderr, /-H "no colon": expected "Name: value"/)
  const nowhere = `http://127.0.0.1:${await freePort()}`
  const down = await pay([`${nowhere}/plans/${PLAN}/purchase`, '-X', 'POST'])
  t.equal(down.code, 1)
  t.match(down.stderr, `nothing answers at ${nowhere}`)
})
