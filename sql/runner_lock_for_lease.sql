-- First statement of a lease transaction: lock the runner row (so concurrent lease calls of one
-- runner serialise and capacity holds), mark it seen, and replace its advertised capabilities
-- when the call carries them. $1 id, $2 capabilities or NULL to keep.
UPDATE runners r
   SET last_seen_at = now(),
       capabilities = COALESCE($2, r.capabilities)
 WHERE r.id = $1 AND r.revoked_at IS NULL
RETURNING r.owner, r.capabilities, r.capacity, r.ephemeral, r.ephemeral_job
