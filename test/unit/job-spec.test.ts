// The per-run Job, ConfigMap and Secret (controllers/kubernetes/job-spec.ts, pure), validated with
// kubernetes-models' batch/v1 and v1 schemas; and the Job executor's pure parts (verdicts, log
// parsing, truncation, runtime version).
import t from 'tap'
import { Job } from 'kubernetes-models/batch/v1'
import { ConfigMap, Secret } from 'kubernetes-models/v1'
import type { V1Job, V1Pod } from '@kubernetes/client-node'
import {
  buildRunConfigMap,
  buildRunJob,
  buildRunTokenSecret,
  CONFIG_KEYS,
  DEFAULT_JOB_TEMPLATE,
  dnsLabel,
  labelValue,
  runJobName,
  SENTINEL,
  type RunJobInput,
} from '../../controllers/kubernetes/job-spec.ts'
import { classifyJob, imageRuntimeVersion, parsePodLog, truncateOutput } from '../../controllers/kubernetes/job-executor.ts'

const images = { python: 'registry.example/agw/runner-python:3.12.7', node: 'registry.example/agw/runner-node:22.11' }

function request(overrides: Partial<RunJobInput['request']> = {}): RunJobInput['request'] {
  return {
    runName: 'nightly-202611240000',
    namespace: 'agents',
    taskName: 'nightly',
    runUid: '3f1c6c1e-0000-4000-8000-000000000001',
    runtime: 'python',
    entrypoint: 'main.py',
    dependencies: ['requests==2.32.3'],
    maxRuntimeSec: 90.5,
    envSecretName: 'nightly-env',
    helper: { url: 'http://agent-gateway-helper.agents.svc:4025/runs/nightly-202611240000', token: 'tok-secret' },
    ...overrides,
  }
}

function build(template?: V1Job, overrides: Partial<RunJobInput['request']> = {}, extra: Partial<RunJobInput> = {}): V1Job {
  return buildRunJob(template, { request: request(overrides), images, runConfigMapName: 'nightly-202611240000-files', runTokenSecretName: 'nightly-202611240000-token', ...extra })
}

function podSpec(job: V1Job) {
  const spec = job.spec?.template.spec
  if (spec === undefined) throw new Error('no pod spec')
  return spec
}

function validate(job: V1Job): void {
  new Job(job as ConstructorParameters<typeof Job>[0]).validate()
}

t.test('the default Job: sandbox fields, per-run fields, valid batch/v1', async (t) => {
  const job = build()
  validate(job)
  t.equal(job.metadata?.name, 'nightly-202611240000', 'named after the Run')
  t.equal(job.metadata?.namespace, 'agents')
  t.same(job.metadata?.ownerReferences, [
    {
      apiVersion: 'jobs.agent-gateway.dev/v1alpha1',
      kind: 'Run',
      name: 'nightly-202611240000',
      uid: '3f1c6c1e-0000-4000-8000-000000000001',
      controller: true,
      blockOwnerDeletion: true,
    },
  ])
  for (const labels of [job.metadata?.labels, job.spec?.template.metadata?.labels]) {
    t.equal(labels?.['app.kubernetes.io/component'], 'task-run', 'the NetworkPolicy selects task-run pods')
    t.equal(labels?.['jobs.agent-gateway.dev/run'], 'nightly-202611240000')
    t.equal(labels?.['jobs.agent-gateway.dev/task'], 'nightly')
    t.equal(labels?.['jobs.agent-gateway.dev/job'], 'nightly-202611240000')
  }
  t.equal(job.spec?.backoffLimit, 0, 'a retry is a new Job, never a pod restart')
  t.equal(job.spec?.activeDeadlineSeconds, Math.ceil(90.5 + 300 + 30), 'maxRuntime + install budget + startup allowance')
  t.equal(job.spec?.ttlSecondsAfterFinished, 300)

  const spec = podSpec(job)
  t.equal(spec.restartPolicy, 'Never')
  t.equal(spec.automountServiceAccountToken, false)
  t.equal(spec.enableServiceLinks, false)
  t.equal(spec.hostNetwork, false)
  t.equal(spec.hostPID, false)
  t.equal(spec.hostIPC, false)
  t.notOk('runtimeClassName' in spec, 'no runtimeClassName unless the template sets one')
  t.notOk('hostUsers' in spec, 'no hostUsers unless the template sets false')
  t.same(spec.securityContext, { runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534, fsGroup: 65534, seccompProfile: { type: 'RuntimeDefault' } })
  t.equal(spec.containers.length, 1, 'exactly one container')
  const container = spec.containers[0]
  if (container === undefined) throw new Error('no container')
  t.equal(container.name, 'script')
  t.equal(container.image, images.python)
  t.same(container.command, ['python3', '-I', '/agw/bootstrap.py', '/agw/run.json'], 'the shared bootstrap with run.json')
  t.same(container.securityContext, {
    runAsNonRoot: true,
    runAsUser: 65534,
    runAsGroup: 65534,
    allowPrivilegeEscalation: false,
    privileged: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  })
  t.same(container.resources, { requests: { cpu: '250m', memory: '256Mi', 'ephemeral-storage': '100Mi' }, limits: { cpu: '1', memory: '512Mi', 'ephemeral-storage': '1Gi' } })
  t.same(container.envFrom, [{ secretRef: { name: 'nightly-env', optional: false } }], 'a missing env Secret fails the pod')
  const env = Object.fromEntries((container.env ?? []).map((e) => [e.name, e]))
  t.same(
    env.AGW_RUN_TOKEN,
    { name: 'AGW_RUN_TOKEN', valueFrom: { secretKeyRef: { name: 'nightly-202611240000-token', key: 'token', optional: false } } },
    'the token from its own Secret',
  )
  t.notOk(JSON.stringify(job).includes('tok-secret'), 'the token value is nowhere in the Job')
  t.equal(env.AGW_HELPER_URL?.value, 'http://agent-gateway-helper.agents.svc:4025/runs/nightly-202611240000')
  t.equal(env.HOME?.value, '/tmp')
  t.same(container.volumeMounts, [
    { name: 'agw', mountPath: '/agw', readOnly: true },
    { name: 'script', mountPath: '/work/script', readOnly: true },
    { name: 'tmp', mountPath: '/tmp' },
  ])
  t.same(
    spec.volumes?.find((v) => v.name === 'tmp'),
    { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '256Mi' } },
    '/tmp is a sized memory emptyDir',
  )
  t.same(spec.volumes?.find((v) => v.name === 'script')?.configMap?.items, [{ key: 'script.main.py', path: 'main.py', mode: 0o444 }])
  t.same(spec.volumes?.find((v) => v.name === 'agw')?.configMap?.items, [
    { key: CONFIG_KEYS.runJson, path: 'run.json', mode: 0o444 },
    { key: CONFIG_KEYS.bootstrap, path: 'bootstrap.py', mode: 0o444 },
  ])
  t.equal(container.terminationMessagePolicy, 'FallbackToLogsOnError')
})

t.test('node runs, no dependencies, no helper, no env Secret', async (t) => {
  const job = build(undefined, { runtime: 'node', entrypoint: 'index.mjs', dependencies: [], envSecretName: undefined, helper: undefined }, { runTokenSecretName: undefined })
  validate(job)
  const container = podSpec(job).containers[0]
  t.equal(container?.image, images.node)
  t.same(container?.command, ['node', '/agw/bootstrap.mjs', '/agw/run.json'])
  t.same(container?.envFrom, [])
  t.notOk(
    container?.env?.some((e) => e.name.startsWith('AGW_') && e.name !== 'AGW_RUN_ID'),
    'no helper env without a helper',
  )
  t.equal(job.spec?.activeDeadlineSeconds, Math.ceil(90.5 + 30), 'no install budget without dependencies')
})

t.test('a template tunes sizing and scheduling but cannot weaken the sandbox', async (t) => {
  const hostile: V1Job = {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { labels: { team: 'agents' }, annotations: { 'example.com/a': 'b' } },
    spec: {
      backoffLimit: 6,
      ttlSecondsAfterFinished: 60,
      template: {
        metadata: { labels: { 'jobs.agent-gateway.dev/run': 'spoofed', extra: 'yes' } },
        spec: {
          runtimeClassName: 'gvisor',
          hostUsers: false,
          hostNetwork: true,
          automountServiceAccountToken: true,
          restartPolicy: 'OnFailure',
          nodeSelector: { pool: 'sandbox' },
          tolerations: [{ key: 'sandbox', operator: 'Exists', effect: 'NoSchedule' }],
          securityContext: { runAsUser: 0, runAsNonRoot: false, seccompProfile: { type: 'Unconfined' } },
          initContainers: [{ name: 'sneaky', image: 'busybox' }],
          containers: [
            {
              name: 'script',
              image: 'ignored:latest',
              resources: { limits: { cpu: '2', memory: '1Gi' } },
              securityContext: { privileged: true, allowPrivilegeEscalation: true, readOnlyRootFilesystem: false, capabilities: { add: ['NET_ADMIN'] } },
              env: [
                { name: 'HOME', value: '/root' },
                { name: 'TZ', value: 'UTC' },
              ],
            },
            { name: 'sidecar', image: 'busybox' },
          ],
          volumes: [
            { name: 'tmp', emptyDir: { sizeLimit: '1Gi' } },
            { name: 'ca', configMap: { name: 'ca-bundle' } },
          ],
        },
      },
    },
  }
  const before = JSON.stringify(hostile)
  const job = build(hostile)
  validate(job)
  t.equal(JSON.stringify(hostile), before, 'the template is not modified')
  const spec = podSpec(job)
  t.equal(spec.runtimeClassName, 'gvisor', 'runtimeClassName from the template')
  t.equal(spec.hostUsers, false, 'hostUsers: false from the template')
  t.same(spec.nodeSelector, { pool: 'sandbox' })
  t.equal(spec.tolerations?.length, 1)
  t.equal(job.metadata?.labels?.team, 'agents')
  t.equal(job.spec?.template.metadata?.labels?.extra, 'yes')
  t.equal(job.spec?.template.metadata?.labels?.['jobs.agent-gateway.dev/run'], 'nightly-202611240000', 'our labels win')
  t.equal(job.spec?.ttlSecondsAfterFinished, 60)
  t.equal(job.spec?.backoffLimit, 0)
  t.equal(spec.hostNetwork, false)
  t.equal(spec.automountServiceAccountToken, false)
  t.equal(spec.restartPolicy, 'Never')
  t.same(spec.securityContext, { runAsUser: 65534, runAsNonRoot: true, runAsGroup: 65534, fsGroup: 65534, seccompProfile: { type: 'RuntimeDefault' } })
  t.notOk(spec.initContainers, 'no init containers')
  t.equal(spec.containers.length, 1, 'no sidecars')
  const container = spec.containers[0]
  t.equal(container?.image, images.python, 'the runtime image, not the template image')
  t.same(container?.resources, { limits: { cpu: '2', memory: '1Gi' } }, 'resources from the template')
  t.same(container?.securityContext?.capabilities, { drop: ['ALL'] })
  t.equal(container?.securityContext?.privileged, false)
  t.equal(container?.securityContext?.allowPrivilegeEscalation, false)
  t.equal(container?.securityContext?.readOnlyRootFilesystem, true)
  t.equal(container?.env?.find((e) => e.name === 'HOME')?.value, '/tmp', 'reserved env cannot be overridden')
  t.equal(container?.env?.find((e) => e.name === 'TZ')?.value, 'UTC', 'other template env is kept')
  t.same(
    spec.volumes?.find((v) => v.name === 'tmp'),
    { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '1Gi' } },
    '/tmp size from the template, always memory-backed',
  )
  t.ok(
    spec.volumes?.some((v) => v.name === 'ca'),
    'extra template volumes are kept',
  )

  const localhost = build({
    ...DEFAULT_JOB_TEMPLATE,
    spec: {
      ...DEFAULT_JOB_TEMPLATE.spec,
      template: { spec: { containers: [{ name: 'script' }], securityContext: { seccompProfile: { type: 'Localhost', localhostProfile: 'profiles/agw.json' } } } },
    },
  })
  t.same(podSpec(localhost).securityContext?.seccompProfile, { type: 'Localhost', localhostProfile: 'profiles/agw.json' }, 'a Localhost seccomp profile is allowed')
})

t.test('names: deterministic, DNS-safe, attempts distinct', async (t) => {
  t.equal(runJobName('nightly-202611240000'), 'nightly-202611240000')
  t.equal(runJobName('nightly-202611240000', 1), runJobName('nightly-202611240000'), 'the same name on every call: a restart adopts')
  t.equal(runJobName('nightly-202611240000', 2), 'nightly-202611240000-a2')
  const long = `${'a'.repeat(60)}.example-202611240000`
  const name = runJobName(long)
  t.ok(name.length <= 52 && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(name), `long/dotted names fit a DNS label (${name})`)
  t.equal(runJobName(long), name)
  t.not(runJobName(`${'a'.repeat(60)}.example-202611240001`), name, 'distinct runs stay distinct after shortening')
  t.equal(dnsLabel('plain-name'), 'plain-name')
  t.equal(labelValue('nightly'), 'nightly')
  const value = labelValue('x'.repeat(100))
  t.ok(value.length <= 63)
  const job = build(undefined, { runName: long, taskName: 't'.repeat(100) })
  validate(job)
  t.equal(job.metadata?.annotations?.['jobs.agent-gateway.dev/run-name'], long, 'the full name in an annotation')
  t.throws(() => build(undefined, { runUid: undefined }), /runUid is required/, 'the Job must be owned by the Run')
})

t.test('ConfigMap (script, run.json, bootstrap) and token Secret', async (t) => {
  const cm = buildRunConfigMap({
    name: 'nightly-202611240000-files',
    jobName: 'nightly-202611240000',
    request: request(),
    source: 'print("hi")\n',
    bootstrapSource: '# bootstrap\n',
    pipIndexUrl: 'https://pypi.example/simple',
  })
  new ConfigMap(cm as ConstructorParameters<typeof ConfigMap>[0]).validate()
  t.same(
    JSON.parse(cm.data?.[CONFIG_KEYS.runJson] ?? '{}'),
    {
      runtime: 'python',
      entrypoint: '/work/script/main.py',
      dependencies: ['requests==2.32.3'],
      installDir: '/tmp/.agw',
      pipIndexUrl: 'https://pypi.example/simple',
      npmRegistry: null,
      npmCli: null,
      proxySocket: null,
      proxyPort: null,
      statusFd: null,
    },
    'run.json: the bootstrap contract, Kubernetes flavour',
  )
  t.equal(cm.data?.['script.main.py'], 'print("hi")\n')
  t.equal(cm.data?.[CONFIG_KEYS.bootstrap], '# bootstrap\n')
  t.equal(cm.metadata?.ownerReferences?.[0]?.kind, 'Run')
  t.throws(() => buildRunConfigMap({ name: 'x', jobName: 'x', request: request(), source: 'x'.repeat(1_100_000), bootstrapSource: '' }), /ConfigMap limit/)

  const secret = buildRunTokenSecret({ name: 'nightly-202611240000-token', jobName: 'nightly-202611240000', request: request(), token: 'tok-secret' })
  new Secret(secret as ConstructorParameters<typeof Secret>[0]).validate()
  t.same(secret.stringData, { token: 'tok-secret' })
  t.equal(secret.metadata?.ownerReferences?.[0]?.uid, '3f1c6c1e-0000-4000-8000-000000000001')
})

// ------------------------------------------------------------------ executor pure parts

function jobWith(conditions: Array<{ type: string; reason?: string; message?: string }>): V1Job {
  return { metadata: { name: 'j' }, status: { conditions: conditions.map((c) => ({ ...c, status: 'True' })) } } as V1Job
}

function podWith(state: Record<string, unknown>): V1Pod {
  return { metadata: { name: 'j-abcde' }, status: { containerStatuses: [{ name: 'script', image: 'x', imageID: '', ready: false, restartCount: 0, state }] } } as V1Pod
}

t.test('classifyJob', async (t) => {
  t.same(classifyJob(jobWith([{ type: 'Complete' }]), podWith({ terminated: { exitCode: 0 } })), { state: 'finished', outcome: 'succeeded', exitCode: 0 })
  t.same(classifyJob(jobWith([{ type: 'Failed', reason: 'BackoffLimitExceeded' }]), podWith({ terminated: { exitCode: 3, reason: 'Error' } })), {
    state: 'finished',
    outcome: 'failed',
    exitCode: 3,
    reason: 'BackoffLimitExceeded',
  })
  t.match(classifyJob(jobWith([{ type: 'Failed', reason: 'BackoffLimitExceeded' }]), podWith({ terminated: { exitCode: 137, reason: 'OOMKilled' } })), {
    outcome: 'failed',
    exitCode: 137,
    reason: 'OOMKilled',
  })
  t.match(classifyJob(jobWith([{ type: 'Failed', reason: 'DeadlineExceeded' }]), undefined), { state: 'finished', outcome: 'timed_out', exitCode: null })
  t.same(
    classifyJob(jobWith([{ type: 'FailureTarget', reason: 'DeadlineExceeded' }]), podWith({ running: {} })),
    { state: 'active' },
    'FailureTarget alone: pods still terminating',
  )
  for (const reason of ['ImagePullBackOff', 'ErrImagePull', 'CreateContainerConfigError', 'InvalidImageName']) {
    t.same(classifyJob(jobWith([]), podWith({ waiting: { reason, message: 'm' } })), { state: 'active', waiting: { pod: 'j-abcde', reason, message: 'm' } }, reason)
  }
  t.same(classifyJob(jobWith([]), podWith({ waiting: { reason: 'ContainerCreating' } })), { state: 'active' }, 'ordinary waiting is not an error')
})

t.test('parsePodLog, truncateOutput, imageRuntimeVersion', async (t) => {
  const stamped = [
    '2026-11-24T10:00:01.000000000Z Collecting requests==2.32.3',
    `2026-11-24T10:00:03.500000000Z ${SENTINEL}`,
    '2026-11-24T10:00:03.600000000Z 2026-01-01T00:00:00Z is a date the script printed',
    '2026-11-24T10:00:04.250000000Z done',
    '',
  ].join('\n')
  const parsed = parsePodLog(stamped)
  t.equal(parsed.text, `Collecting requests==2.32.3\n${SENTINEL}\n2026-01-01T00:00:00Z is a date the script printed\ndone\n`, 'one kubelet timestamp stripped per line')
  t.equal(parsed.sentinelAtMs, Date.parse('2026-11-24T10:00:03.500Z'))
  t.equal(parsed.lastLineAtMs, Date.parse('2026-11-24T10:00:04.250Z'))
  t.equal(parsed.bytes, Buffer.byteLength(parsed.text))
  t.ok(parsed.sawSentinel)

  const plain = parsePodLog('2026-01-01T00:00:00Z starts like a stamp\nbut this line does not\n')
  t.equal(plain.text, '2026-01-01T00:00:00Z starts like a stamp\nbut this line does not\n', 'a log without stamps on every line is kept verbatim')
  t.equal(plain.sentinelAtMs, undefined)

  const failedInstall = parsePodLog('ERROR: No matching distribution\n=== agent-gateway: dependency install failed ===\n')
  t.ok(failedInstall.installFailed)
  t.notOk(failedInstall.sawSentinel)
  t.equal(parsePodLog(`{"event": "hello", "runtime": "python", "version": "3.12.7"}\n${SENTINEL}\n`).runtimeVersion, 'python 3.12.7', 'a bootstrap hello line gives the version')

  t.equal(truncateOutput('short', 10), 'short')
  t.equal(truncateOutput('0123456789abc', 10), '0123456789\n[agent-gateway: stdout truncated at 10 of 13 bytes]\n', 'the local executor marker')

  t.equal(imageRuntimeVersion('python', 'python:3.12-slim'), 'python 3.12-slim')
  t.equal(imageRuntimeVersion('node', 'registry.example:5000/agw/node:22.11@sha256:abc'), 'node 22.11')
  t.equal(imageRuntimeVersion('node', 'registry.example:5000/agw/node'), 'node latest')
})
