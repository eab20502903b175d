-- The runner could not run the job at all; fenced and authenticated in one statement:
-- $1 id, $2 epoch, $3 sha256(runner token), $4 message, $5 how stale (ms) last_seen_at may get.
-- No row: the fence missed (the caller asks job_fence_miss why).
WITH me AS (
    SELECT r.id, r.owner, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
settled AS (
    UPDATE jobs j
       SET state = 'failed', finished_at = now(), lease_expires_at = NULL,
           error = jsonb_build_object('reason', 'runner_failed', 'message', $4::text),
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', me.id,
                                           'by', me.owner, 'epoch', j.epoch),
           event_seq = j.event_seq + 1
      FROM me
     WHERE j.id = $1 AND j.epoch = $2
       -- Written so no partial index on leased rows can serve it: the row is reached by its
       -- primary key whatever the statistics say (docs/perf.md, "plans").
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
           jsonb_build_object('state', 'failed', 'reason', 'runner_failed', 'runner', leased_by,
                              'epoch', epoch)
      FROM settled
)
SELECT * FROM settled
