-- A pass of the settlement reconciler or the confirmation sweep claims the reservations it asks
-- the chain about (src/payments/check-claims.ts), so replicas do not re-broadcast the same
-- authorization at once; null = free, a past instant = the claim of a pass that died, lapsed.
alter table payment_reservations add column checking_until timestamptz;
