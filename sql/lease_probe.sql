-- Is a lease transaction worth running? A read-only look, authenticated like every runner call,
-- that a long-poll takes at the deadline of a wait nothing ended: most such looks find nothing,
-- and a lease transaction that finds nothing still locks the runner row and commits.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner, $5 how stale (ms) last_seen_at
-- may get, $6 where the runner's leases start (as in lease_claim.sql; NULL: not known).
-- $7..$18 where each lane of the runner's queues starts (store::bounds): the pool's plain jobs,
-- the workspace's plain `any` jobs, the pool's constrained jobs, the workspace's constrained
-- `any` jobs, each as (priority, id, xmin) like the claims from places take them, or the head
-- (1001, nil, NULL). Under an old snapshot a look from the head walks every job of the lane
-- taken since that snapshot, and idle runners look at every poll's deadline (docs/design.md,
-- "Where a claim starts"). A lane has a parked job if one is at or after its place, or was
-- parked since the place's xmin (what can land before the place is parked in a transaction that
-- xmin does not precede).
-- No row: the token is not live. Otherwise: free slots (capacity - leases held; an ephemeral
-- runner is always looked at by the full transaction), whether last_seen_at is stale (the
-- transaction refreshes it), and whether any queue it serves has a parked job.
SELECT r.ephemeral,
       (r.capacity - (SELECT count(*) FROM jobs
                       WHERE leased_by = $2 AND state = 'leased'
                         AND leased_at >= CASE WHEN $6::timestamptz <= now() THEN $6::timestamptz
                                               ELSE '-infinity'::timestamptz END))::integer
           AS capacity_free,
       (r.last_seen_at IS NULL
        OR r.last_seen_at < now() - $5::bigint * interval '1 millisecond') AS stale,
       -- Each look is ordered like its claim, so it walks the claim index (a plain EXISTS,
       -- whose ORDER BY the planner drops, may walk the listing index through a workspace's
       -- history instead); the parks since a place, like the claims, through their own index.
       ((SELECT id FROM jobs WHERE runner_id = $2 AND state = 'parked'
          ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        -- the pool's plain jobs: from the place on, then the parks since its xmin.
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND priority = $7 AND id >= $8
             ORDER BY id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND priority < $7
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND parked_xid >= $9::text::xid8
             ORDER BY parked_xid LIMIT 1) IS NOT NULL
        -- the workspace's plain `any` jobs: from the place on, then the parks since its xmin.
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND priority = $10 AND id >= $11
             ORDER BY id LIMIT 1) IS NOT NULL)
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND priority < $10
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL)
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
               AND parked_xid >= $12::text::xid8
             ORDER BY parked_xid LIMIT 1) IS NOT NULL)
        -- the pool's constrained jobs: from the place on, then the parks since its xmin.
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND priority = $13 AND id >= $14
             ORDER BY id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND priority < $13
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND parked_xid >= $15::text::xid8
             ORDER BY parked_xid LIMIT 1) IS NOT NULL
        -- the workspace's constrained `any` jobs: from the place on, then the parks since its xmin.
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND priority = $16 AND id >= $17
             ORDER BY id LIMIT 1) IS NOT NULL)
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND priority < $16
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL)
        OR ($4 LIKE 'ws:%' AND (SELECT id FROM jobs
             WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
               AND parked_xid >= $18::text::xid8
             ORDER BY parked_xid LIMIT 1) IS NOT NULL)) AS parked
  FROM runners r
 WHERE r.token_hash = $1 AND r.id = $2 AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
