// Owner proofs of the scheduler bound to the request: the real scheduler app
// (fastify inject on its registry routes) over the scheduler world on PGlite, proofs signed by the
// real clients: @x402/extensions (SIGN-IN-WITH-X), mppx (a $0 MPP proof), @x402/core + @x402/evm
// (a $0 x402 authorization). A proof answered to the challenge of GET /api/v1/tasks/{id} must not
// open DELETE of the same task, nor any request on another task; a proof made for DELETE deletes.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { createSIWxPayload, encodeSIWxHeader } from '@x402/extensions/sign-in-with-x'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { Mppx, tempo } from 'mppx/client'
import { createClient, http as viemHttp } from 'viem'
import { generatePrivateKey, privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts'
import { tempo as tempoChain } from 'viem/tempo/chains'
import { createLogger } from '../../src/platform/logger.ts'
import { createMetrics } from '../../src/platform/metrics.ts'
import { openKeyValue } from '../../src/platform/kv/index.ts'
import { registry } from '../../src/catalog/registry.ts'
import { createCatalog } from '../../src/catalog/catalog.ts'
import { openPayments, type Payments } from '../../src/payments/index.ts'
import { buildSchedulerApp, SCHEDULER_OPERATIONS } from '../../src/scheduler/app.ts'
import { FakeClock } from '../helpers/fake-clock.ts'
import { memoryChain, memoryUsdc } from '../helpers/memory-chain.ts'
import { openWorld, type World } from '../helpers/scheduler-world.ts'
import { startTempoRpc } from '../helpers/tempo-rpc.ts'

const PAY_TO = '0x000000000000000000000000000000000000c0de' as const
const GATEWAY_URL = 'https://gw.test'
const SCHEDULER_URL = 'http://scheduler.test'

type Json = Record<string, any>
interface Answer {
  status: number
  body: Json
  headers: Record<string, string | string[] | number | undefined>
}

const clock = new FakeClock(Date.now()) // near the wall clock the clients sign on; never advanced
const world: World = await openWorld({ clock })
const kv = await openKeyValue({ kind: 'memory' })
const rpc = await startTempoRpc()
const payments: Payments = await openPayments({
  db: world.db,
  kv,
  logger: createLogger('silent'),
  clock,
  registry,
  dataDir: '',
  payTo: PAY_TO,
  gatewayUrl: GATEWAY_URL,
  chain: memoryChain(memoryUsdc()),
  tempoRpcUrl: rpc.url,
  reconcileEveryMs: 0,
})
const catalog = createCatalog(registry, {
  urls: { gateway: GATEWAY_URL, scheduler: SCHEDULER_URL, memory: 'http://memory.test' },
  implemented: new Set<string>(SCHEDULER_OPERATIONS),
})
const scheduler: FastifyInstance = buildSchedulerApp({
  catalog,
  logger: createLogger('silent'),
  metrics: createMetrics(),
  bodyLimitBytes: 1_000_000,
  payTo: PAY_TO,
  readiness: {},
  payments,
  kv,
  service: world.service,
})
await scheduler.ready()
t.teardown(async () => {
  await scheduler.close()
  await payments.close()
  await kv.close()
  await rpc.close()
  await world.close()
})

const wallet = privateKeyToAccount(generatePrivateKey())

let created = 0
/** A direct-rail task paid by `owner` (the payment itself is the guard's business, tested elsewhere). */
async function taskOf(owner: PrivateKeyAccount): Promise<string> {
  created += 1
  const key = `owner-proof-${created}`
  return world.createTask(key, { owner: owner.address, payment: `test:${key}`, body: { schedule: { every: 'hourly' }, max_amount_usdc_micros: 50_000 } })
}

async function call(method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await scheduler.inject({ method: method as 'GET', url: path, headers })
  return { status: response.statusCode, body: response.body ? (response.json() as Json) : {}, headers: response.headers }
}

/** What an agent does: call, take the 401's SIWX challenge, sign it with the real client for the URL it called. */
async function siwxProof(method: string, path: string, signer: PrivateKeyAccount = wallet): Promise<string> {
  const first = await call(method, path)
  if (first.status !== 401) throw new Error(`expected 401, got ${first.status} ${JSON.stringify(first.body)}`)
  const challenge = first.body.extensions?.['sign-in-with-x']
  if (!challenge) throw new Error('401 without a SIWX challenge')
  const chain = challenge.supportedChains[0]
  const payload = await createSIWxPayload({ ...challenge.info, chainId: chain.chainId, type: chain.type }, signer, `${SCHEDULER_URL}${path}`)
  return encodeSIWxHeader(payload)
}

async function stillThere(id: string): Promise<boolean> {
  const rows = await world.db.query<{ status: string }>(`select status from scheduler_tasks where id = $1`, [id])
  return rows[0] !== undefined && rows[0].status !== 'deleted'
}

t.test('SIGN-IN-WITH-X: a proof for GET does not DELETE, nor open another task; a proof for DELETE deletes', async (t) => {
  const taskA = await taskOf(wallet)
  const taskB = await taskOf(wallet)
  const pathA = `/api/v1/tasks/${taskA}`
  const pathB = `/api/v1/tasks/${taskB}`

  const unproven = await call('GET', pathA)
  t.equal(unproven.status, 401)
  t.equal(
    unproven.body.extensions['sign-in-with-x'].info.statement,
    'Sign in to the Agent Gateway scheduler as the owner of your tasks. Authorize one GET request to the URI below.',
  )

  const getProof = await siwxProof('GET', pathA)

  const deleteWithGetProof = await call('DELETE', pathA, { 'sign-in-with-x': getProof })
  t.equal(deleteWithGetProof.status, 401, 'the GET proof does not delete')
  t.equal(deleteWithGetProof.body.code, 'wallet_proof_required')
  t.equal(deleteWithGetProof.body.reason, 'wrong_method')
  t.match(deleteWithGetProof.body.detail, /authorizes GET, this request is DELETE/)
  t.match(
    deleteWithGetProof.body.extensions['sign-in-with-x'].info,
    { uri: `${SCHEDULER_URL}${pathA}`, statement: /Authorize one DELETE request/ },
    'with a fresh challenge for the DELETE',
  )
  t.ok(await stillThere(taskA), 'task A is not deleted')

  const deleteOtherWithGetProof = await call('DELETE', pathB, { 'sign-in-with-x': getProof })
  t.equal(deleteOtherWithGetProof.status, 401, 'nor deletes another task')
  t.equal(deleteOtherWithGetProof.body.reason, 'wrong_uri')
  const readOtherWithGetProof = await call('GET', pathB, { 'sign-in-with-x': getProof })
  t.equal(readOtherWithGetProof.status, 401, 'nor reads another task')
  t.equal(readOtherWithGetProof.body.reason, 'wrong_uri')
  const pauseWithGetProof = await call('POST', `${pathA}/pause`, { 'sign-in-with-x': getProof })
  t.equal(pauseWithGetProof.status, 401, 'nor pauses')
  t.equal(pauseWithGetProof.body.reason, 'wrong_uri')
  t.ok(await stillThere(taskB), 'task B is not deleted')

  const read = await call('GET', pathA, { 'sign-in-with-x': getProof })
  t.equal(read.status, 200, 'the refusals consumed nothing: the GET proof still reads task A')
  t.equal(read.body.id, taskA)
  const replay = await call('GET', pathA, { 'sign-in-with-x': getProof })
  t.equal(replay.status, 401, 'once')
  t.equal(replay.body.reason, 'nonce_used')

  const deleteProof = await siwxProof('DELETE', pathA)
  const readWithDeleteProof = await call('GET', pathA, { 'sign-in-with-x': deleteProof })
  t.equal(readWithDeleteProof.status, 401, 'a DELETE proof does not read either')
  t.equal(readWithDeleteProof.body.reason, 'wrong_method')
  const deleted = await call('DELETE', pathA, { 'sign-in-with-x': deleteProof })
  t.equal(deleted.status, 200, 'the DELETE proof deletes')
  t.match(deleted.body, { id: taskA, status: 'deleted' })
  t.notOk(await stillThere(taskA))
  t.ok(await stillThere(taskB))
})

t.test('$0 MPP proof: the challenge it signs is bound to the method and this very path', async (t) => {
  const taskA = await taskOf(wallet)
  const taskB = await taskOf(wallet)
  const pathA = `/api/v1/tasks/${taskA}`
  const pathB = `/api/v1/tasks/${taskB}`
  const agent = Mppx.create({
    methods: [tempo({ account: wallet, getClient: () => createClient({ chain: tempoChain, transport: viemHttp(rpc.url, { retryCount: 0 }) }) })],
    polyfill: false,
    fetch,
  })
  const toResponse = (answer: Answer) => new Response(JSON.stringify(answer.body), { status: answer.status, headers: answer.headers as Record<string, string> })
  // An MPP credential answering some other challenge of ours: the app answers it with a 402 that
  // carries the right challenge for the request (wrong_route), which the client then signs.
  const seed = await agent.createCredential(
    toResponse({
      status: 402,
      body: {},
      headers: payments.guard.paymentRequired({ amountMicros: 0n, resourceUrl: `${SCHEDULER_URL}/elsewhere`, route: 'GET /elsewhere', description: 'seed', payTo: PAY_TO }).headers,
    }),
  )
  async function mppProof(method: string, path: string): Promise<string> {
    const refused = await call(method, path, { authorization: seed })
    if (refused.status !== 402 || refused.body.reason !== 'wrong_route') throw new Error(`expected 402 wrong_route, got ${refused.status} ${JSON.stringify(refused.body)}`)
    return agent.createCredential(toResponse(refused))
  }

  const getProof = await mppProof('GET', pathA)
  const deleteWithGetProof = await call('DELETE', pathA, { authorization: getProof })
  t.equal(deleteWithGetProof.status, 402, 'the GET proof does not delete')
  t.equal(deleteWithGetProof.body.reason, 'wrong_route')
  const readOtherWithGetProof = await call('GET', pathB, { authorization: getProof })
  t.equal(readOtherWithGetProof.status, 402, 'nor reads another task')
  t.equal(readOtherWithGetProof.body.reason, 'wrong_route')
  const deleteOtherWithGetProof = await call('DELETE', pathB, { authorization: getProof })
  t.equal(deleteOtherWithGetProof.status, 402, 'nor deletes another task')
  t.ok(await stillThere(taskA))
  t.ok(await stillThere(taskB))

  const read = await call('GET', pathA, { authorization: getProof })
  t.equal(read.status, 200, 'the GET proof reads task A')
  t.equal(read.body.id, taskA)
  const replay = await call('GET', pathA, { authorization: getProof })
  t.equal(replay.status, 402, 'once')
  t.equal(replay.body.reason, 'nonce_already_used')

  const deleteProof = await mppProof('DELETE', pathA)
  const deleted = await call('DELETE', pathA, { authorization: deleteProof })
  t.equal(deleted.status, 200, 'the DELETE proof deletes')
  t.match(deleted.body, { id: taskA, status: 'deleted' })
  t.ok(await stillThere(taskB))
})

t.test('$0 x402 authorization: bound to nothing of the request, so it is no owner proof', async (t) => {
  const taskA = await taskOf(wallet)
  const pathA = `/api/v1/tasks/${taskA}`
  // A genuine $0 authorization by the owner's wallet, made by the real client for GET of task A.
  const client = new x402HTTPClient(new x402Client().register('eip155:8453', new ExactEvmScheme(wallet)).setSpendControls(false))
  const required = payments.guard.paymentRequired({ amountMicros: 0n, resourceUrl: `${SCHEDULER_URL}${pathA}`, route: `GET ${pathA}`, description: 'owner proof', payTo: PAY_TO })
  const paymentRequired = client.getPaymentRequiredResponse((name) => required.headers[name] ?? required.headers[name.toUpperCase()])
  t.equal(paymentRequired.accepts[0]?.amount, '0')
  const signature = client.encodePaymentSignatureHeader(await client.createPaymentPayload(paymentRequired))

  for (const method of ['DELETE', 'GET']) {
    const answer = await call(method, pathA, signature)
    t.equal(answer.status, 401, `${method}: refused`)
    t.equal(answer.body.code, 'wallet_proof_required')
    t.equal(answer.body.reason, 'unbound_proof')
    t.match(answer.body.detail, /not bound to the request/)
    t.ok(answer.body.extensions['sign-in-with-x'].info.nonce, 'with the SIWX challenge to use instead')
  }
  t.ok(await stillThere(taskA), 'task A is not deleted')
})
