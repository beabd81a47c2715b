-- Platform bookkeeping. schema_migrations itself is created by the runner (src/platform/db/migrate.ts).

-- Small key/value facts about the deployment (instance info, first start, schema owner, ...).
create table if not exists service_meta (
  key text primary key,
  value jsonb not null,
  updated_at timestamptz not null default now()
);
