-- A job just leased that must not be handed over for one of its named secrets, rejected with
-- reason $5: 'secret_missing' when the secret no longer exists (or, for a personal runner, is
-- now 'workspace'-scoped), 'secret_forbidden' when it is now 'dispatch: admin' and the job's
-- dispatcher is not an admin (v1.3). The attempt the claim counted is given back (no attempt
-- is counted). Fenced on the lease just taken: $1 id, $2 epoch, $3 sha256 of the runner's
-- token, $4 the error message (it names the secret, never a value). An
-- 'any' job's billing tenant goes back to null: no lease of it was accepted.
WITH me AS (
    SELECT r.id FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
rejected AS (
    UPDATE jobs j
       SET state = 'rejected', attempts = j.attempts - 1, finished_at = now(),
           leased_by = NULL, lease_expires_at = NULL, lease_check_at = NULL,
           billing_tenant = CASE WHEN j.pool = 'any' THEN NULL ELSE j.billing_tenant END,
           error = jsonb_build_object('reason', $5::text, 'message', $4::text),
           event_seq = j.event_seq + 1
     WHERE j.id = $1 AND j.epoch = $2
       AND j.leased_by IS NOT DISTINCT FROM (SELECT id FROM me)
       -- Reached by primary key only (see job_fail.sql).
       AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.epoch, j.event_seq
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', $5::text,
                              'runner', (SELECT id FROM me), 'epoch', epoch)
      FROM rejected
)
SELECT id, workspace, owner, runner_id, pool, state FROM rejected
