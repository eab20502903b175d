-- Extend leases, fenced and authenticated in one statement. Heartbeats of several runners
-- coalesced by the replica (store::combine) are one call: $1 ids, $2 epochs, $3 sha256(runner
-- token)s, one element per heartbeat, in step; $4 lease ttl ms, $5 how stale (ms) a runner's
-- last_seen_at may get. It moves only lease_expires_at, which no index carries: a HOT update. A
-- heartbeat's row carries its place in the arrays (`ord`, from 1); one with no row missed its
-- fence (the caller asks job_fence_miss why).
WITH beat AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bytea[])
                  WITH ORDINALITY AS x (id, epoch, token_hash, ord)
),
me AS (
    SELECT x.ord, r.id, r.last_seen_at
      FROM beat x JOIN runners r ON r.token_hash = x.token_hash
     WHERE r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
extended AS (
    UPDATE jobs j SET lease_expires_at = now() + $4::bigint * interval '1 millisecond'
      FROM beat x JOIN me ON me.ord = x.ord
     WHERE j.id = x.id AND j.epoch = x.epoch
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING x.ord, j.lease_expires_at
),
-- Best effort: a runner row another transaction holds (a tick, a revoke) is skipped, never
-- waited for, so this statement never waits for a runner after taking a job (one lock order,
-- runners first: docs/design.md); its next call refreshes it.
seen AS (
    UPDATE runners r SET last_seen_at = now()
     WHERE r.id IN (SELECT s.id FROM runners s JOIN me ON s.id = me.id
                     WHERE me.last_seen_at < now() - $5::bigint * interval '1 millisecond'
                     ORDER BY s.id FOR NO KEY UPDATE OF s SKIP LOCKED)
)
SELECT ord, lease_expires_at FROM extended
