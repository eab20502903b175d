-- Park jobs, authenticated in the same statement: each item carries the SHA-256 of its caller's
-- API key and is parked only while that key is live. One statement parks one dispatch, a batch
-- dispatch, or dispatches of several callers coalesced by the replica (hub::combine); every
-- parked job gets its first `state` event. Items are inserted in array order.
-- $1 a JSON array of items: {ord (position), id, key (hex sha256), pool ('personal'|'workspace'|'any', or null
-- for a named runner), runner_id, owner (named runners only: the runner's owner), kind,
-- payload, required_capabilities, priority, max_attempts, no_runner_timeout_ms,
-- queue_timeout_ms, idempotency_key, secrets, source, source_key}.
-- No row for an item: its key is not live, or its idempotency key was already used in the
-- workspace (earlier, or by an earlier item of this statement); the caller then reads the first.
WITH items AS (
    SELECT x.*, k.workspace,
           CASE x.pool WHEN 'workspace' THEN 'ws:' || k.workspace
                       WHEN 'personal' THEN k.subject
                       WHEN 'any' THEN k.subject
                       ELSE x.owner END AS queue_owner
      FROM jsonb_to_recordset($1::jsonb) AS x (
               ord bigint, id uuid, key text, pool text, runner_id uuid, owner text, kind text,
               payload jsonb, required_capabilities text[], priority integer, max_attempts integer,
               no_runner_timeout_ms bigint, queue_timeout_ms bigint, idempotency_key text,
               secrets text[], source jsonb, source_key text)
      -- Per item, by the unique key index (OFFSET 0 keeps the planner from turning this into a
      -- join over every key).
      CROSS JOIN LATERAL (
          SELECT k.workspace, k.subject FROM api_keys k
           WHERE k.token_hash = decode(x.key, 'hex') AND k.revoked_at IS NULL
          OFFSET 0) AS k
),
inserted AS (
    INSERT INTO jobs (id, workspace, owner, runner_id, pool, state, kind, payload,
                      required_capabilities, priority, max_attempts, no_runner_timeout_ms,
                      no_runner_check_at, queue_deadline, idempotency_key, billing_tenant,
                      secrets, source, source_key, event_seq)
    SELECT id, workspace, queue_owner, runner_id, pool, 'parked', kind,
           COALESCE(payload, 'null'::jsonb),  -- a JSON null reads as SQL NULL here
           required_capabilities, priority, max_attempts, no_runner_timeout_ms,
           now() + no_runner_timeout_ms * interval '1 millisecond',
           now() + queue_timeout_ms * interval '1 millisecond',
           idempotency_key,
           CASE WHEN queue_owner LIKE 'ws:%' THEN workspace END,
           secrets, source, source_key, 1
      FROM items
     ORDER BY ord
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
