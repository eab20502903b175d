-- First statement of a lease transaction, and its authentication: find the live runner by
-- $1 sha256(token) and lock its row, so concurrent lease calls of one runner serialise and
-- capacity holds; mark it seen; replace its advertised capabilities when the call carries them
-- ($2, NULL keeps). An ephemeral runner whose first job has settled is not found.
UPDATE runners r
   SET last_seen_at = now(),
       capabilities = COALESCE($2, r.capabilities)
 WHERE r.token_hash = $1
   AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND r.ephemeral_job IS NOT NULL AND EXISTS (
           SELECT 1 FROM jobs j
            WHERE j.id = r.ephemeral_job
              AND j.state IN ('completed', 'failed', 'cancelled', 'rejected')))
RETURNING r.id, r.owner, r.capabilities, r.capacity, r.ephemeral, r.ephemeral_job
