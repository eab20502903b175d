-- The job that first used an Idempotency-Key: $1 workspace, $2 key.
SELECT * FROM jobs WHERE workspace = $1 AND idempotency_key = $2
