-- Helper API of task runs (src/scheduler/helpers): the first-party siblings' own tables and the
-- index of public files (CDN files, artifacts, screenshots) whose bytes live in the blob store.
-- Every row belongs to the task whose run created it; the per-run meters stay on scheduler_runs.

-- urlshortener: GET {scheduler_url}/s/{code} answers 302 to url.
create table scheduler_short_links (
  code text primary key,
  task_id text not null references scheduler_tasks (id),
  run_id text,
  url text not null,
  hits int8 not null default 0,
  created_at timestamptz not null default now()
);
create index scheduler_short_links_task on scheduler_short_links (task_id, created_at);

-- forms: a hosted form (GET/POST {scheduler_url}/f/{id}) and what visitors submitted.
create table scheduler_forms (
  id text primary key,
  task_id text not null references scheduler_tasks (id),
  run_id text,
  title text not null,
  -- [{name, label, type, required}]
  fields jsonb not null,
  created_at timestamptz not null default now()
);
create index scheduler_forms_task on scheduler_forms (task_id, created_at);

create table scheduler_form_submissions (
  id bigserial primary key,
  form_id text not null references scheduler_forms (id),
  data jsonb not null,
  created_at timestamptz not null default now()
);
create index scheduler_form_submissions_form on scheduler_form_submissions (form_id, id);

-- inbox: an address whose messages arrive at POST {scheduler_url}/inbox/{id}.
create table scheduler_inboxes (
  id text primary key,
  task_id text not null references scheduler_tasks (id),
  run_id text,
  address text not null unique,
  created_at timestamptz not null default now()
);
create index scheduler_inboxes_task on scheduler_inboxes (task_id, created_at);

create table scheduler_inbox_messages (
  id bigserial primary key,
  inbox_id text not null references scheduler_inboxes (id),
  from_address text not null,
  subject text not null,
  body_text text not null,
  received_at timestamptz not null default now()
);
create index scheduler_inbox_messages_inbox on scheduler_inbox_messages (inbox_id, id);

-- Public files served at {scheduler_url}/{path}; path is also the blob key. A row is what makes a
-- file public: deleting it hides the file even before its blob is removed.
create table scheduler_public_files (
  path text primary key,
  task_id text not null references scheduler_tasks (id),
  run_id text,
  kind text not null check (kind in ('cdn', 'artifact', 'screenshot')),
  name text not null,
  content_type text not null,
  bytes int8 not null check (bytes >= 0),
  -- Artifacts: true for the one overwritable URL per (task, name).
  stable boolean not null default false,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index scheduler_public_files_task on scheduler_public_files (task_id, kind, created_at);

-- Audit of marketplace payments made with the service's payer wallet on behalf of a run (the run's
-- sibling_spend_micros carries the money; this says where it went).
create table scheduler_capability_payments (
  id bigserial primary key,
  task_id text not null references scheduler_tasks (id),
  run_id text not null,
  capability text not null,
  url text not null,
  protocol text not null check (protocol in ('x402', 'mpp')),
  price_micros int8 not null check (price_micros >= 0),
  -- Whether the run was charged (2xx, or a settlement the target confirmed).
  charged boolean not null,
  status_code int4 not null,
  reference text,
  created_at timestamptz not null default now()
);
create index scheduler_capability_payments_run on scheduler_capability_payments (run_id, id);
