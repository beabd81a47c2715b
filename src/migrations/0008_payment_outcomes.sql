-- What a payment buys is provisional until its settlement is known, and that state lives here,
-- not in memory: the request path and the settlement reconciler decide a payment's outcome with
-- the same statement sequence (src/payments/outcomes.ts), and the domain that sold the work
-- applies it (activate or reverse) in the same transaction.

-- The work a payment bought: the outcome handler that owns it (null = nothing durable to undo).
-- Bound in the transaction that does the work, which also moves the reservation from 'reserved'
-- to 'settling'; the reconciler only ever releases a 'reserved' row (nothing was broadcast), and
-- decides a 'settling' or 'pending' one from the chain.
alter table payment_reservations add column effect text;
alter table payment_reservations add column protocol_version int4 not null default 0;
alter table payment_reservations add column agent_id text;
alter table payment_reservations add column decided_at timestamptz;
drop index payment_reservations_pending;
create index payment_reservations_open on payment_reservations (updated_at) where state in ('reserved', 'settling', 'pending');

-- A plan purchase is usable only once its payment settled; a failed payment cancels it.
alter table plan_purchases add column state text not null default 'active' check (state in ('provisional', 'active', 'cancelled'));
alter table plan_purchases add column decided_at timestamptz;

-- Direct-rail payments into a task's escrow (create and top-ups). The money enters the append-only
-- scheduler_ledger (a 'charge' row carrying the settlement's transaction hash) only when the
-- settlement is known; until then it is provisional: it keeps the task's state (active), the
-- dispatcher defers runs that need it, and a closing escrow waits for it.
create table scheduler_charges (
  replay_key text primary key,
  task_id text not null references scheduler_tasks (id),
  kind text not null check (kind in ('create', 'top_up')),
  amount_micros int8 not null check (amount_micros > 0),
  -- Idempotency-Key of a top-up (freed again when its payment fails).
  funding_key text,
  state text not null check (state in ('provisional', 'settled', 'reversed')),
  tx_hash text,
  created_at timestamptz not null default now(),
  decided_at timestamptz
);
create index scheduler_charges_task on scheduler_charges (task_id);
create index scheduler_charges_provisional on scheduler_charges (task_id) where state = 'provisional';

-- Transactional outbox of Task resource writes: a status change sets the flag in its transaction;
-- the resource (suspend, deletion) is written after commit and the flag cleared; a sweep redoes
-- whatever a crash left between the two.
alter table scheduler_tasks add column resource_sync_pending boolean not null default false;
create index scheduler_tasks_resource_sync on scheduler_tasks (updated_at) where resource_sync_pending;

-- Refunds are an outbox of signed transactions: the transfer is signed (hash, nonce, raw bytes)
-- and stored before it is broadcast, so a crash at any step is resumed from the chain's answer
-- (receipt, or our nonce taken by another transaction) and never pays twice or drops a refund.
-- Retried with back-off until confirmed; never abandoned.
alter table scheduler_refunds add column raw_tx text;
alter table scheduler_refunds add column tx_nonce int8;
alter table scheduler_refunds add column next_attempt_at timestamptz not null default now();
alter table scheduler_refunds add column confirmed_at timestamptz;
create index scheduler_refunds_open on scheduler_refunds (next_attempt_at) where state <> 'confirmed';
