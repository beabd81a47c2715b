-- A settlement is final only once the chain confirms it (src/payments/confirmations.ts). A
-- 'settled' reservation whose confirmed_at is null is provisional money: its work may run, but no
-- refund or withdrawal draws on it. The sweep moves it on: confirmed (confirmed_at, block_number);
-- 'reorged' (the transaction is no longer on the chain: re-broadcast while the authorization is
-- valid, back to 'settled' once it lands again); 'reversed' (it can never land: the work is taken
-- back as for a failed payment).
alter table payment_reservations add column block_number int8;
alter table payment_reservations add column confirmed_at timestamptz;
alter table payment_reservations drop constraint payment_reservations_state_check;
alter table payment_reservations add constraint payment_reservations_state_check
  check (state in ('reserved', 'settling', 'settled', 'pending', 'released', 'consumed', 'reorged', 'reversed'));
-- Settlements decided by an earlier version were taken as final; the last hour is checked again.
update payment_reservations set confirmed_at = coalesce(decided_at, updated_at)
 where state = 'settled' and coalesce(decided_at, updated_at) < now() - interval '1 hour';
create index payment_reservations_unconfirmed on payment_reservations (updated_at)
  where state in ('settled', 'reorged') and confirmed_at is null;

alter table payments_ledger drop constraint payments_ledger_event_check;
alter table payments_ledger add constraint payments_ledger_event_check
  check (event in ('settled', 'pending', 'failed', 'reconciled_settled', 'reconciled_failed', 'reorged', 'resettled', 'reversed'));

-- Refund outboxes: 'waiting' = not signed yet, because a settlement it returns is not confirmed
-- (or it would exceed what the chain confirms was received, or the refund wallet's balance);
-- 'cancelled' = nothing is owed any more (the payment it returned never reached the chain).
alter table scheduler_refunds drop constraint scheduler_refunds_state_check;
alter table scheduler_refunds add constraint scheduler_refunds_state_check check (state in ('pending', 'waiting', 'sending', 'confirmed', 'failed', 'cancelled'));
alter table media_refunds drop constraint media_refunds_state_check;
alter table media_refunds add constraint media_refunds_state_check check (state in ('pending', 'waiting', 'sending', 'confirmed', 'failed', 'cancelled'));
alter table memory_refunds drop constraint memory_refunds_state_check;
alter table memory_refunds add constraint memory_refunds_state_check check (state in ('pending', 'waiting', 'sending', 'confirmed', 'failed', 'cancelled'));
drop index media_refunds_open;
create index media_refunds_open on media_refunds (next_attempt_at) where state not in ('confirmed', 'cancelled');
drop index memory_refunds_open;
create index memory_refunds_open on memory_refunds (next_attempt_at) where state not in ('confirmed', 'cancelled');

-- A sale or a deposit whose settled payment the chain dropped for good.
alter table media_sales drop constraint media_sales_state_check;
alter table media_sales add constraint media_sales_state_check check (state in ('provisional', 'settled', 'failed', 'reversed'));
alter table memory_ledger drop constraint memory_ledger_kind_check;
alter table memory_ledger add constraint memory_ledger_kind_check check (kind in ('deposit', 'debit', 'dream', 'refund', 'reversal'));

-- A task's escrow closes (and refunds) only once every settled charge of it is confirmed.
alter table scheduler_charges add column confirmed_at timestamptz;
update scheduler_charges c set confirmed_at = p.confirmed_at
  from payment_reservations p where p.replay_key = c.replay_key and c.state = 'settled' and p.confirmed_at is not null;
