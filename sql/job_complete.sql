-- First terminal report wins, fenced and authenticated in one statement: the report settles its
-- job only if the runner token is live and that runner holds the lease at that epoch. Reports
-- of several runners coalesced by the replica (store::combine) are several of these in one
-- transaction, sent pipelined.
-- $1 id, $2 epoch, $3 sha256(runner token), $4 result, $5 how stale (ms) a runner's
-- last_seen_at may get before this call refreshes it.
-- Provenance is stamped here from the rows, never taken from the runner. No row: the fence
-- missed (the caller asks job_fence_miss why).
WITH me AS (
    SELECT r.id, r.owner, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
settled AS (
    UPDATE jobs j
       SET state = 'completed', finished_at = now(), lease_expires_at = NULL,
           result = $4,
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', me.id,
                                           'by', me.owner, 'epoch', j.epoch),
           event_seq = j.event_seq + 1
      FROM me
     WHERE j.id = $1 AND j.epoch = $2
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.*
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
