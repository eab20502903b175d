-- Why a parked job waits (v1.4 "Why a job waits"), over the runners that could take it, as one
-- function: the dispatch statement (job_insert.sql) answers it for the jobs it parks, in the
-- same statement, and job_waiting.sql for a job read later. A dispatch used to run
-- job_waiting.sql after its insert, a statement and a transaction more a job (1.93 -> 3.00
-- statements a job in the throughput bench, docs/perf.md).
--
-- The runners that could take a job of this class are the live runners of its target (the
-- named runner, or those serving its queue, and for an 'any' job the workspace's too) that fit
-- it as the no-runner sweep judges (job_fits: every required capability, no exclusive name it
-- does not require, an approved repository target for its source, a workspace runner for a
-- workspace secret). The answer: 'no_matching_runner' when none fits (or none is paired),
-- 'no_runner_online' when none of those is online and current (an outdated runner cannot
-- lease), 'all_busy' when every slot of the online ones is held, else NULL (it is about to be
-- leased). The caller judges the job's state and a retry's delay first.
--
-- plpgsql, so each session plans its query once and keeps the plan.
CREATE FUNCTION runners_waiting(j_workspace text, j_owner text, j_runner uuid, j_pool text,
                                j_required text[], j_source_key text,
                                j_workspace_only boolean, presence_ms bigint)
RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    fits boolean;
    online boolean;
    free boolean;
BEGIN
    SELECT count(*) > 0, COALESCE(bool_or(f.online), false),
           COALESCE(bool_or(f.online AND f.active < f.capacity), false)
      INTO fits, online, free
      FROM (SELECT r.capacity,
                   NOT r.outdated AND runner_presence(r.last_seen_at, presence_ms) = 'online'
                       AS online,
                   (SELECT count(*) FROM jobs l
                     WHERE l.leased_by = r.id AND l.state = 'leased') AS active
              FROM runners r
             WHERE r.revoked_at IS NULL AND r.workspace = j_workspace
               AND (r.id = j_runner
                    OR (j_runner IS NULL AND r.owner = j_owner)
                    OR (j_pool = 'any' AND r.owner = 'ws:' || j_workspace))
               AND job_fits(j_required, j_source_key, j_workspace_only,
                            r.capabilities, r.exclusive,
                            ARRAY(SELECT t.provider || ' ' || t.repository
                                    FROM runner_repo_targets t
                                   WHERE t.runner_id = r.id AND t.status = 'approved'),
                            r.owner LIKE 'ws:%')) f;
    RETURN CASE
               WHEN NOT fits THEN 'no_matching_runner'
               WHEN NOT online THEN 'no_runner_online'
               WHEN NOT free THEN 'all_busy'
           END;
END
$$;
