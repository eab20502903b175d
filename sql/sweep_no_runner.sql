-- Parked jobs whose no-runner check is due. The deadline is no_runner_timeout after the later of
-- dispatch and the last moment a runner that could take the job was online: live, not outdated,
-- in the job's workspace, the named runner or one serving its queue (for an 'any' job also the
-- workspace's runners), and able to run it (job_fits: every required capability, no exclusive
-- name the job does not require, an approved repository target for its source, if any, and a
-- workspace runner for a job naming a 'workspace' secret). A
-- runner never seen was never online (and greatest() ignores the NULL of no runner). Past the
-- deadline: rejected no_runner; otherwise the next check moves to the deadline. $1 batch size,
-- $2 presence window ms, $3 how far back (ms) to look for due checks, NULL for every one (as in
-- sweep_lapsed_leases.sql). Rows out: every job judged, those still 'parked' only had their
-- check moved.
WITH due AS (
    SELECT id FROM jobs
     WHERE state = 'parked' AND no_runner_check_at <= now()
       AND no_runner_check_at > COALESCE(now() - $3::bigint * interval '1 millisecond',
                                         '-infinity'::timestamptz)
     ORDER BY no_runner_check_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
judged AS (
    SELECT j.id,
           greatest(j.created_at,
                    (SELECT max(least(now(), r.last_seen_at + $2::bigint * interval '1 millisecond'))
                       FROM runners r
                      WHERE r.revoked_at IS NULL AND r.last_seen_at IS NOT NULL
                        AND NOT r.outdated
                        AND r.workspace = j.workspace
                        AND (r.id = j.runner_id
                             OR (j.runner_id IS NULL AND r.owner = j.owner)
                             OR (j.pool = 'any' AND r.owner = 'ws:' || j.workspace))
                        AND job_fits(j.required_capabilities, j.source_key,
                                     j.needs_workspace_runner, r.capabilities, r.exclusive,
                                     ARRAY(SELECT t.provider || ' ' || t.repository
                                             FROM runner_repo_targets t
                                            WHERE t.runner_id = r.id
                                              AND t.status = 'approved'),
                                     r.owner LIKE 'ws:%')))
           + j.no_runner_timeout_ms * interval '1 millisecond' AS deadline
      FROM jobs j
     WHERE j.id = ANY (ARRAY(SELECT id FROM due))
),
moved AS (
    UPDATE jobs j
       SET state = CASE WHEN judged.deadline <= now() THEN 'rejected' ELSE 'parked' END,
           finished_at = CASE WHEN judged.deadline <= now() THEN now() END,
           error = CASE WHEN judged.deadline <= now() THEN
                       jsonb_build_object('reason', 'no_runner', 'message',
                           'no runner that could take this job was online for '
                           || j.no_runner_timeout_ms || ' ms')
                   END,
           no_runner_check_at = judged.deadline,
           event_seq = j.event_seq + CASE WHEN judged.deadline <= now() THEN 1 ELSE 0 END
      FROM judged
     WHERE j.id = judged.id AND j.id = ANY (ARRAY(SELECT id FROM judged))
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.epoch, j.event_seq
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', 'no_runner', 'runner', NULL, 'epoch', epoch)
      FROM moved WHERE state = 'rejected'
)
SELECT id, workspace, owner, runner_id, pool, state FROM moved
