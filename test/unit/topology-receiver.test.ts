// The topology drill's callback receiver (test/helpers/topology-reviews.ts): it verifies each
// delivery with the session's secret as it arrives, tells retries of one webhook-id from a second
// id, and fails a first attempt on request so that the product's retries are exercised.
import { Webhook } from 'standardwebhooks'
import t from 'tap'
import { startReceiver } from '../helpers/topology-reviews.ts'

const secret = `whsec_${Buffer.from('drill-receiver-secret-32-bytes!!').toString('base64')}`

function deliver(url: string, id: string, body: string, key = secret): Promise<Response> {
  const now = new Date()
  const signature = new Webhook(key).sign(id, now, body)
  return fetch(`${url}/hooks/review`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': signature },
    body,
  })
}

t.test('verifies, records retries under one id, and flags unknown ids and bad signatures', async (t) => {
  const receiver = await startReceiver({ random: () => 0, failFirst: 1 })
  t.teardown(() => receiver.close())
  t.equal(receiver.allow, `127.0.0.1:${receiver.port}`)
  const body = JSON.stringify({ type: 'review.submitted', timestamp: new Date().toISOString(), data: { reviewId: 'r-1' } })
  receiver.expect('msg_r1', secret)
  t.equal((await deliver(receiver.url, 'msg_r1', body)).status, 503, 'the first attempt of an id fails on request')
  t.equal((await deliver(receiver.url, 'msg_r1', body)).status, 204, 'its retry is accepted')
  await deliver(receiver.url, 'msg_unknown', body)
  await deliver(receiver.url, 'msg_r1', body, `whsec_${Buffer.from('another-secret-of-32-bytes-long!').toString('base64')}`)
  const [first, retry, unknown, forged] = receiver.deliveries
  t.match(first, { webhookId: 'msg_r1', reviewId: 'r-1', type: 'review.submitted', verified: true, answered: 503 })
  t.match(retry, { webhookId: 'msg_r1', verified: true, answered: 204 })
  t.match(unknown, { webhookId: 'msg_unknown', verified: false, error: /no session/ })
  t.match(forged, { webhookId: 'msg_r1', verified: false, error: /signature/ })
})
