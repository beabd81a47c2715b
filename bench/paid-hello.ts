// The one paid operation the paid-route benches sell: GET /paid, 0.01 USD per call, answering
// {ok:true}. bench/paid.bench.ts puts it against @x402/express; bench/mcp.bench.ts calls it over
// HTTP and as an MCP tool.
import { Type } from '@sinclair/typebox'
import type { Registry } from '../src/catalog/types.ts'

export const PAID_HELLO_PRICE = 10_000n // $0.01
export const PAID_HELLO_PATH = '/paid'
export const PAID_HELLO_OPERATION = 'paidHello'

export const paidHelloRegistry: Registry = {
  services: [
    {
      slug: 'bench',
      title: 'Paid hello',
      description: 'One paid hello-world operation',
      server: 'gateway',
      access: 'payg',
      meter: { name: 'requests', unit: 'request', unitPriceMicros: PAID_HELLO_PRICE, includedUnits: 0 },
      plans: [],
      operations: [
        {
          operationId: PAID_HELLO_OPERATION,
          service: 'bench',
          server: 'gateway',
          method: 'GET',
          path: PAID_HELLO_PATH,
          summary: 'Paid hello-world',
          description: 'Answers {ok:true} for 0.01 USD',
          tags: ['bench'],
          access: 'payg',
          proof: 'payment',
          pricing: { kind: 'per-unit' },
          schemas: { response: { 200: Type.Object({ ok: Type.Boolean() }) } },
        },
      ],
    },
  ],
}
