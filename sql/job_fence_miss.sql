-- Why a fenced runner call matched nothing: $1 job id, $2 sha256(runner token).
-- No row: the token is not live (401). Otherwise `state` is the job's state as this runner may
-- see it: NULL when the job is not visible to it (unknown, another workspace's or another
-- owner's: 404), terminal (409 job_terminal), else live but not held at that epoch (409
-- lease_superseded). A runner sees its owner's jobs in its workspace, and a workspace runner
-- also that workspace's 'any' jobs.
SELECT (SELECT j.state FROM jobs j
         WHERE j.id = $1 AND j.workspace = r.workspace
           AND (j.owner = r.owner OR (j.pool = 'any' AND r.owner = 'ws:' || j.workspace))) AS state
  FROM runners r
 WHERE r.token_hash = $2 AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
