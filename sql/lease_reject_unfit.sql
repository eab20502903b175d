-- Named jobs a runner cannot run are rejected (capability_mismatch), with their state events:
-- for the runners whose claim answered `unfit_named` (claim.sql: they dropped a capability or
-- lost a target since the dispatch, which refuses a named job that does not fit), in a durable
-- transaction of its own right after the tick's. Claims take only named jobs that fit, so a
-- claim and this never touch one job. $1 runner ids. Rows: the jobs rejected.
-- Each runner's named lane is read from the runner (a lateral kept apart by its LIMIT), and the
-- jobs updated by primary key (`IS NOT DISTINCT FROM`: no partial index of parked jobs matches):
-- whatever the statistics say, the plan never walks another lane.
WITH unfit AS (
    SELECT j.id FROM runners r CROSS JOIN LATERAL (
        SELECT j.id FROM jobs j
         WHERE job_lane(j.workspace, j.owner, j.runner_id, j.pool, j.needs_workspace_runner,
                        j.required_capabilities, j.source_key) = 'r/' || r.id
           AND j.state = 'parked'
           AND NOT job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                            r.capabilities, r.exclusive, runner_sources(r.id),
                            r.owner LIKE 'ws:%')
         LIMIT 1000) AS j
     WHERE r.id = ANY ($1::uuid[]) AND r.revoked_at IS NULL
),
rejected AS (
    UPDATE jobs j
       SET state = 'rejected', finished_at = now(), event_seq = j.event_seq + 1,
           error = jsonb_build_object('reason', 'capability_mismatch', 'message',
                       'the named runner does not advertise every required capability, requires '
                       || 'an exclusive capability the job does not, or holds no approved '
                       || 'repository target for its source')
     WHERE j.id = ANY (ARRAY(SELECT id FROM unfit)) AND j.state IS NOT DISTINCT FROM 'parked'
    RETURNING j.id, j.epoch, j.event_seq, j.runner_id
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', 'capability_mismatch',
                              'runner', runner_id, 'epoch', epoch)
      FROM rejected
)
SELECT id FROM rejected
