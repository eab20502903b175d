-- Retries whose delay has passed: $1 batch size. The claims already lease a parked job once its
-- not_before is past (they compare it with now()); this clears it, so the Job view shows it
-- null again, and returns the jobs so that the sweeper wakes a runner for each (nothing else
-- happens when a delay ends, so nothing else would wake one). Safe on every replica at once:
-- SKIP LOCKED, through jobs_retry_due (migration 0024).
WITH due AS (
    SELECT id FROM jobs
     WHERE state = 'parked' AND not_before IS NOT NULL AND not_before <= now()
     ORDER BY not_before
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
woken AS (
    UPDATE jobs j SET not_before = NULL
      FROM due
     WHERE j.id = due.id AND j.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.needs_workspace_runner,
              j.priority, j.required_capabilities, j.source_key
)
SELECT * FROM woken
