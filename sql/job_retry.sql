-- POST /v1/jobs/{id}/retry: park a job of workspace $1 again, $2 its id, $3 the call's
-- Idempotency-Key or NULL (recorded with the retry: job_retry_by_key.sql), $4 and $5 the
-- subject and role of the caller's key, who becomes the job's dispatcher (its secrets are
-- checked against that role at every hand-over). A settled job (any
-- terminal state) starts a new try: result, error, provenance and finish cleared. A leased one
-- is superseded: its holder no longer matches any fenced call (epoch + 1, leased_by cleared), so
-- its reports get 409 lease_superseded and its next heartbeat lists the job in `cancelled`.
-- Either way: epoch + 1, retries + 1, attempts back to 0, leasable at once (a retry call waits
-- for no delay), its no-runner and queue clocks started again, and a `state` event
-- {"state":"parked","reason":"retry","after":"retry_call","attempt":<retries>,"by":<$4>} (v1.4). An ephemeral
-- runner that had taken the job stays spent: its token died when the job settled, and the job
-- parked again must not bring it back, so it is revoked here. No row: unknown in this workspace,
-- or parked already (the caller reads it and answers it unchanged).
WITH old AS (
    SELECT id, state, leased_by FROM jobs
     WHERE id = $2 AND workspace = $1 AND state <> 'parked'
       FOR UPDATE
),
retried AS (
    UPDATE jobs j
       SET state = 'parked', epoch = j.epoch + 1, retries = j.retries + 1, attempts = 0,
           leased_by = NULL, lease_expires_at = NULL, lease_check_at = NULL, finished_at = NULL,
           result = NULL, error = NULL, provenance = NULL, not_before = NULL,
           dispatcher_subject = $4, dispatcher_role = $5,
           no_runner_check_at = now() + j.no_runner_timeout_ms * interval '1 millisecond',
           queue_deadline = now() + (j.queue_deadline - j.created_at),
           event_seq = j.event_seq + 1
      FROM old
     WHERE j.id = old.id
    RETURNING j.*, old.state AS was, old.leased_by AS holder
),
keyed AS (
    -- Two concurrent calls with one key both find it unused; the second to lock the row then
    -- finds the job parked (unchanged) unless a runner leased it in between.
    INSERT INTO job_retry_keys (job_id, key)
    SELECT id, $3::text FROM retried WHERE $3::text IS NOT NULL
    ON CONFLICT DO NOTHING
),
spent AS (
    UPDATE runners r SET revoked_at = now()
      FROM retried
     WHERE retried.was <> 'leased' AND r.ephemeral AND r.ephemeral_job = retried.id
       AND r.revoked_at IS NULL
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'parked', 'reason', 'retry', 'after', 'retry_call',
                              'attempt', retries, 'runner', holder, 'epoch', epoch, 'by', $4::text)
      FROM retried
)
SELECT * FROM retried
