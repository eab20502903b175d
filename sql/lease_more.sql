-- Whether pool jobs are still parked on a runner's queues after its claim: its owner's pool and,
-- for a workspace runner, the workspace's 'any' jobs, of either claim class (another runner may
-- run what this one cannot). Sent after lease_claim.sql (from the head) in the same
-- lease transaction, and only by a woken waiter, which passes its wake on when this is true:
-- its own snapshot follows the claim's, so the jobs the claim took are already leased to it.
-- Kept out of the claims because a plan's every node is initialised on each execution, used or
-- not: inside the claim these four scans cost every lease call (docs/perf.md, "Round 8").
-- Each look is ordered like its claim, as in lease_probe.sql, so it walks the claim index (a
-- plain EXISTS, whose ORDER BY the planner drops, may walk the listing index instead).
-- $1 the runner's workspace, $2 its owner.
SELECT (SELECT id FROM jobs
         WHERE workspace = $1 AND owner = $2 AND runner_id IS NULL AND state = 'parked'
           AND job_claim_class(required_capabilities, source_key) = 0
         ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
    OR (SELECT id FROM jobs
         WHERE workspace = $1 AND owner = $2 AND runner_id IS NULL AND state = 'parked'
           AND job_claim_class(required_capabilities, source_key) = 1
         ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
    OR ($2 LIKE 'ws:%'
        AND ((SELECT id FROM jobs WHERE workspace = $1 AND pool = 'any' AND state = 'parked'
                AND job_claim_class(required_capabilities, source_key) = 0
              ORDER BY priority DESC, id LIMIT 1) IS NOT NULL
             OR (SELECT id FROM jobs WHERE workspace = $1 AND pool = 'any' AND state = 'parked'
                   AND job_claim_class(required_capabilities, source_key) = 1
                 ORDER BY priority DESC, id LIMIT 1) IS NOT NULL))
       AS more
