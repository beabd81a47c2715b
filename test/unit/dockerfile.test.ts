// The Dockerfiles, read as text (no Docker engine runs in CI): the service image (stages,
// non-root user, entrypoint, production install, every COPY source present and not ignored by
// .dockerignore, every module the code loads at runtime inside what is copied) and the two runner
// images (base images, uid 65534, the bootstrap where the controller runs it, the SPEC's
// preinstalled libraries pinned and equal to the validator's list).
import t from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { PREINSTALLED } from '../../src/scheduler/contract/index.ts'
import { buildRunJob } from '../../controllers/kubernetes/job-spec.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

interface Instruction {
  keyword: string
  args: string
  line: number
}

interface Stage {
  base: string
  name: string | undefined
  instructions: Instruction[]
}

/** Instructions of a Dockerfile: comments dropped, `\` continuations joined, keywords upper-cased. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const start = i
    let current = lines[i] ?? ''
    if (/^\s*(#|$)/.test(current)) continue
    while (/\\\s*$/.test(current) && i + 1 < lines.length) {
      i++
      const next = lines[i] ?? ''
      if (/^\s*#/.test(next)) continue // comment lines inside a continuation are skipped by Docker
      current = current.replace(/\\\s*$/, ' ') + next
    }
    const match = /^\s*([A-Za-z]+)\s+([\s\S]*)$/.exec(current)
    if (match) out.push({ keyword: (match[1] as string).toUpperCase(), args: (match[2] as string).trim(), line: start + 1 })
  }
  return out
}

/** Stages with ARG defaults declared before the first FROM substituted into the base image. */
function stagesOf(instructions: Instruction[]): Stage[] {
  const globalArgs = new Map<string, string>()
  const stages: Stage[] = []
  for (const instruction of instructions) {
    if (instruction.keyword === 'ARG' && stages.length === 0) {
      const [name, value = ''] = instruction.args.split('=', 2)
      globalArgs.set((name as string).trim(), value.trim())
      continue
    }
    if (instruction.keyword === 'FROM') {
      const words = instruction.args.split(/\s+/).filter((w) => !w.startsWith('--'))
      const base = (words[0] as string).replace(/\$\{?(\w+)\}?/g, (_, name: string) => globalArgs.get(name) ?? `\${${name}}`)
      const asIndex = words.findIndex((w) => w.toUpperCase() === 'AS')
      stages.push({ base, name: asIndex >= 0 ? words[asIndex + 1] : undefined, instructions: [] })
      continue
    }
    stages.at(-1)?.instructions.push(instruction)
  }
  return stages
}

interface Copy {
  from: string | undefined
  sources: string[]
  dest: string
  line: number
}

function copiesOf(stage: Stage): Copy[] {
  return stage.instructions
    .filter((i) => i.keyword === 'COPY' || i.keyword === 'ADD')
    .map((i) => {
      const words = i.args.startsWith('[') ? (JSON.parse(i.args) as string[]) : i.args.split(/\s+/)
      const flags = words.filter((w) => w.startsWith('--'))
      const paths = words.filter((w) => !w.startsWith('--'))
      const from = flags.find((f) => f.startsWith('--from='))?.slice('--from='.length)
      return { from, sources: paths.slice(0, -1), dest: paths.at(-1) as string, line: i.line }
    })
}

function execForm(stage: Stage, keyword: string): unknown {
  const instruction = stage.instructions.filter((i) => i.keyword === keyword).at(-1)
  return instruction === undefined ? undefined : JSON.parse(instruction.args)
}

/** .dockerignore patterns as matchers (Go filepath.Match plus `**`), in order, with `!` exceptions. */
function dockerignore(file: string): (relative: string) => boolean {
  if (!existsSync(file)) return () => false
  const rules = readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const negate = l.startsWith('!')
      const pattern = path.posix.normalize((negate ? l.slice(1) : l).trim()).replace(/^\/+/, '')
      let re = ''
      for (let i = 0; i < pattern.length; i++) {
        const c = pattern[i] as string
        if (c === '*' && pattern[i + 1] === '*') {
          re += pattern[i + 2] === '/' ? '(?:.*/)?' : '.*'
          i += pattern[i + 2] === '/' ? 2 : 1
        } else if (c === '*') re += '[^/]*'
        else if (c === '?') re += '[^/]'
        else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&')
      }
      return { negate, re: new RegExp(`^${re}$`) }
    })
  const matches = (p: string) => {
    let excluded = false
    for (const rule of rules) if (rule.re.test(p)) excluded = !rule.negate
    return excluded
  }
  // A path is excluded when it or any directory above it is.
  return (relative) => {
    const parts = path.posix
      .normalize(relative)
      .replace(/^\.\/?/, '')
      .split('/')
    return parts.some((_, i) => matches(parts.slice(0, i + 1).join('/')))
  }
}

function listFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    return entry.isDirectory() ? listFiles(full) : [full]
  })
}

t.test('the dockerignore matcher behaves like Docker on the patterns we use', async (t) => {
  const ignored = dockerignore(path.join(ROOT, '.dockerignore'))
  t.ok(ignored('node_modules'), 'root node_modules')
  t.ok(ignored('runner-image/node/node_modules/x/index.js'), '**/node_modules at depth')
  t.ok(ignored('isolate-0x1-v8.log'), '*.log')
  t.ok(ignored('test/unit/dockerfile.test.ts'), 'a file under an ignored directory')
  t.notOk(ignored('src/cli.ts'))
  t.notOk(ignored('runner-image/bootstrap/bootstrap.py'), 'the bootstrap stays in the context')
})

t.test('service image', async (t) => {
  const stages = stagesOf(parseDockerfile(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8')))
  const ignored = dockerignore(path.join(ROOT, '.dockerignore'))
  const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
    engines: { node: string }
    bin: Record<string, string>
    scripts: Record<string, string>
    dependencies: Record<string, string>
  }

  t.ok(stages.length >= 2, 'multi-stage')
  for (const stage of stages) t.equal(stage.base, 'node:24-bookworm-slim', `stage ${stage.name} is on node:24-bookworm-slim`)
  t.equal(/>=\s*(\d+)/.exec(pkg.engines.node)?.[1], '24', 'the base image major matches package.json engines')
  const names = stages.map((s) => s.name)
  t.equal(new Set(names).size, names.length, 'stage names are unique')

  const deps = stages[0] as Stage
  const install = deps.instructions
    .filter((i) => i.keyword === 'RUN')
    .map((i) => i.args)
    .join('\n')
  t.match(install, /npm install\b[^\n]*--omit=dev/, 'production dependencies only')
  t.notMatch(install, /npm ci\b/, 'npm install: the image adds the optional local-model runtime to the locked tree')
  // The optional local-model runtime (MEMORY_EMBEDDINGS_MODEL_DIR) is not in package.json's
  // dependencies: the image installs the exact spec package.json's install:local-models script does.
  const localModels = /\bnpm install --no-save (\S+)$/.exec(pkg.scripts['install:local-models'] ?? '')?.[1]
  t.ok(localModels, `package.json's install:local-models installs one pinned spec (${localModels})`)
  t.notOk('@huggingface/transformers' in pkg.dependencies, 'the local-model runtime is not a default dependency')
  const runtimeInstall = install.split('\n').find((line) => /npm install\b/.test(line) && line.includes('--no-save')) ?? ''
  t.ok(localModels !== undefined && runtimeInstall.split(/\s+/).includes(localModels), `the image installs ${localModels} (--no-save) with the production dependencies`)
  t.ok(
    deps.instructions.some((i) => i.keyword === 'ENV' && /\bONNXRUNTIME_NODE_INSTALL=skip\b/.test(i.args)),
    "onnxruntime-node's postinstall (CUDA providers from NuGet) is skipped",
  )
  // package.json's postinstall runs a file in scripts/, which .dockerignore keeps out of the build
  // context: the deps stage drops the postinstall before installing (or npm install would fail).
  const postinstall = /\bscripts\/\S+/.exec(pkg.scripts.postinstall ?? '')?.[0]
  if (postinstall !== undefined && ignored(postinstall)) {
    t.match(install, /npm pkg delete scripts\.postinstall\b[^\n]*&& npm install\b/, `the deps stage drops the postinstall (${postinstall} is not in the build context)`)
  }

  const runtime = stages.at(-1) as Stage
  const user = runtime.instructions.filter((i) => i.keyword === 'USER').at(-1)?.args
  t.equal(user, '10001:10001', 'runs as uid/gid 10001')
  t.same(execForm(runtime, 'ENTRYPOINT'), ['node', 'bin/agent-gateway.js'])
  t.same(execForm(runtime, 'CMD'), ['serve'])
  t.equal(runtime.instructions.filter((i) => i.keyword === 'WORKDIR').at(-1)?.args, '/app')
  t.ok(Object.values(pkg.bin).includes('bin/agent-gateway.js'), 'the entrypoint is the package bin')

  const labels = runtime.instructions
    .filter((i) => i.keyword === 'LABEL')
    .map((i) => i.args)
    .join(' ')
  for (const key of ['title', 'description', 'source', 'licenses', 'version', 'revision']) {
    t.match(labels, new RegExp(`org\\.opencontainers\\.image\\.${key}=`), `OCI label ${key}`)
  }

  // COPY sources: present in the repository and kept in the build context.
  const copied: string[] = []
  for (const [index, stage] of stages.entries()) {
    for (const copy of copiesOf(stage)) {
      if (copy.from !== undefined) {
        t.ok(
          stages.slice(0, index).some((s) => s.name === copy.from),
          `line ${copy.line}: --from=${copy.from} is an earlier stage`,
        )
        continue
      }
      for (const source of copy.sources) {
        t.ok(existsSync(path.join(ROOT, source)), `line ${copy.line}: ${source} exists`)
        t.notOk(ignored(source), `line ${copy.line}: ${source} is not excluded by .dockerignore`)
        if (index === stages.length - 1) copied.push(source)
      }
    }
  }
  t.ok(copied.includes('bin'), 'bin/ is copied into the runtime stage')

  // Every relative module or file the runtime code loads must be inside what the image copies.
  const inImage = (file: string) =>
    copied.some((source) => {
      const absolute = path.join(ROOT, source)
      return file === absolute || file.startsWith(absolute + path.sep)
    })
  const code = [...listFiles(path.join(ROOT, 'src')), ...listFiles(path.join(ROOT, 'controllers')), path.join(ROOT, 'bin', 'agent-gateway.js')].filter((f) =>
    /\.(ts|js|mjs)$/.test(f),
  )
  const reference = /(?:from\s+|import\(\s*|new URL\(\s*)'(\.\.?\/[^']*)'/g
  let checked = 0
  for (const file of code) {
    for (const match of readFileSync(file, 'utf8').matchAll(reference)) {
      const target = path.resolve(path.dirname(file), match[1] as string)
      if (target.includes(`${path.sep}node_modules${path.sep}`)) continue // the bin's Node >= 24 fallback, not in the image's path
      checked++
      if (!inImage(target)) t.fail(`${path.relative(ROOT, file)} loads ${path.relative(ROOT, target)}, which the image does not copy`)
    }
  }
  t.ok(checked > 100, `every relative import of src/, controllers/ and bin/ is inside the image (${checked} checked)`)
  t.ok(statSync(path.join(ROOT, 'src', 'migrations')).isDirectory(), 'migrations ship with src/')
})

interface RunnerCase {
  runtime: 'python' | 'node'
  base: string
  bootstrap: string
  pinned: () => Map<string, string>
}

const pep503 = (name: string) => name.toLowerCase().replace(/[-_.]+/g, '-')

const runners: RunnerCase[] = [
  {
    runtime: 'python',
    base: 'python:3.12-slim-bookworm',
    bootstrap: 'bootstrap/bootstrap.py',
    pinned: () => {
      const requirements = readFileSync(path.join(ROOT, 'runner-image', 'python', 'requirements.txt'), 'utf8')
      const entries = requirements
        .split('\n')
        .map((l) => l.replace(/#.*/, '').trim())
        .filter(Boolean)
      return new Map(
        entries.map((entry) => {
          const match = /^([A-Za-z0-9._-]+)==([0-9][A-Za-z0-9.+!-]*)$/.exec(entry)
          return match ? [pep503(match[1] as string), match[2] as string] : [entry, 'NOT PINNED']
        }),
      )
    },
  },
  {
    runtime: 'node',
    base: 'node:22-bookworm-slim',
    bootstrap: 'bootstrap/bootstrap.mjs',
    pinned: () => {
      const pkg = JSON.parse(readFileSync(path.join(ROOT, 'runner-image', 'node', 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
      return new Map(Object.entries(pkg.dependencies).map(([name, version]) => [name, /^\d+\.\d+\.\d+$/.test(version) ? version : 'NOT PINNED']))
    },
  },
]

for (const runner of runners) {
  t.test(`runner image (${runner.runtime})`, async (t) => {
    const context = path.join(ROOT, 'runner-image')
    const stages = stagesOf(parseDockerfile(readFileSync(path.join(context, runner.runtime, 'Dockerfile'), 'utf8')))
    const image = stages.at(-1) as Stage
    t.equal(image.base, runner.base)
    t.equal(image.instructions.filter((i) => i.keyword === 'USER').at(-1)?.args, '65534:65534', 'runs as nobody')

    for (const copy of stages.flatMap(copiesOf)) {
      for (const source of copy.sources) t.ok(existsSync(path.join(context, source)), `line ${copy.line}: ${source} exists in the context runner-image/`)
    }
    const bootstrapCopy = copiesOf(image).find((c) => c.sources.includes(runner.bootstrap))
    const target = `/agw/${path.basename(runner.bootstrap)}`
    t.equal(bootstrapCopy?.dest, target, `the bootstrap is at ${target}`)

    // The image's default command is the one the controller gives run pods.
    const job = buildRunJob(undefined, {
      request: {
        runName: 'r',
        namespace: 'ns',
        taskName: 'task',
        runUid: 'uid',
        runtime: runner.runtime,
        entrypoint: runner.runtime === 'python' ? 'main.py' : 'main.mjs',
        dependencies: [],
        maxRuntimeSec: 10,
      },
      images: { python: 'python-image', node: 'node-image' },
      runConfigMapName: 'files',
    })
    t.same(execForm(image, 'CMD'), job.spec?.template.spec?.containers[0]?.command, 'CMD = the controller command')

    const pinned = runner.pinned()
    t.same([...pinned.keys()].sort(), PREINSTALLED[runner.runtime].map((n) => (runner.runtime === 'python' ? pep503(n) : n)).sort(), 'exactly the SPEC preinstalled libraries')
    for (const [name, version] of pinned) t.not(version, 'NOT PINNED', `${name} is pinned to an exact version`)
  })
}
