-- Park jobs of one caller, authenticated in the same statement: they are parked only while the
-- caller's API key is live. A batch dispatch, and concurrent dispatches coalesced by the replica
-- (store::combine), are one call of this statement per API key: one plan started for all its
-- jobs, not one per job (docs/perf.md "Round 9"). Each job gets its
-- first `state` event, and the key's subject and role as its dispatcher (the secrets it names
-- are checked against them at every hand-over: api::runner::hand_over).
-- $1 sha256 of the caller's API key; $2 the jobs as a JSON array of objects, each a
-- store::records::NewJob as it serialises (its fields document them; `items` below reads them).
-- Every input is a parameter and the key a unique-index probe: nothing here is a join the
-- planner could turn into a scan of a table, whatever the statistics say.
-- Jobs with an idempotency key are parked by this statement with an ON CONFLICT clause before
-- the insert's RETURNING (store::sql::JOB_INSERT_IDEMPOTENT, which build.rs makes from this
-- file): a speculative insertion costs every insert that has it (19 µs here, docs/perf.md
-- "Round 6"), and only a keyed job needs it. Store::insert_jobs sends each kind for each key,
-- in one transaction; a keyed item whose key the workspace already used gets no row.
-- $3 the presence window (ms): each row adds `waiting`, why the job waits (v1.4), from
-- runners_waiting() (migration 0052) once for each class of job the call parks, so a dispatch
-- answers it without a statement more.
-- A row for each job parked, matched to its item by id. None: the key is not live.
WITH k AS (
    SELECT workspace, subject, role FROM api_keys WHERE token_hash = $1 AND revoked_at IS NULL
),
items AS (
    SELECT x.*, k.workspace, k.subject AS dispatcher_subject, k.role AS dispatcher_role,
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
                      event_seq, dispatcher_subject, dispatcher_role)
    SELECT id, workspace, queue_owner, runner_id, pool, 'parked', kind,
           COALESCE(payload, 'null'::jsonb),  -- a JSON null reads as SQL NULL here
           required_capabilities, priority, max_attempts, no_runner_timeout_ms,
           now() + no_runner_timeout_ms * interval '1 millisecond',
           now() + queue_timeout_ms * interval '1 millisecond',
           idempotency_key,
           CASE WHEN queue_owner LIKE 'ws:%' THEN workspace END,
           secrets, source, source_key, traceparent, retry,
           COALESCE(needs_workspace_runner, false), 1, dispatcher_subject, dispatcher_role
      FROM items
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, workspace, seq, kind, data)
    SELECT id, workspace, 1, 'state',
           jsonb_build_object('state', 'parked', 'reason', 'dispatched', 'runner', NULL, 'epoch', 0)
      FROM inserted
),
classes AS (
    SELECT DISTINCT workspace, owner, runner_id, pool, required_capabilities, source_key,
                    needs_workspace_runner
      FROM inserted
),
waits AS (
    SELECT c.*, runners_waiting(c.workspace, c.owner, c.runner_id, c.pool,
                                c.required_capabilities, c.source_key,
                                c.needs_workspace_runner, $3) AS waiting
      FROM classes c
)
SELECT i.*, w.waiting
  FROM inserted i
  JOIN waits w
    ON (w.workspace, w.owner, w.runner_id, w.pool, w.required_capabilities, w.source_key,
        w.needs_workspace_runner)
       IS NOT DISTINCT FROM
       (i.workspace, i.owner, i.runner_id, i.pool, i.required_capabilities, i.source_key,
        i.needs_workspace_runner)
