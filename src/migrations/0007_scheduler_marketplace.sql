-- Scheduler marketplace rail (src/scheduler/marketplace.ts): one usage report per finished run of
-- a marketplace task. The primary key is the idempotency guard: a run is reported (and its plan
-- debited) at most once, whatever retries or second finishes happen.
create table scheduler_usage_reports (
  run_id text primary key,
  task_id text not null references scheduler_tasks (id),
  -- The plan holder (owner of the task is 'agent:' || agent_id).
  agent_id text not null references agents (id),
  service text not null,
  meter text not null,
  -- Units reported on the meter (the run's cost in meter units), of which included_units were free.
  units int8 not null check (units > 0),
  included_units int8 not null default 0 check (included_units >= 0 and included_units <= units),
  -- What was debited from the plan: credit micros (credit plan) or one call (subscription).
  debited_micros int8 not null default 0 check (debited_micros >= 0),
  plan_id text,
  purchase_id text,
  created_at timestamptz not null default now()
);
create index scheduler_usage_reports_agent on scheduler_usage_reports (agent_id, meter);
create index scheduler_usage_reports_task on scheduler_usage_reports (task_id, created_at);

-- The audit-only 'usage' ledger row of a run is written once, like its run_cost row.
create unique index scheduler_ledger_one_usage on scheduler_ledger (run_id) where kind = 'usage';
