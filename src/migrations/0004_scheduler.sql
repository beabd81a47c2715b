-- Scheduler: tasks (money and secrets; the Task resource holds the scheduling truth), runs (one
-- row per Run resource that reached dispatch), the append-only escrow ledger, refunds, accounts
-- and their API keys. Money is integer micros in int8 columns.

create table scheduler_tasks (
  id text primary key,
  -- The paying wallet (lowercase 0x address): owner endpoints are tied to it.
  owner text not null,
  rail text not null check (rail in ('direct', 'marketplace')),
  status text not null check (status in ('active', 'paused_insufficient_funds', 'paused', 'completed', 'deleted', 'terminated')),
  -- The validated, normalised create body minus env (money as decimal strings).
  spec jsonb not null,
  -- AES-256-GCM envelope of the env object (never returned, never logged).
  env_ciphertext text,
  env_keys jsonb not null default '[]'::jsonb,
  idempotency_key text not null,
  request_hash text not null,
  -- Payment facts of the create: protocol and, for MPP, the channel a top-up must reuse.
  payment_protocol text,
  payment_channel text,
  webhook_secret_hash text,
  webhook_rotated_at timestamptz,
  recovery_hint jsonb,
  next_run_at timestamptz,
  consecutive_infra_failures int4 not null default 0,
  consecutive_continuations int4 not null default 0,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  deleted_at timestamptz,
  unique (idempotency_key)
);
create index scheduler_tasks_owner on scheduler_tasks (owner, created_at);

-- One row per run that reached dispatch (claimed), keyed by the Run resource name.
create table scheduler_runs (
  id text primary key,
  task_id text not null references scheduler_tasks (id),
  trigger text not null check (trigger in ('schedule', 'trigger', 'manual', 'webhook', 'continuation')),
  status text not null check (status in ('queued', 'claimed', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', 'skipped')),
  -- The per-run ceiling held while the run is in flight (0 once finalised).
  reserved_micros int8 not null default 0 check (reserved_micros >= 0),
  cost_micros int8 not null default 0 check (cost_micros >= 0),
  -- Meters the helper API advances during the run (conditional updates enforce the caps).
  sibling_calls int4 not null default 0,
  sibling_spend_micros int8 not null default 0,
  llm_input_tokens int8 not null default 0,
  llm_output_tokens int8 not null default 0,
  llm_cost_micros int8 not null default 0,
  artifacts_count int4 not null default 0,
  artifacts_bytes int8 not null default 0,
  continuation_delay_sec int4,
  exit_code int4,
  outcome text,
  error text,
  stdout text not null default '',
  stderr text not null default '',
  stdout_bytes int8 not null default 0,
  stderr_bytes int8 not null default 0,
  runtime_version text,
  install_ms int4 not null default 0,
  -- Secret of the per-run helper token (SHA-256 of it); null once the run is finalised.
  token_hash text,
  created_at timestamptz not null default now(),
  started_at timestamptz,
  finished_at timestamptz
);
create index scheduler_runs_task on scheduler_runs (task_id, created_at desc, id desc);
-- At most one run of a task in flight (concurrency Forbid), enforced by the database.
create unique index scheduler_runs_one_in_flight on scheduler_runs (task_id) where status in ('claimed', 'running');

-- Append-only escrow ledger of the direct rail (audit-only rows on the marketplace rail).
create table scheduler_ledger (
  id bigserial primary key,
  task_id text not null references scheduler_tasks (id),
  kind text not null check (kind in ('charge', 'run_cost', 'refund', 'dust_forfeit', 'reversal', 'usage')),
  amount_micros int8 not null,
  run_id text,
  -- Settlement transaction of a charge; refunds get theirs in scheduler_refunds.
  tx_hash text,
  replay_key text,
  created_at timestamptz not null default now()
);
create index scheduler_ledger_task on scheduler_ledger (task_id, id);
-- A run is charged once; a task is closed once.
create unique index scheduler_ledger_one_run_cost on scheduler_ledger (run_id) where kind = 'run_cost';
create unique index scheduler_ledger_one_close on scheduler_ledger (task_id) where kind in ('refund', 'dust_forfeit');
create unique index scheduler_ledger_one_charge_per_payment on scheduler_ledger (replay_key) where replay_key is not null;
create trigger scheduler_ledger_append_only before update or delete on scheduler_ledger
  for each row execute function forbid_ledger_rewrite();

-- On-chain refund of a closed escrow: written with the refund ledger row, sent after commit.
-- state: pending (not sent yet), sending (broadcast under way; unknown if the process died),
-- confirmed, failed (nothing moved; retried).
create table scheduler_refunds (
  task_id text primary key references scheduler_tasks (id),
  to_address text not null,
  amount_micros int8 not null check (amount_micros > 0),
  state text not null check (state in ('pending', 'sending', 'confirmed', 'failed')),
  tx_hash text,
  error text,
  attempts int4 not null default 0,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- Idempotent fund calls: (task, Idempotency-Key) → the top-up it recorded.
create table scheduler_fundings (
  task_id text not null references scheduler_tasks (id),
  idempotency_key text not null,
  amount_micros int8 not null,
  created_at timestamptz not null default now(),
  primary key (task_id, idempotency_key)
);

-- Scheduler accounts (one per wallet) and their API keys (stored as SHA-256 only).
create table scheduler_accounts (
  id text primary key,
  owner text not null unique,
  plan text not null default 'direct',
  status text not null default 'active',
  created_at timestamptz not null default now()
);

create table scheduler_api_keys (
  id text primary key,
  account_id text not null references scheduler_accounts (id),
  prefix text not null,
  key_hash text not null unique,
  created_at timestamptz not null default now(),
  revoked_at timestamptz,
  last_used_at timestamptz
);
create index scheduler_api_keys_account on scheduler_api_keys (account_id, created_at);
