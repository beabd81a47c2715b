-- Song and speech sales: what a paid media request bought and what it delivered. Written in the
-- transaction that binds the work to its payment (payment_reservations.effect = 'media.sale'),
-- decided with it: settled, or failed (the answer was a 402 and the audio never handed over).
-- charged_micros is what the delivered units cost after free units; refund_micros = paid − charged
-- is owed back on-chain once the payment settles (media_refunds).
create table media_sales (
  replay_key text primary key references payment_reservations (replay_key),
  operation_id text not null,
  payer text not null,
  agent_id text,
  ordered_units int4 not null check (ordered_units > 0),
  delivered_units int4 not null check (delivered_units >= 0 and delivered_units <= ordered_units),
  free_units int4 not null default 0 check (free_units >= 0),
  paid_micros int8 not null check (paid_micros >= 0),
  charged_micros int8 not null check (charged_micros >= 0 and charged_micros <= paid_micros),
  refund_micros int8 not null generated always as (paid_micros - charged_micros) stored,
  result_url text not null,
  state text not null default 'provisional' check (state in ('provisional', 'settled', 'failed')),
  settlement_ref text,
  created_at timestamptz not null default now(),
  decided_at timestamptz
);

-- On-chain refund of the undelivered part of a settled sale: the same outbox of signed
-- transactions as scheduler_refunds (src/payments/refunds.ts), keyed by the payment.
create table media_refunds (
  replay_key text primary key references media_sales (replay_key),
  to_address text not null,
  amount_micros int8 not null check (amount_micros > 0),
  state text not null check (state in ('pending', 'sending', 'confirmed', 'failed')),
  tx_hash text,
  error text,
  attempts int4 not null default 0,
  raw_tx text,
  tx_nonce int8,
  next_attempt_at timestamptz not null default now(),
  confirmed_at timestamptz,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index media_refunds_open on media_refunds (next_attempt_at) where state <> 'confirmed';
