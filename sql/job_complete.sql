-- First terminal report wins, fenced and authenticated in one statement: a report settles its job
-- only if its runner token is live and that runner holds the lease at that epoch. Reports of
-- several runners coalesced by the replica (store::combine) are one call of this statement: one
-- plan started for all of them (docs/perf.md), each report matched alone.
-- $1 ids, $2 epochs, $3 sha256(runner token)s, $4 results: one element per report, in step;
-- $5 how stale (ms) a runner's last_seen_at may get before this call refreshes it.
-- Provenance is stamped here from the rows, never taken from the runner. A report's row carries
-- its position in the arrays (`ord`, from 1); a report with no row missed its fence (the caller
-- asks job_fence_miss why). Two reports of one job in one call settle it once: the other one
-- misses, as it would have after the first.
-- A result whose exit_code is a non-zero integer, of a job whose retry policy names exit_code
-- and allows another retry (job_retries_on, job_exit_failed: migration 0024), parks the job
-- again instead of completing it: epoch + 1, retries + 1, attempts back to 0, result cleared,
-- leasable from not_before.
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
-- Whether each report retries its job (read before the update, as in job_fail.sql: the update
-- re-checks the fence, and every change of retries bumps the epoch).
decided AS (
    SELECT x.ord, job_retries_on(j.retry, j.retries, 'exit_code')
                  AND job_exit_failed(x.result) AS again
      FROM report x JOIN jobs j ON j.id = x.id
),
settled AS (
    UPDATE jobs j
       SET state = CASE WHEN d.again THEN 'parked' ELSE 'completed' END,
           finished_at = CASE WHEN d.again THEN NULL ELSE now() END,
           lease_expires_at = NULL,
           result = CASE WHEN NOT d.again THEN x.result END,
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
      FROM report x JOIN me ON me.ord = x.ord JOIN decided d ON d.ord = x.ord
     WHERE j.id = x.id AND j.epoch = x.epoch
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING x.ord, j.*, me.id AS reporter
),
-- Best effort: a runner row another transaction holds (a tick, a revoke) is skipped, never
-- waited for, so this statement never waits for a runner after taking a job (one lock order,
-- runners first: docs/design.md); its next call refreshes it.
seen AS (
    UPDATE runners r SET last_seen_at = now()
     WHERE r.id IN (SELECT s.id FROM runners s JOIN me ON s.id = me.id
                     WHERE me.last_seen_at < now() - $5::bigint * interval '1 millisecond'
                     ORDER BY s.id FOR NO KEY UPDATE OF s SKIP LOCKED)
),
events AS (
    INSERT INTO job_events (job_id, workspace, seq, kind, data)
    SELECT id, workspace, event_seq, 'state',
           CASE WHEN state = 'parked' THEN
               jsonb_build_object('state', 'parked', 'reason', 'retry', 'after', 'exit_code',
                                  'attempt', retries, 'runner', reporter, 'epoch', epoch)
           ELSE
               jsonb_build_object('state', 'completed', 'reason', NULL, 'runner', leased_by,
                                  'epoch', epoch)
           END
      FROM settled
)
SELECT * FROM settled
