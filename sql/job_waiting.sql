-- Why a parked job waits (v1.4 "Why a job waits"): $1 id, $2 workspace, $3 presence window ms.
-- One row, `waiting`: NULL when the job is not parked; `not_before` while a retry's delay runs;
-- else what runners_waiting() (migration 0052) says of the runners that could take it
-- (`no_matching_runner`, `no_runner_online`, `all_busy`, or NULL: it is about to be leased).
-- No rows: no such job in the workspace. A dispatch answers the same in job_insert.sql.
SELECT CASE
           WHEN j.state <> 'parked' THEN NULL
           WHEN j.not_before IS NOT NULL AND j.not_before > now() THEN 'not_before'
           ELSE runners_waiting(j.workspace, j.owner, j.runner_id, j.pool,
                                j.required_capabilities, j.source_key,
                                j.needs_workspace_runner, $3)
       END AS waiting
  FROM jobs j
 WHERE j.id = $1 AND j.workspace = $2
