-- Before an upload: does the runner of token $3 hold job $1 at epoch $2, and is path $4 taken
-- at that epoch (v1.3: each attempt uploads its own files)? No row: the fence missed (the
-- caller asks job_fence_miss why).
SELECT EXISTS (SELECT 1 FROM artifacts a
                WHERE a.job_id = j.id AND a.path = $4 AND a.epoch = j.epoch) AS taken
  FROM jobs j
  JOIN runners r ON r.id = j.leased_by
 WHERE j.id = $1 AND j.epoch = $2 AND j.state = 'leased'
   AND r.token_hash = $3 AND r.revoked_at IS NULL
   AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
