-- Why a fenced runner call matched nothing: $1 job id, $2 the runner's owner. No row: the job is
-- not visible to this runner (404); a terminal state: 409 job_terminal; else lease_superseded.
SELECT state FROM jobs WHERE id = $1 AND owner = $2
