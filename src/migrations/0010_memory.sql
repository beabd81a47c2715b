-- The memory service. Nothing here holds plaintext: content, context, tags, metadata and vectors
-- are AES-256-GCM ciphertexts under the owner's data key (src/memory/crypto); context, tags and
-- terms appear only as keyed MACs (the blind index, docs/memory.md "What the index reveals").

-- One row per owner (a lowercase 0x wallet, or `agent:<agentId>` for plan holders). `version`
-- counts the owner's visible records: it is bumped, under this row's lock, by every write that
-- makes a record visible, which gives records their per-owner `seq` in commit order (the recall
-- cache loads `seq > what it holds`). The same lock serialises the deposit balance.
create table memory_owners (
  owner text primary key,
  rail text check (rail in ('direct', 'marketplace', 'payg')),
  version int8 not null default 0,
  created_at timestamptz not null default now()
);

-- The key-encryption key in force for new data keys, agreed by every replica (the key ring
-- itself is configuration, never stored here). One row.
create table memory_kek_state (
  singleton boolean primary key default true check (singleton),
  active_kek text not null,
  rotated_at timestamptz not null default now()
);

-- Per-owner data keys wrapped by a key-encryption key (AES-256-GCM, AAD names owner, DEK and KEK
-- versions). Rotating the KEK rewrites wrapped_dek/kek_version only.
create table memory_owner_keys (
  owner text not null references memory_owners (owner),
  dek_version int4 not null,
  kek_version text not null,
  wrapped_dek bytea not null,
  encryptions int8 not null default 0,
  created_at timestamptz not null default now(),
  rewrapped_at timestamptz,
  primary key (owner, dek_version)
);
create index memory_owner_keys_kek on memory_owner_keys (kek_version);

create table memory_records (
  id uuid primary key,
  owner text not null references memory_owners (owner),
  -- Per-owner visibility order; null while the record's payment is not decided.
  seq int8,
  kind text not null check (kind in ('raw', 'derived')),
  state text not null check (state in ('provisional', 'active')),
  rail text not null check (rail in ('direct', 'marketplace', 'payg', 'dream')),
  dek_version int4 not null,
  content_ct bytea not null,
  context_ct bytea,
  tags_ct bytea,
  metadata_ct bytea,
  vector_ct bytea,
  -- Blind index: HMAC(context), HMAC(tag) each, and the packed (term MAC, tf) list; see src/memory/search.
  context_mac bytea,
  tag_macs bytea[] not null default '{}',
  blind_terms bytea not null,
  doc_length int4 not null,
  -- HMAC of the normalised content under the owner's dedupe key (equal text, same owner only).
  content_mac bytea not null,
  derived_from uuid[] not null default '{}',
  embedder text not null,
  dims int4 not null,
  tokens int4 not null,
  charged_micros int8 not null default 0,
  -- The per-call payment that bought the record (payg rail); its decision activates or deletes it.
  replay_key text unique,
  idempotency_key text unique,
  request_hash text,
  dream_batch text,
  created_at timestamptz not null default now()
);
create unique index memory_records_owner_seq on memory_records (owner, seq) where seq is not null;
create index memory_records_owner_mac on memory_records (owner, content_mac);
create index memory_records_provisional on memory_records (created_at) where state = 'provisional';

-- Deposits paid by x402/MPP: provisional until the payment's decision (effect memory.deposit).
create table memory_deposits (
  replay_key text primary key references payment_reservations (replay_key),
  owner text not null references memory_owners (owner),
  amount_micros int8 not null check (amount_micros > 0),
  state text not null default 'provisional' check (state in ('provisional', 'settled', 'reversed')),
  tx_hash text,
  created_at timestamptz not null default now(),
  decided_at timestamptz
);

-- The direct rail's money, append-only: balance = SUM(amount_micros).
--   deposit (+, with its payment's transaction), debit (− a write's embedding cost),
--   dream (− a dreaming batch's model cost), refund (− a withdrawal, its transfer in memory_refunds).
create table memory_ledger (
  id bigserial primary key,
  owner text not null references memory_owners (owner),
  kind text not null check (kind in ('deposit', 'debit', 'dream', 'refund')),
  amount_micros int8 not null,
  memory_id uuid,
  dream_batch text,
  refund_id text,
  replay_key text,
  tx_hash text,
  tokens_in int4,
  tokens_out int4,
  model text,
  created_at timestamptz not null default now(),
  check ((kind = 'deposit') = (amount_micros > 0) or amount_micros = 0)
);
create index memory_ledger_owner on memory_ledger (owner, id);
create unique index memory_ledger_deposit on memory_ledger (replay_key) where kind = 'deposit';
create unique index memory_ledger_debit on memory_ledger (memory_id) where kind = 'debit';
create unique index memory_ledger_dream on memory_ledger (owner, dream_batch) where kind = 'dream';

-- On-chain withdrawals: the same outbox of signed transactions as scheduler_refunds.
create table memory_refunds (
  refund_id text primary key,
  owner text not null references memory_owners (owner),
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
create index memory_refunds_open on memory_refunds (next_attempt_at) where state <> 'confirmed';

-- Dreaming batches: one row per (owner, batch of source records), so a batch is consolidated once.
create table memory_dreams (
  owner text not null references memory_owners (owner),
  batch_key text not null,
  state text not null check (state in ('written', 'over_budget', 'failed', 'empty')),
  model text,
  model_size text,
  tokens_in int4 not null default 0,
  tokens_out int4 not null default 0,
  cost_micros int8 not null default 0,
  derived int4 not null default 0,
  error text,
  created_at timestamptz not null default now(),
  primary key (owner, batch_key)
);
-- The highest raw seq an owner's dreaming has consumed (sources are taken in seq order).
alter table memory_owners add column dreamed_seq int8 not null default 0;
