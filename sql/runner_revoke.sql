-- Revoke a runner: $1 id, $2 the owner the route may touch, $3 the caller's workspace. Takes the
-- runner row lock, so a lease transaction of this runner in flight commits first and
-- runner_revoke_jobs, run next in the same transaction, sees every lease it took. Zero rows:
-- unknown, not this owner's in this workspace, or already revoked (all 404).
UPDATE runners SET revoked_at = now()
 WHERE id = $1 AND owner = $2 AND workspace = $3 AND revoked_at IS NULL
RETURNING id
