-- Task and Run resources for the embedded ResourceStore (controllers/local/postgres-store.ts).
-- resource_version comes from one global counter row: the UPDATE that takes the next value holds a
-- row lock until COMMIT, so writes commit in resourceVersion order and a watcher polling
-- "events after RV n" can never see n+2 before n+1 (a plain SEQUENCE would allow that gap).
create table resource_version_counter (
  id boolean primary key default true check (id),
  rv int8 not null
);
insert into resource_version_counter (id, rv) values (true, 0);

create table resources (
  kind text not null,
  namespace text not null,
  name text not null,
  api_version text not null,
  uid text not null unique,
  resource_version int8 not null,
  generation int8 not null default 1,
  creation_timestamp timestamptz not null,
  deletion_timestamp timestamptz,
  labels jsonb not null default '{}'::jsonb,
  owner_references jsonb not null default '[]'::jsonb,
  finalizers jsonb not null default '[]'::jsonb,
  spec jsonb not null,
  status jsonb,
  primary key (kind, namespace, name)
);
create index resources_owner_refs on resources using gin (owner_references jsonb_path_ops);
create index resources_task_ref on resources (kind, namespace, (spec #>> '{taskRef,name}'));

-- Append-only change log for watch, one row per write, pruned to a retention window.
create table resource_events (
  resource_version int8 primary key,
  kind text not null,
  type text not null check (type in ('ADDED', 'MODIFIED', 'DELETED')),
  object jsonb not null,
  created_at timestamptz not null default now()
);
create index resource_events_kind_rv on resource_events (kind, resource_version);

-- Highest resourceVersion whose events were pruned, per kind: a watch from an older RV is 410 Gone.
create table resource_event_horizon (
  kind text primary key,
  compacted_rv int8 not null
);
