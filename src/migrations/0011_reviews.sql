-- Annotation review sessions: one row per session (bought with one plan debit, bound by its
-- request_id 'review:<id>' in plan_credit_ledger), the files of an uploaded site (bytes in the blob
-- store), and the log of callback deliveries.
create table reviews (
  id uuid primary key,
  agent_id text not null references agents (id),
  source_kind text not null check (source_kind in ('zip', 'url')),
  source_url text,
  entry_file text,
  bundle_key text,
  bundle_sha256 text,
  bundle_bytes integer,
  -- First DNS label of the site's own origin; readable by the site's scripts, so not a secret that
  -- grants anything beyond viewing the site.
  site_label text not null unique,
  callback_url text,
  status text not null default 'open' check (status in ('open', 'submitted')),
  review jsonb,
  submitted_at timestamptz,
  -- Meaningful with callback_url: waiting (not submitted), pending, delivered, failed (given up).
  delivery_state text not null default 'waiting' check (delivery_state in ('waiting', 'pending', 'delivered', 'failed')),
  idempotency_key text,
  request_hash text,
  plan_id text not null,
  charged_micros bigint not null,
  created_at timestamptz not null default now(),
  check ((source_kind = 'url') = (source_url is not null)),
  check ((source_kind = 'zip') = (entry_file is not null and bundle_key is not null))
);
create unique index reviews_agent_idempotency on reviews (agent_id, idempotency_key) where idempotency_key is not null;
create index reviews_agent_created on reviews (agent_id, created_at);

create table review_files (
  review_id uuid not null references reviews (id) on delete cascade,
  path text not null,
  blob_key text not null,
  content_type text not null,
  bytes integer not null,
  sha256 text not null,
  primary key (review_id, path)
);

create table review_deliveries (
  id bigserial primary key,
  review_id uuid not null references reviews (id) on delete cascade,
  attempt integer not null,
  started_at timestamptz not null,
  duration_ms integer not null,
  outcome text not null check (outcome in ('delivered', 'failed', 'refused', 'gone')),
  status_code integer,
  error text
);
create index review_deliveries_review on review_deliveries (review_id, id);
