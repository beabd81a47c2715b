-- Payments: replay reservations, the append-only payments ledger, agents and their tokens,
-- plans (credit ledger and subscriptions), free included units and e-mail claims.
-- Money is integer micros in int8 columns.

-- One row per spend key (x402 `payer:nonce`, MPP credential hash). The primary key is the replay
-- guard: the row is taken before any work runs. A row is released (state 'released') when the work
-- fails, so the same proof may be presented again; any other state refuses the proof.
create table payment_reservations (
  replay_key text primary key,
  protocol text not null check (protocol in ('x402', 'mpp')),
  payer text not null,
  amount_micros int8 not null check (amount_micros >= 0),
  operation_id text not null,
  state text not null check (state in ('reserved', 'settling', 'settled', 'pending', 'released', 'consumed')),
  reference text,
  -- What a reconciler needs to decide an unknown outcome (authorization, challenge id, payee).
  detail jsonb not null default '{}'::jsonb,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index payment_reservations_pending on payment_reservations (state) where state in ('pending', 'settling');

-- Append-only record of every settlement attempt's outcome (settled, pending, failed, reconciled).
create table payments_ledger (
  id bigserial primary key,
  at timestamptz not null default now(),
  protocol text not null,
  protocol_version int4 not null,
  event text not null check (event in ('settled', 'pending', 'failed', 'reconciled_settled', 'reconciled_failed')),
  replay_key text not null,
  payer text not null,
  payee text not null,
  amount_micros int8 not null check (amount_micros >= 0),
  operation_id text not null,
  agent_id text,
  reference text,
  detail jsonb not null default '{}'::jsonb
);
create index payments_ledger_replay_key on payments_ledger (replay_key);
-- At most one successful settlement per spend key, whatever happens above.
create unique index payments_ledger_one_settlement on payments_ledger (replay_key)
  where event in ('settled', 'reconciled_settled');

create function forbid_ledger_rewrite() returns trigger language plpgsql as $$
begin
  raise exception 'ledger % is append-only', tg_table_name;
end $$;
create trigger payments_ledger_append_only before update or delete on payments_ledger
  for each row execute function forbid_ledger_rewrite();

-- Agents: anonymous registration gives an id and an access token (stored as SHA-256 only).
create table agents (
  id text primary key,
  token_hash text not null unique,
  created_at timestamptz not null default now(),
  claimed_email text,
  claimed_at timestamptz
);

-- A human claims an agent by verifying an e-mail address; tokens stored as SHA-256 only.
create table agent_claims (
  token_hash text primary key,
  agent_id text not null references agents (id),
  email text not null,
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  used_at timestamptz
);

-- Plan purchases; a credit plan's balance is the SUM of plan_credit_ledger rows.
create table plan_purchases (
  id text primary key,
  agent_id text not null references agents (id),
  plan_id text not null,
  kind text not null check (kind in ('credit', 'subscription')),
  replay_key text not null unique,
  price_micros int8 not null,
  starts_at timestamptz not null,
  ends_at timestamptz,
  calls_per_period int4,
  created_at timestamptz not null default now()
);
create index plan_purchases_agent on plan_purchases (agent_id, plan_id);

create table plan_credit_ledger (
  id bigserial primary key,
  at timestamptz not null default now(),
  agent_id text not null references agents (id),
  plan_id text not null,
  kind text not null check (kind in ('grant', 'debit', 'refund', 'reversal')),
  amount_micros int8 not null,
  operation_id text,
  request_id text
);
create index plan_credit_ledger_agent on plan_credit_ledger (agent_id, plan_id);
create trigger plan_credit_ledger_append_only before update or delete on plan_credit_ledger
  for each row execute function forbid_ledger_rewrite();

-- Calls counted against a subscription period (one row per call, so concurrency is exact).
create table plan_subscription_calls (
  purchase_id text not null references plan_purchases (id),
  ordinal int4 not null,
  at timestamptz not null default now(),
  operation_id text not null,
  primary key (purchase_id, ordinal)
);

-- Free included units: one row per consumed unit; (account, meter, ordinal) is unique, so a unit
-- is consumed exactly once even under concurrent calls. Failed work deletes its row (returns the unit).
create table included_unit_claims (
  account_key text not null,
  meter text not null,
  ordinal int4 not null,
  at timestamptz not null default now(),
  operation_id text not null,
  primary key (account_key, meter, ordinal)
);
