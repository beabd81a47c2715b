-- Review retention (src/reviews/retention.ts): a session expires REVIEWS_RETENTION_DAYS after
-- created_at. The row stays (status 'expired', expired_at; a submitted review is kept) while its
-- site's blobs are deleted.
alter table reviews drop constraint reviews_status_check;
alter table reviews add constraint reviews_status_check check (status in ('open', 'submitted', 'expired'));
alter table reviews add column expired_at timestamptz;
alter table reviews add check ((status = 'expired') = (expired_at is not null));
-- The sweep's scan: sessions not yet expired, oldest first.
create index reviews_unexpired_created on reviews (created_at) where status <> 'expired';

-- Blob keys still to delete, kept durably so a crash or a failed delete is retried by the next
-- sweep. 'upload': written before an uploaded site's blobs are put and deleted in the transaction
-- that writes its session, so one older than an hour names blobs of a request that died.
-- 'expired': the blobs of an expired session. No foreign key: an upload's row precedes its session.
create table review_uploads (
  review_id uuid not null,
  reason text not null check (reason in ('upload', 'expired')),
  blob_keys text[] not null,
  created_at timestamptz not null,
  -- When the sweep may delete the blobs; pushed forward while a sweep holds the row.
  purge_after timestamptz not null,
  -- Set when a sweep first takes an upload's row: the create that wrote it may no longer commit.
  claimed_at timestamptz,
  primary key (review_id, reason)
);
create index review_uploads_purge on review_uploads (purge_after);
