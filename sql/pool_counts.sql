-- GET /v1/pool: over the runners the caller may target in workspace $3 (its personal runners,
-- owner $1, and the workspace's, owner $2); jobs of that workspace on those owners' queues.
-- $4 presence window ms.
WITH targetable AS (
    SELECT r.capacity,
           runner_presence(r.last_seen_at, $4) AS presence,
           (SELECT count(*) FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased') AS active
      FROM runners r
     WHERE r.workspace = $3 AND r.owner IN ($1, $2) AND r.revoked_at IS NULL
)
SELECT count(*) FILTER (WHERE presence = 'online')                        AS online,
       count(*) FILTER (WHERE presence = 'dormant')                       AS dormant,
       count(*) FILTER (WHERE presence = 'never')                         AS never,
       COALESCE(sum(capacity) FILTER (WHERE presence = 'online'), 0)::bigint AS slot_capacity,
       COALESCE(sum(active) FILTER (WHERE presence = 'online'), 0)::bigint   AS slot_active,
       (SELECT count(*) FROM jobs
         WHERE workspace = $3 AND owner IN ($1, $2) AND state = 'parked')   AS parked,
       (SELECT count(*) FROM jobs
         WHERE workspace = $3 AND owner IN ($1, $2) AND state = 'leased')   AS leased
  FROM targetable
