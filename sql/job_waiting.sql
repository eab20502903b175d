-- Why a parked job waits (v1.4 "Why a job waits"): $1 id, $2 workspace, $3 presence window ms.
-- One row, `waiting`: NULL when the job is not parked, or when a runner that could take it is
-- online with a free slot (it is about to be leased); `not_before` while a retry's delay runs;
-- else over the live runners of its target (the named runner, or those serving its queue, and
-- for an 'any' job the workspace's too) that fit it as the no-runner sweep judges (job_fits:
-- every required capability, no exclusive name it does not require, an approved repository
-- target for its source, a workspace runner for a workspace secret): `no_matching_runner` when
-- none fits (or none is paired), `no_runner_online` when none of those is online and current
-- (an outdated runner cannot lease), `all_busy` when every slot of the online ones is held.
-- No rows: no such job in the workspace.
WITH j AS (
    SELECT * FROM jobs WHERE id = $1 AND workspace = $2
),
fit AS (
    SELECT r.capacity,
           NOT r.outdated AND runner_presence(r.last_seen_at, $3) = 'online' AS online,
           (SELECT count(*) FROM jobs l
             WHERE l.leased_by = r.id AND l.state = 'leased') AS active
      FROM j, runners r
     WHERE j.state = 'parked'
       AND r.revoked_at IS NULL AND r.workspace = j.workspace
       AND (r.id = j.runner_id
            OR (j.runner_id IS NULL AND r.owner = j.owner)
            OR (j.pool = 'any' AND r.owner = 'ws:' || j.workspace))
       AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                    r.capabilities, r.exclusive,
                    ARRAY(SELECT t.provider || ' ' || t.repository
                            FROM runner_repo_targets t
                           WHERE t.runner_id = r.id AND t.status = 'approved'),
                    r.owner LIKE 'ws:%')
)
SELECT CASE
           WHEN j.state <> 'parked' THEN NULL
           WHEN j.not_before IS NOT NULL AND j.not_before > now() THEN 'not_before'
           WHEN NOT EXISTS (SELECT 1 FROM fit) THEN 'no_matching_runner'
           WHEN NOT EXISTS (SELECT 1 FROM fit WHERE online) THEN 'no_runner_online'
           WHEN NOT EXISTS (SELECT 1 FROM fit WHERE online AND active < capacity) THEN 'all_busy'
       END AS waiting
  FROM j
