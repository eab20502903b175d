-- Give a lease back (draining), fenced and authenticated in one statement: $1 id, $2 epoch,
-- $3 sha256(runner token), $4 how stale (ms) last_seen_at may get. The job is parked again with
-- its epoch unchanged; the next lease bumps it. Never fails the job.
WITH me AS (
    SELECT r.id, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
released AS (
    UPDATE jobs j
       SET state = 'parked', leased_by = NULL, lease_expires_at = NULL,
           event_seq = j.event_seq + 1
      FROM me
     WHERE j.id = $1 AND j.epoch = $2
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.*, me.id AS releaser
),
-- Best effort: a runner row another transaction holds (a tick, a revoke) is skipped, never
-- waited for, so this statement never waits for a runner after taking a job (one lock order,
-- runners first: docs/design.md); its next call refreshes it.
seen AS (
    UPDATE runners r SET last_seen_at = now()
     WHERE r.id IN (SELECT s.id FROM runners s JOIN me ON s.id = me.id
                     WHERE me.last_seen_at < now() - $4::bigint * interval '1 millisecond'
                     ORDER BY s.id FOR NO KEY UPDATE OF s SKIP LOCKED)
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'parked', 'reason', 'released', 'runner', releaser,
                              'epoch', epoch)
      FROM released
)
SELECT * FROM released
