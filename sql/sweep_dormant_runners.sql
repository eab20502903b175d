-- The dormancy ceiling: runners unseen (or never seen since pairing) for $2 ms are revoked;
-- the caller then re-parks or rejects their jobs with runner_revoke_jobs, as for any
-- revocation. Within the ceiling a dormant runner keeps its pairing. $1 batch size.
UPDATE runners SET revoked_at = now()
 WHERE id IN (SELECT id FROM runners
               WHERE revoked_at IS NULL
                 AND COALESCE(last_seen_at, created_at) < now() - $2::bigint * interval '1 millisecond'
               LIMIT $1
                 FOR UPDATE SKIP LOCKED)
RETURNING id
