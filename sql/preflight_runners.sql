-- Runners of a target in workspace $5 that could take a job: $1 owner (pool target) or NULL,
-- $2 runner id (named target) or NULL, $3 required capabilities, $4 presence window ms,
-- $6 whether the target is the 'any' pool (then the workspace's runners count too).
SELECT count(*) AS matching,
       count(*) FILTER (WHERE runner_presence(r.last_seen_at, $4) = 'online') AS online
  FROM runners r
 WHERE r.revoked_at IS NULL AND r.workspace = $5
   AND (r.id = $2
        OR ($2::uuid IS NULL AND r.owner = $1)
        OR ($6::boolean AND r.owner = 'ws:' || $5))
   AND $3::text[] <@ r.capabilities
   AND r.exclusive <@ $3::text[]
