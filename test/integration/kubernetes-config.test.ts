// The Kubernetes backend takes its settings from the typed configuration, not from process.env:
// RUNNER_IMAGE_PYTHON / RUNNER_IMAGE_NODE choose the run pods' images, RUNNER_JOB_TEMPLATE_FILE the
// Job template, NPM_REGISTRY / PIP_INDEX_URL the package sources in run.json. Checked through
// loadConfig → kubernetesBackendOptions (what src/runtime.ts passes) → openKubernetesBackend →
// the Job and ConfigMap the fake API server receives.
import t from 'tap'
import { kubernetesBackendOptions, openKubernetesBackend } from '../../controllers/kubernetes/index.ts'
import { CONFIG_KEYS } from '../../controllers/kubernetes/job-spec.ts'
import { loadConfig } from '../../src/platform/config.ts'
import { startFakeKubeApiServer, type KubeObject } from '../helpers/fake-kube-apiserver.ts'
import { API, FakeClock, until } from '../helpers/resource-store-contract.ts'

t.test('kubernetesBackendOptions: the configuration, with its documented defaults', async (t) => {
  t.same(
    kubernetesBackendOptions(loadConfig({}, '/srv')),
    {
      namespace: 'default',
      images: { python: 'ghcr.io/agent-gateway/runner-python:0.1.0', node: 'ghcr.io/agent-gateway/runner-node:0.1.0' },
    },
    'unset: the README defaults, the built-in Job template, the package managers’ own sources',
  )
  const config = loadConfig(
    {
      KUBE_NAMESPACE: 'agents',
      RUNNER_IMAGE_PYTHON: 'registry.example/agw/runner-python:3.12.7',
      RUNNER_IMAGE_NODE: 'registry.example/agw/runner-node:22.11',
      RUNNER_JOB_TEMPLATE_FILE: '/etc/agent-gateway/job-template.yaml',
      NPM_REGISTRY: 'https://npm.example/',
      PIP_INDEX_URL: 'https://pypi.example/simple/',
    },
    '/srv',
  )
  t.same(kubernetesBackendOptions(config), {
    namespace: 'agents',
    images: { python: 'registry.example/agw/runner-python:3.12.7', node: 'registry.example/agw/runner-node:22.11' },
    jobTemplateFile: '/etc/agent-gateway/job-template.yaml',
    npmRegistry: 'https://npm.example/',
    pipIndexUrl: 'https://pypi.example/simple/',
  })
})

t.test('the configured runner images and package sources reach the run Jobs', async (t) => {
  const server = await startFakeKubeApiServer({ namespaces: ['agents'] })
  t.teardown(() => server.close())
  const dir = t.testdir({
    'job-template.yaml': 'apiVersion: batch/v1\nkind: Job\nspec:\n  ttlSecondsAfterFinished: 77\n  template:\n    spec:\n      containers:\n        - name: script\n',
  })
  const config = loadConfig(
    {
      KUBE_NAMESPACE: 'agents',
      RUNNER_IMAGE_PYTHON: 'registry.example/agw/runner-python:3.12.7',
      RUNNER_IMAGE_NODE: 'registry.example/agw/runner-node:22.11',
      RUNNER_JOB_TEMPLATE_FILE: `${dir}/job-template.yaml`,
      NPM_REGISTRY: 'https://npm.example/',
      PIP_INDEX_URL: 'https://pypi.example/simple/',
    },
    '/srv',
  )
  // Anything left in the process environment must not matter.
  const backend = await openKubernetesBackend({
    ...kubernetesBackendOptions(config),
    kubeconfigPath: server.kubeconfigPath,
    env: { RUNNER_IMAGE_PYTHON: 'wrong/python:1', RUNNER_IMAGE_NODE: 'wrong/node:1', RUNNER_JOB_TEMPLATE_FILE: '/nonexistent.yaml' },
  })
  const executor = backend.createExecutor({ clock: new FakeClock('2026-11-24T10:00:00Z'), waitingGraceMs: 0 })
  const task = await backend.tasks.create({ apiVersion: API, kind: 'Task', metadata: { name: 'imaged', namespace: 'agents' }, spec: {} })
  for (const [runtime, entrypoint, image] of [
    ['python', 'main.py', 'registry.example/agw/runner-python:3.12.7'],
    ['node', 'main.mjs', 'registry.example/agw/runner-node:22.11'],
  ] as const) {
    const name = `imaged-${runtime}`
    await backend.runs.create({
      apiVersion: API,
      kind: 'Run',
      metadata: { name, namespace: 'agents', ownerReferences: [{ kind: 'Task', name: 'imaged', uid: task.metadata.uid }] },
      spec: { taskRef: { name: 'imaged' }, trigger: { type: 'manual', scheduledTime: '2026-11-24T10:00:00.000Z' } },
    })
    const abort = new AbortController()
    const running = executor.execute({
      runName: name,
      namespace: 'agents',
      taskName: 'imaged',
      runtime,
      source: 'print(1)',
      entrypoint,
      env: {},
      dependencies: [],
      maxRuntimeSec: 5,
      signal: abort.signal,
    })
    await until(`the ${runtime} Job`, () => server.get('batch/v1', 'Job', 'agents', name) !== undefined)
    const job = server.get('batch/v1', 'Job', 'agents', name) as KubeObject & {
      spec: { ttlSecondsAfterFinished: number; template: { spec: { containers: Array<{ image: string }> } } }
    }
    t.equal(job.spec.template.spec.containers[0]?.image, image, `${runtime}: the configured runner image`)
    t.equal(job.spec.ttlSecondsAfterFinished, 77, `${runtime}: the configured Job template`)
    const configMap = server.list('v1', 'ConfigMap', 'agents').find((object) => object.metadata.name.startsWith(name)) as KubeObject & { data: Record<string, string> }
    t.match(
      JSON.parse(configMap.data[CONFIG_KEYS.runJson] as string),
      { npmRegistry: 'https://npm.example/', pipIndexUrl: 'https://pypi.example/simple/' },
      `${runtime}: the configured package sources`,
    )
    abort.abort()
    t.equal((await running).outcome, 'cancelled')
  }
})
