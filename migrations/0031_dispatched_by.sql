-- Who a job's secrets are checked against at every hand-over (contract v1.3, "Secrets at every
-- hand-over"): the subject and role of the API key of the last dispatch or retry call, set by
-- job_insert.sql and job_retry.sql. A lease of a job naming a `dispatch: admin` secret whose
-- dispatcher is not an admin rejects it `secret_forbidden`. Jobs parked before this migration
-- have neither: they are checked as a member's (an admin re-runs one with the retry call).
ALTER TABLE jobs
    ADD COLUMN dispatcher_subject text,
    ADD COLUMN dispatcher_role text CHECK (dispatcher_role IN ('member', 'admin'));
