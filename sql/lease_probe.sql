-- Is a lease transaction worth running? A read-only look, authenticated like every runner call,
-- that a long-poll takes at the deadline of a wait nothing ended: most such looks find nothing,
-- and a lease transaction that finds nothing still locks the runner row and commits.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner, $5 how stale (ms) last_seen_at
-- may get, $6 where the runner's leases start (as in lease_claim.sql; NULL: not known).
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
       -- history instead).
       ((SELECT id FROM jobs WHERE runner_id = $2 AND state = 'parked'
          ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        -- A pool claim index holds each claim class apart (migration 0012): look at both.
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 0
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        OR (SELECT id FROM jobs
             WHERE workspace = $3 AND owner = $4 AND runner_id IS NULL AND state = 'parked'
               AND job_claim_class(required_capabilities, source_key) = 1
             ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
        OR ($4 LIKE 'ws:%'
            AND ((SELECT id FROM jobs WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
                    AND job_claim_class(required_capabilities, source_key) = 0
                  ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
                 OR (SELECT id FROM jobs WHERE workspace = $3 AND pool = 'any' AND state = 'parked'
                       AND job_claim_class(required_capabilities, source_key) = 1
                     ORDER BY priority DESC, id LIMIT 1) IS NOT NULL))) AS parked
  FROM runners r
 WHERE r.token_hash = $1 AND r.id = $2 AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
