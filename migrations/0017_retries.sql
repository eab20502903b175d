-- Retries (contract v1.2, part B): a dispatch's retry policy, how many retries were made, and
-- when a job waiting for one may be leased again.
--
-- `retry` is the policy as dispatched ({"limit","on","delay_ms"}) or NULL for none; `retries`
-- counts the re-parks a policy or POST /v1/jobs/{id}/retry made; `not_before` is NULL unless the
-- job waits for a retry's delay, and the claim leases no job before it.
--
-- Adding a column with a constant default rewrites nothing (PostgreSQL 11+), so this migration
-- takes its lock only for a moment on a full table.
ALTER TABLE jobs
    ADD COLUMN retries    integer     NOT NULL DEFAULT 0 CHECK (retries >= 0),
    ADD COLUMN retry      jsonb,
    ADD COLUMN not_before timestamptz;
