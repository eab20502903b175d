-- Leases whose check is due: $1 batch size; $2 how far back (ms) to look for them, NULL for
-- every one (hub::sweeper: while the oldest snapshot is old, the index keeps an entry for
-- every lease since, long checked, and a sweep reads only the last moments of it). A lease
-- whose holder kept heartbeating (its lease_expires_at is still ahead) only has its next check
-- moved to that expiry; a lapsed one goes back to parked (re-delivery; the next lease bumps the
-- epoch), or fails lease_lost once attempts reached max_attempts (or, when its retry policy
-- names lease_lost and allows another retry, is parked again as a retry: epoch + 1, retries + 1,
-- attempts back to 0, leasable from not_before). Safe on every replica at
-- once: SKIP LOCKED, and each row is judged on the values it has when locked. Rows out: every
-- lease judged, those still 'leased' only had their check moved.
WITH due AS (
    SELECT id, leased_by AS holder, retries AS retries_before,
           -- A lapse past max_attempts that the job's retry policy names parks it again
           -- (migration 0024). Read on the locked row, so it is the value the update sees.
           job_retries_on(retry, retries, 'lease_lost') AS again
      FROM jobs
     WHERE state = 'leased' AND lease_check_at <= now()
       AND lease_check_at > COALESCE(now() - $2::bigint * interval '1 millisecond',
                                     '-infinity'::timestamptz)
     ORDER BY lease_check_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
judged AS (
    UPDATE jobs j
       SET state = CASE WHEN j.lease_expires_at > now() THEN 'leased'
                        WHEN j.attempts >= j.max_attempts AND NOT due.again THEN 'failed'
                        ELSE 'parked' END,
           lease_check_at = CASE WHEN j.lease_expires_at > now() THEN j.lease_expires_at END,
           finished_at = CASE WHEN j.lease_expires_at <= now() AND j.attempts >= j.max_attempts
                                   AND NOT due.again
                              THEN now() END,
           error = CASE WHEN j.lease_expires_at <= now() AND j.attempts >= j.max_attempts
                             AND NOT due.again THEN
                       jsonb_build_object('reason', 'lease_lost', 'message',
                           'the lease lapsed without a report after ' || j.attempts || ' attempts')
                   END,
           leased_by = CASE WHEN j.lease_expires_at > now()
                                 OR (j.attempts >= j.max_attempts AND NOT due.again)
                            THEN j.leased_by END,
           lease_expires_at = CASE WHEN j.lease_expires_at > now() THEN j.lease_expires_at END,
           -- The retry (a lapse past max_attempts that the policy names): a new try.
           epoch = j.epoch + CASE WHEN j.lease_expires_at <= now()
                                       AND j.attempts >= j.max_attempts AND due.again
                                  THEN 1 ELSE 0 END,
           retries = j.retries + CASE WHEN j.lease_expires_at <= now()
                                           AND j.attempts >= j.max_attempts AND due.again
                                      THEN 1 ELSE 0 END,
           attempts = CASE WHEN j.lease_expires_at <= now() AND j.attempts >= j.max_attempts
                                AND due.again
                           THEN 0 ELSE j.attempts END,
           not_before = CASE WHEN j.lease_expires_at <= now() AND j.attempts >= j.max_attempts
                                  AND due.again
                             THEN job_retry_not_before(j.retry, j.retries + 1)
                             ELSE j.not_before END,
           no_runner_check_at = CASE WHEN j.lease_expires_at <= now()
                                          AND j.attempts >= j.max_attempts AND due.again
                                     THEN COALESCE(job_retry_not_before(j.retry, j.retries + 1),
                                                   now())
                                          + j.no_runner_timeout_ms * interval '1 millisecond'
                                     ELSE j.no_runner_check_at END,
           queue_deadline = CASE WHEN j.lease_expires_at <= now()
                                      AND j.attempts >= j.max_attempts AND due.again
                                 THEN COALESCE(job_retry_not_before(j.retry, j.retries + 1),
                                               now())
                                      + (j.queue_deadline - j.created_at)
                                 ELSE j.queue_deadline END,
           event_seq = j.event_seq + CASE WHEN j.lease_expires_at > now() THEN 0 ELSE 1 END
      FROM due
     -- The ANY gives the primary key an index condition whichever way the join is planned.
     WHERE j.id = due.id AND j.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.epoch, j.event_seq,
              j.priority, j.required_capabilities, j.source_key, j.needs_workspace_runner,
              j.retries, j.retries > due.retries_before AS retried, due.holder
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           CASE WHEN retried THEN
               jsonb_build_object('state', 'parked', 'reason', 'retry', 'after', 'lease_lost',
                                  'attempt', retries, 'runner', holder, 'epoch', epoch)
           ELSE
               jsonb_build_object('state', state,
                                  'reason', CASE WHEN state = 'failed' THEN 'lease_lost' ELSE 'lease_lapsed' END,
                                  'runner', holder, 'epoch', epoch)
           END
      FROM judged WHERE state <> 'leased'
)
SELECT id, workspace, owner, runner_id, pool, state, priority, required_capabilities, source_key, needs_workspace_runner
  FROM judged
