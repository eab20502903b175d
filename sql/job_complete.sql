-- First terminal report wins, fenced and authenticated in one statement: a report settles its job
-- only if its runner token is live and that runner holds the lease at that epoch. Reports of
-- several runners coalesced by the replica (store::combine) are one call of this statement: one
-- plan started for all of them (shared/PERF-FACTS.md 3), each report matched alone.
-- $1 ids, $2 epochs, $3 sha256(runner token)s, $4 results: one element per report, in step;
-- $5 how stale (ms) a runner's last_seen_at may get before this call refreshes it.
-- Provenance is stamped here from the rows, never taken from the runner. A report's row carries
-- its position in the arrays (`ord`, from 1); a report with no row missed its fence (the caller
-- asks job_fence_miss why). Two reports of one job in one call settle it once: the other one
-- misses, as it would have after the first.
WITH report AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bytea[], $4::jsonb[])
                  WITH ORDINALITY AS x (id, epoch, token_hash, result, ord)
),
me AS (
    SELECT x.ord, r.id, r.owner, r.last_seen_at
      FROM report x JOIN runners r ON r.token_hash = x.token_hash
     WHERE r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
settled AS (
    UPDATE jobs j
       SET state = 'completed', finished_at = now(), lease_expires_at = NULL,
           result = x.result,
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', me.id,
                                           'by', me.owner, 'epoch', j.epoch),
           event_seq = j.event_seq + 1
      FROM report x JOIN me ON me.ord = x.ord
     WHERE j.id = x.id AND j.epoch = x.epoch
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING x.ord, j.*
),
seen AS (
    UPDATE runners r SET last_seen_at = now()
      FROM me WHERE r.id = me.id AND me.last_seen_at < now() - $5::bigint * interval '1 millisecond'
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'completed', 'reason', NULL, 'runner', leased_by,
                              'epoch', epoch)
      FROM settled
)
SELECT * FROM settled
