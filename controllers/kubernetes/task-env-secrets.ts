// Task env values in a Secret `<task>-env` per Task, owned by the Task (garbage-collected with
// it); the Task CR carries only spec.envSecretRef.name, never values.
import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node'
import { apiStatus, isNotFound, toStoreError } from './api-errors.ts'
import { CRD_API_VERSION, TASK_KIND } from './crds.ts'
import { dnsLabel, LABELS, MANAGED_BY } from './job-spec.ts'
import { shareConnections } from './kube-http.ts'
import { FIELD_MANAGER } from './kube-objects.ts'

/** Name of the Secret holding a Task's env (`<task>-env`, shortened with a hash past 253 chars). */
export function taskEnvSecretName(taskName: string): string {
  const name = `${taskName}-env`
  return name.length <= 253 ? name : `${dnsLabel(taskName, 240)}-env`
}

export interface TaskEnvSecrets {
  /** Creates or replaces `<task>-env`, owned by the Task (garbage-collected with it). Returns the Secret's name. */
  put(taskName: string, taskUid: string, env: Record<string, string>): Promise<string>
  /** Deletes `<task>-env`; a missing Secret is fine. */
  delete(taskName: string): Promise<void>
}

export function createTaskEnvSecrets(kubeConfig: KubeConfig, namespace: string, options: { retries?: number } = {}): TaskEnvSecrets {
  const core = shareConnections(kubeConfig).makeApiClient(CoreV1Api)
  const retries = options.retries ?? 5
  const build = (taskName: string, taskUid: string, env: Record<string, string>): V1Secret => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: taskEnvSecretName(taskName),
      namespace,
      labels: { [LABELS.managedBy]: MANAGED_BY, [LABELS.partOf]: 'agent-gateway', [LABELS.task]: dnsLabel(taskName) },
      ownerReferences: [{ apiVersion: CRD_API_VERSION, kind: TASK_KIND, name: taskName, uid: taskUid, controller: true }],
    },
    type: 'Opaque',
    // data (not stringData) so a replace drops keys that left the env.
    data: Object.fromEntries(Object.entries(env).map(([k, v]) => [k, Buffer.from(v, 'utf8').toString('base64')])),
  })
  return {
    async put(taskName, taskUid, env) {
      const body = build(taskName, taskUid, env)
      const name = body.metadata?.name as string
      for (let attempt = 0; ; attempt += 1) {
        try {
          await core.createNamespacedSecret({ namespace, body, fieldManager: FIELD_MANAGER })
          return name
        } catch (err) {
          if (apiStatus(err)?.code !== 409) throw toStoreError(err)
        }
        try {
          const existing = await core.readNamespacedSecret({ name, namespace })
          await core.replaceNamespacedSecret({
            name,
            namespace,
            body: { ...body, metadata: { ...body.metadata, resourceVersion: existing.metadata?.resourceVersion } },
            fieldManager: FIELD_MANAGER,
          })
          return name
        } catch (err) {
          const code = apiStatus(err)?.code
          // 404: deleted between our create and read; 409: changed in between. Try again.
          if ((code !== 404 && code !== 409) || attempt + 1 >= retries) throw toStoreError(err)
        }
      }
    },
    async delete(taskName) {
      try {
        await core.deleteNamespacedSecret({ name: taskEnvSecretName(taskName), namespace })
      } catch (err) {
        if (!isNotFound(err)) throw toStoreError(err)
      }
    },
  }
}
