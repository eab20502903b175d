-- First statement of a lease transaction, and its authentication: find the live runner by
-- $1 sha256(token) and lock its row, so concurrent lease calls of one runner serialise and
-- capacity holds; mark it seen; record what the call advertises (NULL keeps): $2 capabilities,
-- $3 exclusive set (its names always also advertised capabilities), $4 version. No row: the token is not live (unknown, revoked, spent).
UPDATE runners r
   SET last_seen_at = now(),
       capabilities = CASE WHEN $2::text[] IS NULL AND $3::text[] IS NULL THEN r.capabilities
                           ELSE ARRAY(SELECT DISTINCT c
                                        FROM unnest(COALESCE($2, r.capabilities)
                                                    || COALESCE($3, r.exclusive)) AS c
                                       ORDER BY c) END,
       exclusive = COALESCE($3, r.exclusive),
       version = COALESCE($4, r.version)
 WHERE r.token_hash = $1
   AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
RETURNING r.id, r.owner, r.workspace, r.version
