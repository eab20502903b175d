-- Runners of a target in workspace $5 that could take a job: $1 owner (pool target) or NULL,
-- $2 runner id (named target) or NULL, $3 required capabilities, $4 presence window ms,
-- $6 whether the target is the 'any' pool (then the workspace's runners count too), $7 the
-- job's source key (provider || ' ' || repository) or NULL.
-- `matching`: runners advertising every required capability and requiring no exclusive name the
-- job does not (job_fits with no source and no workspace-only secret: the claim's rule); `usable`: of those, the ones not outdated and, for a source, holding an approved
-- target for it (they could take the job); `online`: the usable ones seen within the window;
-- `sourced`: matching runners holding an approved target for the source (all when none).
SELECT count(*) AS matching,
       count(*) FILTER (WHERE NOT r.outdated AND approved) AS usable,
       count(*) FILTER (WHERE NOT r.outdated AND approved
                          AND runner_presence(r.last_seen_at, $4) = 'online') AS online,
       count(*) FILTER (WHERE approved) AS sourced,
       count(*) FILTER (WHERE NOT r.outdated) AS current
  FROM runners r,
       LATERAL (SELECT $7::text IS NULL OR EXISTS (
                    SELECT 1 FROM runner_repo_targets t
                     WHERE t.runner_id = r.id AND t.status = 'approved'
                       AND t.provider || ' ' || t.repository = $7::text) AS approved) AS a
 WHERE r.revoked_at IS NULL AND r.workspace = $5
   AND (r.id = $2
        OR ($2::uuid IS NULL AND r.owner = $1)
        OR ($6::boolean AND r.owner = 'ws:' || $5))
   AND job_fits($3::text[], NULL, false, r.capabilities, r.exclusive, '{}', true)
