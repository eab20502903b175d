-- Idempotency keys of POST /v1/jobs/{id}/retry (contract v1.2, part B): the first retry call
-- of a job with a key wins, and a repeat with that key answers the job as it is, retrying
-- nothing. Scoped to the job (a key means "this retry of this job"), and deleted with it.
CREATE TABLE job_retry_keys (
    job_id      uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    key         text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, key)
);
