// The gateway's song and speech operations: the access rule has priced and authorised the call
// (or taken free units); the media role generates and stores; here the delivery is sold. What
// was delivered is bound to the payment with its sale row, then the payment settles (runPaid in
// src/payments/access.ts). A refund of undelivered candidates is owed by the settled decision.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Handlers } from '../catalog/routes.ts'
import type { Db } from '../platform/db/index.ts'
import { formatUsd } from '../platform/money.ts'
import { abortOnClose } from '../platform/request-abort.ts'
import type { MediaClient } from '../media/service.ts'
import { chargeFor, MEDIA_SALE_EFFECT, recordSale, refundOf } from './media-sales.ts'

export interface MediaHandlerDeps {
  db: Db
  media: MediaClient
  /** Unit prices of the meters (songs, speech characters), from the registry. */
  prices: { song: bigint; speech: bigint }
}

interface Delivery {
  operationId: string
  ordered: number
  delivered: number
  unitPriceMicros: bigint
  url: string
}

export function mediaHandlers(deps: MediaHandlerDeps) {
  const { db, media } = deps

  /** Binds the delivery to its payment; the answer is `answer` with what it costs (price_usdc). */
  async function sell<T>(request: FastifyRequest, reply: FastifyReply, delivery: Delivery, answer: T): Promise<T & { price_usdc: string }> {
    const payment = request.payment
    if (!payment) throw new Error('media handler reached without its access rule')
    const terms = {
      ordered: delivery.ordered,
      delivered: delivery.delivered,
      freeUnits: payment.includedUnits,
      unitPriceMicros: delivery.unitPriceMicros,
      paidMicros: payment.amountMicros,
    }
    const { chargedMicros, refundMicros } = chargeFor(terms)
    const free = { ...answer, price_usdc: formatUsd(0n) }
    if (payment.bind === undefined || payment.replayKey === null || payment.payer === null) return free // free units covered the order
    if (chargedMicros === 0n) {
      // Free units covered everything delivered: the payment is released, never settled.
      payment.waived = true
      return free
    }
    const { bind, replayKey, payer } = payment
    await db.transaction(async (tx) => {
      await bind(tx, MEDIA_SALE_EFFECT)
      await recordSale(tx, { replayKey, operationId: delivery.operationId, payer, agentId: payment.agent?.id ?? null, terms, chargedMicros, resultUrl: delivery.url })
    })
    const sold = { ...answer, price_usdc: formatUsd(chargedMicros) }
    if (refundMicros > 0n) {
      reply.header('x-refund-micros', refundMicros.toString())
      // Once settled, the refund was owed and (normally) sent in the same request: say how it went.
      payment.present = async () => {
        const refund = await refundOf(db, replayKey)
        if (refund) {
          reply.header('x-refund-status', refund.state)
          if (refund.txHash) reply.header('x-refund-tx', refund.txHash)
        }
        return sold
      }
    }
    return sold
  }

  return {
    generateSongs: async (request, reply) => {
      const outcome = await media.songs(request.body, abortOnClose(reply))
      const delivery = { operationId: 'generateSongs', ordered: outcome.ordered, delivered: outcome.delivered, unitPriceMicros: deps.prices.song, url: outcome.result.url }
      return sell(request, reply, delivery, outcome.result)
    },

    synthesizeSpeech: async (request, reply) => {
      const result = await media.speech(request.body, abortOnClose(reply))
      // All or nothing: the units the access rule priced (started blocks of characters) are delivered.
      const units = request.payment?.units ?? 1
      const delivery = { operationId: 'synthesizeSpeech', ordered: units, delivered: units, unitPriceMicros: deps.prices.speech, url: result.url }
      return sell(request, reply, delivery, result)
    },
  } satisfies Handlers<'generateSongs' | 'synthesizeSpeech'>
}
