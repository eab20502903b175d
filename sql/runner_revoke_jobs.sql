-- After runner_revoke: pool jobs the runner holds go back to parked (the next lease bumps the
-- epoch, so the revoked runner can report nothing); jobs named for it, parked or leased, are
-- rejected runner_revoked. Settled jobs are never touched. $1 runner id.
WITH reparked AS (
    UPDATE jobs j
       SET state = 'parked', leased_by = NULL, lease_expires_at = NULL,
           event_seq = j.event_seq + 1
     WHERE j.leased_by = $1 AND j.state = 'leased' AND j.runner_id IS NULL
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.epoch, j.event_seq, j.state,
              j.priority, j.required_capabilities, j.source_key, j.needs_workspace_runner
),
rejected AS (
    UPDATE jobs j
       SET state = 'rejected', lease_expires_at = NULL, finished_at = now(),
           error = jsonb_build_object('reason', 'runner_revoked',
                                      'message', 'the runner this job was named for was revoked'),
           event_seq = j.event_seq + 1
     WHERE j.runner_id = $1 AND j.state IN ('parked', 'leased')
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.epoch, j.event_seq, j.state,
              j.priority, j.required_capabilities, j.source_key, j.needs_workspace_runner
),
moved AS (
    SELECT * FROM reparked UNION ALL SELECT * FROM rejected
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', state,
                              'reason', CASE WHEN state = 'parked' THEN 'runner_revoked_reparked'
                                             ELSE 'runner_revoked' END,
                              'runner', $1::uuid, 'epoch', epoch)
      FROM moved
)
SELECT id, workspace, owner, runner_id, pool, state, priority, required_capabilities, source_key, needs_workspace_runner
  FROM moved
