// The official MCP conformance suite (@modelcontextprotocol/conformance) against `npm start`'s
// /mcp: the scenarios a stateless tools server must pass (server-initialize, ping, tools-list) and
// dns-rebinding-protection (a localhost server refuses a foreign Host/Origin with a 4xx and answers
// its own). The same scenario is run once with the guard switched off (ALLOWED_HOSTS=*), where it
// must fail: the suite's verdict is what this test reads, so it cannot pass by reading nothing.
// The suite's 0.1.16 has no 2026-07-28 (draft) server scenarios; mcp-2026.test.ts covers that revision.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { repoRoot, startCli } from '../helpers/cli.ts'

const SUITE = path.join(repoRoot, 'node_modules/@modelcontextprotocol/conformance/dist/index.js')

interface Verdict {
  code: number
  passed: number
  failed: number
  output: string
}

/** One scenario of the suite against `url`, on the project's Node (the suite needs Node ≥ 22). */
async function scenario(url: string, name: string): Promise<Verdict> {
  const result = await promisify(execFile)(process.execPath, [SUITE, 'server', '--url', url, '--scenario', name], { cwd: repoRoot, timeout: 60_000 }).then(
    (done) => ({ code: 0, stdout: done.stdout, stderr: done.stderr }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof error.code === 'number' ? error.code : 1,
      stdout: error.stdout ?? '',
      stderr: error.stderr ?? '',
    }),
  )
  // "Passed: 2/2, 0 failed, 0 warnings"
  const counts = /Passed:\s*(\d+)\/(\d+),\s*(\d+) failed/.exec(result.stdout)
  return {
    code: result.code,
    passed: Number(counts?.[1] ?? 0),
    failed: counts ? Number(counts[3]) : -1,
    output: `${result.stdout}\n${result.stderr}`.slice(-3000),
  }
}

t.test('the conformance scenarios pass against the embedded default', async (t) => {
  const cli = await startCli()
  t.teardown(() => cli.stop())
  for (const name of ['dns-rebinding-protection', 'server-initialize', 'ping', 'tools-list']) {
    const verdict = await scenario(`${cli.gateway}/mcp`, name)
    t.equal(verdict.failed, 0, `${name}: no check failed`, { output: verdict.output })
    t.ok(verdict.passed > 0, `${name}: checks ran and passed`)
    t.equal(verdict.code, 0, `${name}: the suite exits 0`)
  }
})

t.test('with the guard off, dns-rebinding-protection fails (the suite is read, not assumed)', async (t) => {
  const cli = await startCli({ env: { ALLOWED_HOSTS: '*' } })
  t.teardown(() => cli.stop())
  const verdict = await scenario(`${cli.gateway}/mcp`, 'dns-rebinding-protection')
  t.ok(verdict.failed > 0, 'the rebinding check fails', { output: verdict.output })
  t.not(verdict.code, 0, 'and the suite exits non-zero')
})
