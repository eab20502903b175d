-- job_insert.sql for jobs with an idempotency key: the same statement (a unit test holds them
-- equal but for the ON CONFLICT clause) that parks nothing for a key the workspace already used.
-- $1 sha256 of the caller's API key; $2 the jobs as a JSON array, as for job_insert.sql.
-- A row for each job parked, matched to its item by id. An item with no row: the key is not
-- live, or its idempotency key was already used in the workspace (earlier, by an item before it
-- in this call, or earlier in the same transaction); the caller then reads the first job.
WITH k AS (
    SELECT workspace, subject FROM api_keys WHERE token_hash = $1 AND revoked_at IS NULL
),
items AS (
    SELECT x.*, k.workspace,
           CASE x.pool WHEN 'workspace' THEN 'ws:' || k.workspace
                       WHEN 'personal' THEN k.subject
                       WHEN 'any' THEN k.subject
                       ELSE x.owner END AS queue_owner
      FROM jsonb_to_recordset($2::jsonb) AS x (
               id uuid, pool text, runner_id uuid, owner text, kind text,
               payload jsonb, required_capabilities text[], priority integer, max_attempts integer,
               no_runner_timeout_ms bigint, queue_timeout_ms bigint, idempotency_key text,
               secrets text[], source jsonb, source_key text, traceparent text, retry jsonb,
               needs_workspace_runner boolean),
           k
),
inserted AS (
    INSERT INTO jobs (id, workspace, owner, runner_id, pool, state, kind, payload,
                      required_capabilities, priority, max_attempts, no_runner_timeout_ms,
                      no_runner_check_at, queue_deadline, idempotency_key, billing_tenant,
                      secrets, source, source_key, traceparent, retry, needs_workspace_runner,
                      event_seq)
    SELECT id, workspace, queue_owner, runner_id, pool, 'parked', kind,
           COALESCE(payload, 'null'::jsonb),  -- a JSON null reads as SQL NULL here
           required_capabilities, priority, max_attempts, no_runner_timeout_ms,
           now() + no_runner_timeout_ms * interval '1 millisecond',
           now() + queue_timeout_ms * interval '1 millisecond',
           idempotency_key,
           CASE WHEN queue_owner LIKE 'ws:%' THEN workspace END,
           secrets, source, source_key, traceparent, retry,
           COALESCE(needs_workspace_runner, false), 1
      FROM items
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
