-- Extend a lease, fenced and authenticated in one statement: $1 id, $2 epoch,
-- $3 sha256(runner token), $4 lease ttl ms, $5 how stale (ms) last_seen_at may get.
-- It moves only lease_expires_at, which no index carries: a HOT update. No row: the fence
-- missed (the caller asks job_fence_miss why).
WITH me AS (
    SELECT r.id, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
extended AS (
    UPDATE jobs j SET lease_expires_at = now() + $4::bigint * interval '1 millisecond'
      FROM me
     WHERE j.id = $1 AND j.epoch = $2
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.lease_expires_at
),
seen AS (
    UPDATE runners r SET last_seen_at = now()
      FROM me WHERE r.id = me.id AND me.last_seen_at < now() - $5::bigint * interval '1 millisecond'
)
SELECT lease_expires_at FROM extended
