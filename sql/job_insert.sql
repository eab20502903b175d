-- Park a job and append its first event. On an Idempotency-Key already used in the workspace
-- it inserts nothing and returns no row (the caller then reads the first job).
-- $1 id, $2 workspace, $3 owner, $4 runner id or NULL (pool), $5 kind, $6 payload,
-- $7 required capabilities, $8 priority, $9 max_attempts, $10 no_runner_timeout_ms,
-- $11 queue_timeout_ms or NULL, $12 idempotency key or NULL, $13 billing tenant or NULL,
-- $14 traceparent of the dispatch or NULL.
WITH inserted AS (
    INSERT INTO jobs (id, workspace, owner, runner_id, state, kind, payload,
                      required_capabilities, priority, max_attempts, no_runner_timeout_ms,
                      no_runner_check_at, queue_deadline, idempotency_key, billing_tenant,
                      traceparent, event_seq)
    VALUES ($1, $2, $3, $4, 'parked', $5, $6, $7, $8, $9, $10,
            now() + $10::bigint * interval '1 millisecond',
            now() + $11::bigint * interval '1 millisecond',
            $12, $13, $14, 1)
    ON CONFLICT (workspace, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, 1, 'state',
           jsonb_build_object('state', 'parked', 'reason', 'dispatched', 'runner', NULL, 'epoch', 0)
      FROM inserted
)
SELECT * FROM inserted
