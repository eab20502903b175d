-- First statement of a lease transaction, and its authentication: find the live runner by
-- $1 sha256(token) and lock its row, so concurrent lease calls of one runner serialise and
-- capacity holds; mark it seen; record what the call advertises (NULL keeps): $2 capabilities,
-- $3 exclusive set, $4 version. No row: the token is not live (unknown, revoked, spent).
UPDATE runners r
   SET last_seen_at = now(),
       capabilities = COALESCE($2, r.capabilities),
       exclusive = COALESCE($3, r.exclusive),
       version = COALESCE($4, r.version)
 WHERE r.token_hash = $1
   AND r.revoked_at IS NULL
   AND NOT runner_spent(r.ephemeral, r.ephemeral_job)
RETURNING r.id, r.owner, r.workspace, r.version
