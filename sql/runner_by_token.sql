-- Authenticate a runner token: $1 sha256(token). A revoked runner, or an ephemeral one whose
-- first job has settled, is not found.
SELECT r.id, r.owner, r.workspace, r.ephemeral
  FROM runners r
 WHERE r.token_hash = $1
   AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
