-- Jobs a lease call took but cannot hand over: their secrets cannot be opened (no key on this
-- replica: $4 'secrets_unavailable', the call answers 503 with nothing half-done), or the caller
-- is gone (v1.4: 'caller_gone', the connection closed before the answer was written). Parked
-- again with the attempt given back: like a release, it never fails the job. Fenced on the
-- leases just taken: $1 ids, $2 epochs, $3 sha256 of the runner's token, $4 the reason its
-- state event gives. The epoch stays bumped (the next lease bumps it again); an ephemeral
-- runner forgets the job it took.
WITH me AS (
    SELECT r.id FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
back AS (
    UPDATE jobs j
       SET state = 'parked', attempts = j.attempts - 1,
           leased_by = NULL, lease_expires_at = NULL, lease_check_at = NULL,
           billing_tenant = CASE WHEN j.pool = 'any' THEN NULL ELSE j.billing_tenant END,
           event_seq = j.event_seq + 1
      FROM unnest($1::uuid[], $2::bigint[]) AS t(id, epoch)
     WHERE j.id = t.id AND j.epoch = t.epoch
       AND j.leased_by IS NOT DISTINCT FROM (SELECT id FROM me)
       -- Reached by primary key only (see job_fail.sql).
       AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.epoch, j.event_seq,
              j.priority, j.required_capabilities, j.source_key, j.needs_workspace_runner
),
forget AS (
    UPDATE runners SET ephemeral_job = NULL
     WHERE id = (SELECT id FROM me) AND ephemeral_job IN (SELECT id FROM back)
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'parked', 'reason', $4::text,
                              'runner', (SELECT id FROM me), 'epoch', epoch)
      FROM back
)
SELECT id, workspace, owner, runner_id, pool, state, priority, required_capabilities, source_key, needs_workspace_runner
  FROM back
