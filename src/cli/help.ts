// The CLI's help: the index (`agent-gateway help`, `--help`) and each command's own short text
// (`agent-gateway COMMAND --help`, `agent-gateway help COMMAND`). Plain strings, no imports that
// load anything: help answers without the configuration, the logger or the runtime.
import { DEMO_USAGE } from '../demo/index.ts'
import { ROLES, type Role } from '../platform/roles.ts'
import { PAY_USAGE } from './pay-usage.ts'

const ROLE_LINES: Record<Role, string> = {
  gateway: '{base_url}: discovery, payments, plans, reviews, songs, speech (GATEWAY_PORT; sites: REVIEWS_PORT)',
  'scheduler-api': '{scheduler_url}: tasks, runs, ledger, accounts, webhooks (SCHEDULER_PORT)',
  controller: 'reconciles Task/Run resources into sandboxed runs (probes on CONTROLLER_PORT alone)',
  media: 'song/speech generation and DSP (probes on MEDIA_PORT alone)',
  memory: 'remember / recall / expand / deposits (MEMORY_PORT)',
}

export const INDEX = `agent-gateway: pay-per-request gateway, scheduler, job runner and memory service for AI agents

Usage:
  agent-gateway COMMAND [ARGS]    (no command: serve, which \`npm start\` runs)

Commands:
  serve [ROLE...]       run the given roles in one process (no role = every role)
  migrate               apply database migrations and exit
  config                print the configuration variables, their defaults and meaning
  demo                  show the whole product against a running server, as an agent uses it
  pay URL               pay one request with a throwaway wallet the dev faucet funds (embedded default)
  memory rotate-key     re-wrap the memory service's data keys under a new key-encryption key
  help [COMMAND]        this index, or one command's help
  --version             print the version

Roles (each is also a command: \`agent-gateway ROLE\` = \`agent-gateway serve ROLE\`):
${ROLES.map((role) => `  ${role.padEnd(14)}${ROLE_LINES[role]}`).join('\n')}

Configuration comes from the environment, read once at start-up (\`agent-gateway config\` lists every
variable). Without DATABASE_URL data lives in PGlite under DATA_DIR; without REDIS_URL an in-process
substitute stands in for Redis; without CHAIN_RPC_URL a local EVM dev chain with a test USDC.

agent-gateway help COMMAND (or agent-gateway COMMAND --help) explains one command.
`

const SERVE = `agent-gateway serve: run roles in one process (the default command; \`npm start\`)

Usage:
  agent-gateway serve [ROLE...]
  agent-gateway ROLE [ROLE...]    the same as \`serve ROLE...\`

With no ROLE every role runs (${ROLES.join(', ')}). Each listener prints
its URL, then "agent-gateway ready (...)". SIGTERM or Ctrl-C turns /readyz to 503, drains in-flight
requests (up to SHUTDOWN_GRACE_MS) and exits 0. Migrations are applied at start-up.

The embedded default needs nothing: PGlite under DATA_DIR (one process at a time), an in-process
Redis substitute, and a local anvil dev chain with a test USDC and POST /dev/faucet. Set
DATABASE_URL, REDIS_URL and CHAIN_RPC_URL to run on shared services, one role per process.

Logs: pino on stdout, readable lines on a terminal, JSON lines otherwise (LOG_FORMAT=json|pretty,
LOG_LEVEL). Configuration: \`agent-gateway config\`.

Options:
  -h, --help   this text
`

const ROLE_DETAILS: Record<Role, string> = {
  gateway:
    'The public door: discovery (/openapi.json, /manifest.json, /llms.txt, the advisor), x402 and MPP\npayments, plans and bearer tokens, review sessions (sites on REVIEWS_PORT), songs and speech\n(the media role in-process, or MEDIA_URL), the MCP endpoint /mcp and, on the dev chain, /dev/faucet.',
  'scheduler-api': 'Tasks (python or node scripts on a cron or on demand), their runs, escrow, ledger and logs,\naccounts and webhooks. Runs are executed by the controller role.',
  controller:
    'Reconciles Task and Run resources into sandboxed runs: bubblewrap on this host\n(SCHEDULER_EXECUTOR=local) or a Job per run in Kubernetes (SCHEDULER_EXECUTOR=kubernetes).\nServes only /healthz, /readyz and /metrics, on CONTROLLER_PORT when it runs alone.',
  media:
    'Generates, analyses, ranks, masters and hosts songs and speech for the gateway. Alone it serves\nthe internal API on MEDIA_PORT and needs MEDIA_INTERNAL_TOKEN (the gateway presents it, with\nMEDIA_URL pointing here).',
  memory: 'Stores text encrypted with a key per owner and recalls it for free; deposits, plans or a\npayment per call pay the writes.',
}

function roleHelp(role: Role): string {
  const port = { gateway: 'GATEWAY_PORT', 'scheduler-api': 'SCHEDULER_PORT', controller: 'CONTROLLER_PORT', media: 'MEDIA_PORT', memory: 'MEMORY_PORT' }[role]
  const extra =
    role === 'memory' ? '\n  agent-gateway memory rotate-key [--to KEK_ID]\n                       re-wrap the data keys (see `agent-gateway memory rotate-key --help`)' : ''
  return `agent-gateway ${role}: run the ${role} role on its own (the same as \`agent-gateway serve ${role}\`)

Usage:
  agent-gateway ${role} [ROLE...]${extra}

${ROLE_DETAILS[role]}

Listens on ${port}. The processes of one deployment share their data through DATABASE_URL and
REDIS_URL (without them this process has its own embedded database under DATA_DIR). Start, stop
and logs: \`agent-gateway serve --help\`.

Options:
  -h, --help   this text
`
}

const MIGRATE = `agent-gateway migrate: apply the database migrations and exit

Usage:
  agent-gateway migrate

Applies every pending migration to DATABASE_URL (or to the embedded PGlite under DATA_DIR) and
prints how many ran; exit 0, or 1 with the error. Every role also applies them at start-up; run this
once before starting many processes (the Helm chart runs it as a hook).

Options:
  -h, --help   this text
`

const CONFIG = `agent-gateway config: print the configuration variables, their defaults and meaning

Usage:
  agent-gateway config

Prints a Markdown table (the one in README.md, "Configuration"). Every variable is read once at
start-up from the environment; a bad value stops start-up with a message naming it (exit 78).

Options:
  -h, --help   this text
`

const ROTATE_KEY = `agent-gateway memory rotate-key: re-wrap every memory owner's data key under a new key-encryption key

Usage:
  agent-gateway memory rotate-key [--to KEK_ID]

Without --to, a new key is generated into the key ring file (MEMORY_KEY_FILE, or the embedded
default's DATA_DIR/memory-keys.json) and made active. With --to, KEK_ID must already be in the ring
(a mounted Secret). Records are not re-encrypted; replicas keep serving. With PGlite, stop the
server first: it holds DATA_DIR. See docs/memory.md, "Keys".

Options:
  --to KEK_ID  the key to rotate to (already in the ring)
  -h, --help   this text
`

const HELP = `agent-gateway help: the index of the commands, or one command's help

Usage:
  agent-gateway help [COMMAND]

The same as \`agent-gateway --help\`, or as \`agent-gateway COMMAND --help\`.
`

/** Each command's help by its words ("memory rotate-key" for the subcommand). */
export const COMMAND_HELP: Readonly<Record<string, string>> = {
  serve: SERVE,
  migrate: MIGRATE,
  config: CONFIG,
  demo: DEMO_USAGE,
  pay: PAY_USAGE,
  help: HELP,
  'memory rotate-key': ROTATE_KEY,
  ...Object.fromEntries(ROLES.map((role) => [role, roleHelp(role)])),
}

/** The help of `words` (a command, or "memory rotate-key"), or undefined for an unknown command. */
export function helpOf(words: string[]): string | undefined {
  if (words.length === 0) return INDEX
  return COMMAND_HELP[words.join(' ')]
}
