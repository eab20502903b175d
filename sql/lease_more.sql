-- Whether pool jobs are still parked on a runner's queues after its claim: its owner's pool and,
-- for a workspace runner, the workspace's 'any' jobs, of either claim class (another runner may
-- run what this one cannot). Sent after lease_claim.sql or lease_claim_plain.sql in the same
-- lease transaction, and only by a woken waiter, which passes its wake on when this is true:
-- its own snapshot follows the claim's, so the jobs the claim took are already leased to it.
-- Kept out of the claims because a plan's every node is initialised on each execution, used or
-- not: inside the claim these four scans cost every lease call (docs/perf.md, "Round 8").
-- $1 the runner's workspace, $2 its owner.
SELECT EXISTS (SELECT 1 FROM jobs j
                WHERE j.workspace = $1 AND j.owner = $2 AND j.runner_id IS NULL
                  AND j.state = 'parked'
                  AND job_claim_class(j.required_capabilities, j.source_key) = 0)
    OR EXISTS (SELECT 1 FROM jobs j
                WHERE j.workspace = $1 AND j.owner = $2 AND j.runner_id IS NULL
                  AND j.state = 'parked'
                  AND job_claim_class(j.required_capabilities, j.source_key) = 1)
    OR ($2 LIKE 'ws:%'
        AND (EXISTS (SELECT 1 FROM jobs j
                      WHERE j.workspace = $1 AND j.pool = 'any' AND j.state = 'parked'
                        AND job_claim_class(j.required_capabilities, j.source_key) = 0)
             OR EXISTS (SELECT 1 FROM jobs j
                         WHERE j.workspace = $1 AND j.pool = 'any' AND j.state = 'parked'
                           AND job_claim_class(j.required_capabilities, j.source_key) = 1)))
       AS more
