-- Named jobs the runner cannot run are rejected (capability_mismatch), with their state event.
-- After the general claim (lease_claim.sql), last in its lease transaction; after a plain claim,
-- only when that claim answered `unfit_named`, in a transaction of its own (most plain calls
-- have no named job to reject and send no rejection). The claims take only named jobs that fit,
-- so a claim and this never touch one job. All at once, no limit. A runner with no named job
-- reads one empty range of jobs_claim_named and nothing else.
-- $1 sha256(token), $2 runner id, $3 its owner.
-- The claim lets a call that took nothing commit asynchronously; a rejection must be durable,
-- so when this rejects anything it resets synchronous_commit (set_config with NULL: back to
-- the connection's configured value).
WITH rejected AS (
    UPDATE jobs j
       SET state = 'rejected', finished_at = now(), event_seq = j.event_seq + 1,
           error = jsonb_build_object('reason', 'capability_mismatch', 'message',
                       'the named runner does not advertise every required capability, requires '
                       || 'an exclusive capability the job does not, or holds no approved '
                       || 'repository target for its source')
      FROM runners r
     WHERE j.runner_id = $2 AND j.state = 'parked'
       AND r.id = $2 AND r.token_hash = $1 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
       AND NOT job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        r.capabilities, r.exclusive,
                        ARRAY(SELECT t.provider || ' ' || t.repository
                                FROM runner_repo_targets t
                               WHERE t.runner_id = r.id AND t.status = 'approved'),
                        $3 LIKE 'ws:%')
    RETURNING j.id, j.epoch, j.event_seq
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', 'capability_mismatch',
                              'runner', $2::uuid, 'epoch', epoch)
      FROM rejected
),
durable AS (
    SELECT set_config('synchronous_commit', NULL, true) WHERE EXISTS (SELECT 1 FROM rejected)
)
SELECT j.id FROM rejected j, durable
