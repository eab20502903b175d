-- Authenticate a runner token: $1 sha256(token), $2 how stale last_seen_at may get (ms) before
-- the caller refreshes it. A revoked runner, or an ephemeral one whose first job has settled,
-- is not found.
SELECT r.id, r.owner, r.workspace, r.ephemeral,
       (r.last_seen_at IS NULL OR r.last_seen_at < now() - $2::bigint * interval '1 millisecond') AS stale
  FROM runners r
 WHERE r.token_hash = $1
   AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
