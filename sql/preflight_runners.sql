-- Runners of a target advertising every required capability: $1 owner (pool target) or NULL,
-- $2 runner id (named target) or NULL, $3 required capabilities, $4 presence window ms.
-- `usable` leaves out outdated runners (they could not take the job); `online` counts the
-- usable ones seen within the presence window.
SELECT count(*) AS matching,
       count(*) FILTER (WHERE NOT r.outdated) AS usable,
       count(*) FILTER (WHERE NOT r.outdated
                          AND runner_presence(r.last_seen_at, $4) = 'online') AS online
  FROM runners r
 WHERE r.revoked_at IS NULL
   AND (r.id = $2 OR ($2::uuid IS NULL AND r.owner = $1))
   AND $3::text[] <@ r.capabilities
