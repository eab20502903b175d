-- The runner could not run the job at all; fenced and authenticated in one statement:
-- $1 id, $2 epoch, $3 sha256(runner token), $4 message, $5 how stale (ms) last_seen_at may get.
-- No row: the fence missed (the caller asks job_fence_miss why). When the job's retry policy
-- names runner_failed and allows another retry (job_retries_on, migration 0024), the job is
-- parked again instead: epoch + 1, retries + 1, attempts back to 0, leasable from not_before.
WITH me AS (
    SELECT r.id, r.owner, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
-- Whether this report retries the job. Read before the update, but the update re-checks the
-- fence, and every change of retries bumps the epoch, so a stale answer can never apply.
decided AS (
    SELECT job_retries_on(j.retry, j.retries, 'runner_failed') AS again
      FROM jobs j, me
     WHERE j.id = $1 AND j.epoch = $2
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
),
settled AS (
    UPDATE jobs j
       SET state = CASE WHEN d.again THEN 'parked' ELSE 'failed' END,
           finished_at = CASE WHEN d.again THEN NULL ELSE now() END,
           lease_expires_at = NULL,
           error = CASE WHEN NOT d.again THEN
                       jsonb_build_object('reason', 'runner_failed', 'message', $4::text) END,
           provenance = CASE WHEN NOT d.again THEN
                            jsonb_build_object('ran_on', 'self-hosted', 'runner', me.id,
                                               'by', me.owner, 'epoch', j.epoch) END,
           epoch = j.epoch + d.again::integer,
           retries = j.retries + d.again::integer,
           attempts = CASE WHEN d.again THEN 0 ELSE j.attempts END,
           leased_by = CASE WHEN d.again THEN NULL ELSE j.leased_by END,
           lease_check_at = CASE WHEN d.again THEN NULL ELSE j.lease_check_at END,
           not_before = CASE WHEN d.again THEN job_retry_not_before(j.retry, j.retries + 1) END,
           -- A retry's clocks start again once it may be leased (docs/contract-notes.md).
           no_runner_check_at = CASE WHEN d.again THEN
               COALESCE(job_retry_not_before(j.retry, j.retries + 1), now())
                   + j.no_runner_timeout_ms * interval '1 millisecond'
               ELSE j.no_runner_check_at END,
           queue_deadline = CASE WHEN d.again THEN
               COALESCE(job_retry_not_before(j.retry, j.retries + 1), now())
                   + (j.queue_deadline - j.created_at)
               ELSE j.queue_deadline END,
           event_seq = j.event_seq + 1
      FROM me, decided d
     WHERE j.id = $1 AND j.epoch = $2
       -- Written so no partial index on leased rows can serve it: the row is reached by its
       -- primary key whatever the statistics say (docs/perf.md, "plans").
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.*, me.id AS reporter
),
seen AS (
    UPDATE runners r SET last_seen_at = now()
      FROM me WHERE r.id = me.id AND me.last_seen_at < now() - $5::bigint * interval '1 millisecond'
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           CASE WHEN state = 'parked' THEN
               jsonb_build_object('state', 'parked', 'reason', 'retry', 'after', 'runner_failed',
                                  'attempt', retries, 'runner', reporter, 'epoch', epoch)
           ELSE
               jsonb_build_object('state', 'failed', 'reason', 'runner_failed', 'runner',
                                  leased_by, 'epoch', epoch)
           END
      FROM settled
)
SELECT * FROM settled
