// The x402 headers this service writes and reads back (PAYMENT-REQUIRED, PAYMENT-SIGNATURE,
// PAYMENT-RESPONSE) are base64 of UTF-8 JSON: the same bytes as @x402/core/http's encoders, through
// Buffer (their browser-safe path maps every byte through a JS array, ~50x slower on a 6 KB 402).
// A client's proof is decoded strictly by decode.ts instead.

export function encodeHeaderJson(value: unknown): string {
  return Buffer.from(JSON.stringify(value), 'utf8').toString('base64')
}

/** The JSON of a header this service (or another of its roles) wrote; throws when it is not JSON. */
export function decodeHeaderJson(header: string): unknown {
  return JSON.parse(Buffer.from(header, 'base64').toString('utf8'))
}
