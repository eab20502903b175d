-- One CHECK on the job row instead of ten (issue 19, the fresh path's fixed costs). PostgreSQL
-- reads a table's CHECK constraints from their stored text, and plans and compiles them again,
-- in every statement that writes the table: with ten of them (7,700 characters of node text),
-- that was 45 µs of every insert and of every update, three times a job, against 19 µs for a
-- plain insert of the same row (docs/perf.md, "Round 6"). The rules are unchanged; they now
-- live in one PL/pgSQL function, which the constraint calls with the columns it reads (a short
-- expression to read back), and whose body PL/pgSQL keeps compiled for the session.
--
-- The function must answer false, never NULL, for a row the old constraints refused (a CHECK
-- that yields NULL passes): every column it reads that may be NULL is tested with IS NULL.
--
-- NOT VALID: every existing row met the ten constraints that this one conjoins, so there is
-- nothing to find, and validating here would hold the table's exclusive lock through a read of
-- every job. New and updated rows are checked from now on; `ALTER TABLE jobs VALIDATE
-- CONSTRAINT jobs_row_valid` may be run at any time without blocking writes.
CREATE FUNCTION job_row_valid(state text, pool text, runner_id uuid, priority integer,
                              max_attempts integer, epoch bigint, attempts integer,
                              lease_expires_at timestamptz, finished_at timestamptz,
                              traceparent text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN state IN ('parked', 'leased', 'completed', 'failed', 'cancelled', 'rejected')
       -- A lease has an expiry exactly while the job is leased ...
       AND (state = 'leased') = (lease_expires_at IS NOT NULL)
       -- ... and a job is finished exactly when it is settled.
       AND (state IN ('parked', 'leased')) = (finished_at IS NULL)
       -- A job is for a named runner, or for a pool.
       AND (pool IS NULL OR pool IN ('personal', 'workspace', 'any'))
       AND (runner_id IS NULL) = (pool IS NOT NULL)
       AND priority BETWEEN -1000 AND 1000
       AND max_attempts BETWEEN 1 AND 100
       AND epoch >= 0
       AND attempts >= 0
       AND (traceparent IS NULL OR length(traceparent) <= 128);
END
$$;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_state_check,
    DROP CONSTRAINT jobs_priority_check,
    DROP CONSTRAINT jobs_epoch_check,
    DROP CONSTRAINT jobs_attempts_check,
    DROP CONSTRAINT jobs_max_attempts_check,
    DROP CONSTRAINT jobs_check,
    DROP CONSTRAINT jobs_check1,
    DROP CONSTRAINT jobs_pool_check,
    DROP CONSTRAINT jobs_pool_or_named,
    DROP CONSTRAINT jobs_traceparent_check,
    ADD CONSTRAINT jobs_row_valid
        CHECK (job_row_valid(state, pool, runner_id, priority, max_attempts, epoch, attempts,
                             lease_expires_at, finished_at, traceparent)) NOT VALID;
