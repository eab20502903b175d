-- The job a retry call with this Idempotency-Key already retried: $1 job id, $2 key, $3 the
-- caller's workspace. No row: the key was not used on this job (or the job is not visible).
SELECT j.* FROM job_retry_keys k JOIN jobs j ON j.id = k.job_id
 WHERE k.job_id = $1 AND k.key = $2 AND j.workspace = $3
