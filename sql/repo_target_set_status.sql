-- An operator approves or revokes a target: $1 runner id, $2 target id, $3 new status.
-- Zero rows: the runner has no such target (404).
UPDATE runner_repo_targets SET status = $3
 WHERE runner_id = $1 AND id = $2
RETURNING id
