-- The safety net for lost notifications (hub::dispatcher): of the lanes this replica has
-- waiting runners on, those with a job parked and due, and where the first such job stands
-- (its -priority and id: a remembered place moves back only that far). $1 lanes of jobs_claim
-- (named and pool), $2 `any` lanes of jobs_claim_any (migration 0040). One statement per
-- replica per recheck interval, however many runners wait; each lane one probe of its index in
-- its order (a lateral with a LIMIT: never a join that walks a whole index).
SELECT l.lane, parked.neg, parked.id FROM unnest($1::text[]) AS l (lane) CROSS JOIN LATERAL (
    SELECT -j.priority AS neg, j.id FROM jobs j
     WHERE j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
       AND job_lane(j.workspace, j.owner, j.runner_id, j.pool, j.needs_workspace_runner,
                    j.required_capabilities, j.source_key) = l.lane
     ORDER BY -j.priority, j.id LIMIT 1) AS parked
UNION ALL
SELECT l.lane, parked.neg, parked.id FROM unnest($2::text[]) AS l (lane) CROSS JOIN LATERAL (
    SELECT -j.priority AS neg, j.id FROM jobs j
     WHERE j.state = 'parked' AND j.pool = 'any' AND NOT j.needs_workspace_runner
       AND (j.not_before IS NULL OR j.not_before <= now())
       AND job_any_lane(j.workspace, j.required_capabilities, j.source_key) = l.lane
     ORDER BY -j.priority, j.id LIMIT 1) AS parked
