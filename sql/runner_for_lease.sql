-- Who a lease call's token is, for a replica that has not seen it (hub::long_poll): $1
-- sha256(token). What it advertises (capabilities, exclusive set, approved sources, sorted)
-- groups it with the runners of its class (claim.sql). No row: the token is not live
-- (unknown, revoked, or an ephemeral runner whose job has settled).
SELECT r.id, r.workspace, r.owner, r.capabilities, r.exclusive, runner_sources(r.id) AS sources
  FROM runners r
 WHERE r.token_hash = $1 AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
