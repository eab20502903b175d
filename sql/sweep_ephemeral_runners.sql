-- Ephemeral runners unseen (or never seen) for $2 ms are purged by revocation; the caller then
-- re-parks or rejects their jobs with runner_revoke_jobs. $1 batch size.
UPDATE runners SET revoked_at = now()
 WHERE id IN (SELECT id FROM runners
               WHERE ephemeral AND revoked_at IS NULL
                 AND COALESCE(last_seen_at, created_at) < now() - $2::bigint * interval '1 millisecond'
               LIMIT $1
                 FOR UPDATE SKIP LOCKED)
RETURNING id
