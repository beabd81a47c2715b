-- x402 payment-identifier: a client-supplied id that makes a paid request idempotent
-- (src/payments/x402/payment-identifier.ts). The primary key is the claim: a request inserts its
-- id before its payment is verified against payment_reservations or settled, so two replicas
-- racing with one id cannot both charge. The first successful answer is kept, AES-GCM encrypted
-- (it may hold what the buyer bought), and replayed to a retry of the same request by the same
-- payer until expires_at (24 h after it completed). A failed attempt deletes its row; an in-flight
-- claim whose lease ran out (its request died) may be taken over by a retry of the same request.
create table payment_identifiers (
  payment_id text primary key,
  -- sha256 of the operation route, concrete path and query, canonical body hash and price header.
  fingerprint text not null,
  -- Lowercase address the payload's signature recovered to.
  payer text not null,
  operation_id text not null,
  state text not null check (state in ('in_flight', 'completed')),
  claim_token text,
  lease_until timestamptz not null,
  status int4,
  -- Spend key of the payment (payment_reservations): an answer given while its settlement was
  -- pending is forgotten if that payment is later decided failed (its work was reversed).
  replay_key text,
  -- base64(iv ‖ tag ‖ AES-256-GCM({status, headers, body})), the id as associated data.
  response text,
  created_at timestamptz not null default now(),
  completed_at timestamptz,
  expires_at timestamptz not null
);
create index payment_identifiers_expires on payment_identifiers (expires_at);
