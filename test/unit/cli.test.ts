// The CLI's help, through the real launcher (bin/agent-gateway.js): `agent-gateway help` and
// `--help` are the index of the commands; each command has its own short help, printed the same by
// `agent-gateway COMMAND --help` and `agent-gateway help COMMAND`; and every `agent-gateway …`
// command the README and docs/ mention is one of them.
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { repoRoot } from '../helpers/cli.ts'

function cli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  // An empty DATA_DIR-free environment: help never reads the configuration, let alone a database.
  const run = spawnSync(process.execPath, [path.join(repoRoot, 'bin/agent-gateway.js'), ...args], {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: 30_000,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', GATEWAY_PORT: 'not-a-port' },
  })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

const COMMANDS = ['serve', 'gateway', 'scheduler-api', 'controller', 'media', 'memory', 'memory rotate-key', 'migrate', 'config', 'demo', 'pay', 'help'] as const

const lines = (text: string) => text.trimEnd().split('\n').length

t.test('help and --help print the same index of every command, without the configuration table', async (t) => {
  const help = cli(['help'])
  t.equal(help.code, 0, `exit 0 ${help.stderr}`)
  t.equal(help.stderr, '')
  for (const flag of ['--help', '-h']) t.equal(cli([flag]).stdout, help.stdout, `${flag} prints the index too`)
  for (const command of COMMANDS) t.match(help.stdout, new RegExp(`^ {2}${command.replace('-', '\\-')}\\b`, 'm'), `the index lists ${command}`)
  t.match(help.stdout, /agent-gateway help COMMAND/, 'and says how to get one command’s help')
  t.notMatch(help.stdout, /\| Variable \| Default \| Meaning \|/, 'the configuration table is `config`’s, not the index’s')
  t.ok(lines(help.stdout) <= 45, `the index is short (${lines(help.stdout)} lines)`)
})

t.test('each command has its own short help: COMMAND --help, COMMAND -h and help COMMAND print it', async (t) => {
  const index = cli(['help']).stdout
  const seen = new Set<string>()
  for (const command of COMMANDS) {
    const words = command.split(' ')
    const own = cli([...words, '--help'])
    t.equal(own.code, 0, `${command} --help: exit 0 ${own.stderr}`)
    t.equal(own.stderr, '', `${command} --help: nothing on stderr`)
    t.not(own.stdout, index, `${command} --help is not the index`)
    t.match(own.stdout, new RegExp(`^agent-gateway ${command}: `), `${command} --help names the command first`)
    t.match(own.stdout, new RegExp(`Usage:\\n {2}agent-gateway ${command}\\b`), `${command} --help has its usage`)
    t.ok(lines(own.stdout) <= 40, `${command} --help is short (${lines(own.stdout)} lines)`)
    t.notOk(seen.has(own.stdout), `${command} --help is its own text`)
    seen.add(own.stdout)
    t.equal(cli([...words, '-h']).stdout, own.stdout, `${command} -h`)
    const viaHelp = cli(['help', ...words])
    t.equal(viaHelp.code, 0, `help ${command}: exit 0`)
    t.equal(viaHelp.stdout, own.stdout, `help ${command} prints the same`)
  }
})

t.test('a mistyped command or option: exit 2, the error and where to look, on stderr', async (t) => {
  const unknown = cli(['help', 'nope'])
  t.equal(unknown.code, 2)
  t.match(unknown.stderr, /Unknown command "nope"/)
  t.match(unknown.stderr, /agent-gateway help/)
  const typo = cli(['serv'])
  t.equal(typo.code, 2)
  t.match(typo.stderr, /Unknown command "serv"/)
  const option = cli(['migrate', '--force'])
  t.equal(option.code, 2)
  t.match(option.stderr, /Unknown option '--force'/)
  t.match(option.stderr, /agent-gateway migrate --help/, 'it points at the command’s own help')
  t.equal(option.stdout, '')
})

t.test('config prints the configuration table; --version the version', async (t) => {
  const config = cli(['config'])
  t.equal(config.code, 0)
  t.match(config.stdout, /^\| Variable \| Default \| Meaning \|/)
  const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }
  t.equal(cli(['--version']).stdout, `${pkg.version}\n`)
})

t.test('every `agent-gateway …` command in README.md and docs/ is one the CLI knows', async (t) => {
  const files = ['README.md', ...readdirSync(path.join(repoRoot, 'docs')).map((name) => `docs/${name}`)].filter((file) => file.endsWith('.md'))
  const known = new Set(['help', '--help', '--version', ...COMMANDS])
  const answers = new Map<string, number | null>()
  let mentions = 0
  for (const file of files) {
    const text = readFileSync(path.join(repoRoot, file), 'utf8')
    // `agent-gateway WORD` in code spans and `npx agent-gateway WORD` (not the package, chart or image).
    for (const match of text.matchAll(/(?:`|npx )agent-gateway ((?:--)?[a-z][a-z-]*)(?: (rotate-key))?/g)) {
      const command = match[2] ? `${match[1]} ${match[2]}` : (match[1] as string)
      mentions += 1
      t.ok(known.has(command), `${file}: \`agent-gateway ${command}\` is a command`)
      if (command.startsWith('--')) continue
      if (!answers.has(command)) answers.set(command, cli([...command.split(' '), '--help']).code)
      t.equal(answers.get(command), 0, `${file}: \`agent-gateway ${command} --help\` answers`)
    }
  }
  t.ok(mentions >= 10, `${mentions} mentions checked`)
})
