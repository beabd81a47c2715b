// Lease-based leader election (coordination.k8s.io/v1), client-go's algorithm in small:
// - every retry period each candidate reads the Lease; a missing Lease is created (409 = another
//   candidate won); a Lease held by someone else is left alone until it has EXPIRED, judged by when
//   WE last saw its record change plus leaseDurationSeconds (never by comparing clocks across
//   machines); a free, expired or own Lease is written with the read resourceVersion (optimistic:
//   409 = someone else got there first);
// - acquireTime/renewTime are V1MicroTime (6 fractional digits: the API server rejects 3);
// - the leader renews every retry period; if no renewal succeeded for renewDeadline it stops
//   leading (a watchdog on the injected clock, so a hung API call cannot keep it leading), aborts
//   the signal given to onStartedLeading and calls onStoppedLeading, then competes again;
// - stop() aborts the work and releases the Lease (holder cleared) so a successor need not wait
//   for the expiry.
// RBAC: coordination.k8s.io leases get, create, update in the namespace.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node'
import { systemTimerClock, type TimerClock } from '../../src/platform/clock.ts'
import { apiStatus } from './api-errors.ts'
import { shareConnections } from './kube-http.ts'

export interface LeaseRecord {
  holderIdentity?: string
  leaseDurationSeconds?: number
  acquireTime?: string
  renewTime?: string
  leaseTransitions?: number
}

export interface Observation {
  /** The record as last seen (holder, renewTime, transitions) and when we saw it change. */
  record: string
  observedAtMs: number
}

export type LeaseDecision = { action: 'create' } | { action: 'follow'; holder: string; expiresAtMs: number } | { action: 'renew' } | { action: 'acquire'; from: string | undefined }

function recordKey(record: LeaseRecord): string {
  return JSON.stringify([record.holderIdentity ?? '', record.renewTime ?? '', record.leaseTransitions ?? 0, record.acquireTime ?? ''])
}

/** Updates what we know about the Lease: the observation time only moves when the record changed. */
export function observe(previous: Observation | undefined, record: LeaseRecord | undefined, nowMs: number): Observation | undefined {
  if (record === undefined) return undefined
  const key = recordKey(record)
  return previous !== undefined && previous.record === key ? previous : { record: key, observedAtMs: nowMs }
}

/** PURE: what a candidate does with the Lease it just read. */
export function decide(input: {
  record: LeaseRecord | undefined
  observation: Observation | undefined
  identity: string
  nowMs: number
  defaultLeaseDurationSec: number
}): LeaseDecision {
  const { record, identity } = input
  if (record === undefined) return { action: 'create' }
  const holder = record.holderIdentity ?? ''
  if (holder === identity) return { action: 'renew' }
  if (holder === '') return { action: 'acquire', from: undefined }
  const durationMs = (record.leaseDurationSeconds ?? input.defaultLeaseDurationSec) * 1000
  const expiresAtMs = (input.observation?.observedAtMs ?? input.nowMs) + durationMs
  if (input.nowMs < expiresAtMs) return { action: 'follow', holder, expiresAtMs }
  return { action: 'acquire', from: holder }
}

export interface LeaderElectorOptions {
  kubeConfig: KubeConfig
  namespace: string
  leaseName: string
  /** Unique per candidate, e.g. the pod name (HOSTNAME) plus a random suffix. */
  identity: string
  leaseDurationSec?: number
  renewDeadlineSec?: number
  retryPeriodSec?: number
  clock?: TimerClock
  /** Called when this candidate becomes the leader; `signal` aborts when it stops leading. */
  onStartedLeading: (signal: AbortSignal) => void | Promise<void>
  onStoppedLeading?: () => void
  /** A different holder was observed (also this candidate). */
  onNewLeader?: (identity: string) => void
  onError?: (err: unknown) => void
}

export class LeaderElector {
  readonly #options: LeaderElectorOptions
  readonly #api: CoordinationV1Api
  readonly #clock: TimerClock
  readonly #leaseDurationSec: number
  readonly #renewDeadlineMs: number
  readonly #retryMs: number
  #loop: AbortController | undefined
  #running: Promise<void> | undefined
  #work: AbortController | undefined
  #watchdog: unknown
  #observation: Observation | undefined
  #lastLeader: string | undefined
  #wake: (() => void) | undefined
  /** Counters for tests and metrics. */
  readonly stats = { ticks: 0, acquired: 0, renewed: 0, lost: 0, conflicts: 0, errors: 0 }

  constructor(options: LeaderElectorOptions) {
    this.#options = options
    this.#api = shareConnections(options.kubeConfig).makeApiClient(CoordinationV1Api)
    this.#clock = options.clock ?? systemTimerClock
    this.#leaseDurationSec = options.leaseDurationSec ?? 15
    this.#renewDeadlineMs = (options.renewDeadlineSec ?? 10) * 1000
    this.#retryMs = (options.retryPeriodSec ?? 2) * 1000
    if (this.#renewDeadlineMs >= this.#leaseDurationSec * 1000) throw new Error('renewDeadlineSec must be shorter than leaseDurationSec')
    if (this.#retryMs >= this.#renewDeadlineMs) throw new Error('retryPeriodSec must be shorter than renewDeadlineSec')
  }

  get isLeader(): boolean {
    return this.#work !== undefined
  }

  /** Starts competing (idempotent). */
  start(): void {
    if (this.#running !== undefined) return
    const loop = new AbortController()
    this.#loop = loop
    this.#running = this.#run(loop.signal)
  }

  /** Stops competing; a leader aborts its work and (by default) releases the Lease. */
  async stop(options: { release?: boolean } = {}): Promise<void> {
    this.#loop?.abort()
    this.#wake?.()
    await this.#running
    this.#running = undefined
    const wasLeader = this.isLeader
    this.#stopLeading()
    if (wasLeader && options.release !== false) await this.#release().catch((err: unknown) => this.#options.onError?.(err))
  }

  async #run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.tick()
      } catch (err) {
        this.stats.errors += 1
        this.#options.onError?.(err)
      }
      if (signal.aborted) break
      await new Promise<void>((resolve) => {
        const handle = this.#clock.setTimeout(done, this.#retryMs)
        const self = this
        function done(): void {
          self.#clock.clearTimeout(handle)
          self.#wake = undefined
          resolve()
        }
        this.#wake = done
      })
    }
  }

  /** One round: read the Lease and create, follow, renew or acquire it. */
  async tick(): Promise<void> {
    try {
      await this.#round()
    } finally {
      this.stats.ticks += 1 // completed rounds (tests wait on it)
    }
  }

  async #round(): Promise<void> {
    const { namespace, leaseName: name, identity } = this.#options
    let lease: V1Lease | undefined
    try {
      lease = await this.#api.readNamespacedLease({ name, namespace })
    } catch (err) {
      if (apiStatus(err)?.code !== 404) throw err
    }
    const now = this.#clock.now()
    const record = lease?.spec as LeaseRecord | undefined
    if (lease !== undefined) this.#observation = observe(this.#observation, record ?? {}, now.getTime())
    const decision = decide({
      record: lease === undefined ? undefined : (record ?? {}),
      observation: this.#observation,
      identity,
      nowMs: now.getTime(),
      defaultLeaseDurationSec: this.#leaseDurationSec,
    })
    if (decision.action === 'follow') {
      this.#noteLeader(decision.holder)
      if (this.isLeader) this.#lose() // someone else holds it now
      return
    }
    const stamp = new V1MicroTime(now.getTime())
    const spec: V1Lease['spec'] =
      decision.action === 'create'
        ? { holderIdentity: identity, leaseDurationSeconds: this.#leaseDurationSec, acquireTime: stamp, renewTime: stamp, leaseTransitions: 0 }
        : {
            holderIdentity: identity,
            leaseDurationSeconds: this.#leaseDurationSec,
            acquireTime: decision.action === 'renew' && record?.acquireTime !== undefined ? (record.acquireTime as unknown as V1MicroTime) : stamp,
            renewTime: stamp,
            leaseTransitions: (record?.leaseTransitions ?? 0) + (decision.action === 'acquire' && decision.from !== undefined ? 1 : 0),
          }
    try {
      if (decision.action === 'create') {
        await this.#api.createNamespacedLease({ namespace, body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name, namespace }, spec } })
      } else {
        await this.#api.replaceNamespacedLease({
          name,
          namespace,
          body: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { ...lease?.metadata, name, namespace }, spec },
        })
      }
    } catch (err) {
      if (apiStatus(err)?.code !== 409) throw err
      this.stats.conflicts += 1 // another candidate wrote first; the watchdog handles a leader that keeps losing
      return
    }
    this.#observation = observe(this.#observation, spec as LeaseRecord, now.getTime())
    this.#noteLeader(identity)
    this.#armWatchdog()
    if (this.isLeader) {
      this.stats.renewed += 1
      return
    }
    this.stats.acquired += 1
    const work = new AbortController()
    this.#work = work
    try {
      void Promise.resolve(this.#options.onStartedLeading(work.signal)).catch((err: unknown) => this.#options.onError?.(err))
    } catch (err) {
      this.#options.onError?.(err)
    }
  }

  #noteLeader(identity: string): void {
    if (identity === this.#lastLeader) return
    this.#lastLeader = identity
    this.#options.onNewLeader?.(identity)
  }

  /** No successful renewal within renewDeadline (from the last one) → stop leading. */
  #armWatchdog(): void {
    if (this.#watchdog !== undefined) this.#clock.clearTimeout(this.#watchdog)
    this.#watchdog = this.#clock.setTimeout(() => {
      this.#watchdog = undefined
      if (this.isLeader) this.#lose()
    }, this.#renewDeadlineMs)
  }

  #lose(): void {
    this.stats.lost += 1
    this.#stopLeading()
  }

  #stopLeading(): void {
    if (this.#watchdog !== undefined) this.#clock.clearTimeout(this.#watchdog)
    this.#watchdog = undefined
    const work = this.#work
    if (work === undefined) return
    this.#work = undefined
    work.abort()
    try {
      this.#options.onStoppedLeading?.()
    } catch (err) {
      this.#options.onError?.(err)
    }
  }

  async #release(): Promise<void> {
    const { namespace, leaseName: name, identity } = this.#options
    const lease = await this.#api.readNamespacedLease({ name, namespace })
    if (lease.spec?.holderIdentity !== identity) return
    const stamp = new V1MicroTime(this.#clock.now().getTime())
    await this.#api.replaceNamespacedLease({
      name,
      namespace,
      body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, acquireTime: stamp, renewTime: stamp } },
    })
  }
}
