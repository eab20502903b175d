-- Retries (contract v1.2, part B): the rules the reports, the lapse sweep and the retry call
-- share, in one place, and the index the sweeper wakes delayed jobs through.
--
-- A job's `retry` policy is stored as dispatched and normalised: {"limit": 0..10, "on":
-- [reasons], "delay_ms": 0..3600000} (api::jobs validates it), or NULL for none. `retries`
-- counts re-parks (a policy's and POST /v1/jobs/{id}/retry's alike); `attempts` counts the
-- leases of the current try only, so lease_lost still means max_attempts lapses within one try.

-- Whether an attempt that ended for `reason` ('runner_failed', 'exit_code', 'lease_lost') parks
-- the job again: its policy names the reason and fewer than `limit` retries were made.
CREATE FUNCTION job_retries_on(retry jsonb, retries integer, reason text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(retry IS NOT NULL
                    AND retries < (retry ->> 'limit')::integer
                    AND (retry -> 'on') ? reason, false)
$$;

-- Whether a `complete` result reports a failed command: `exit_code` a non-zero JSON integer.
CREATE FUNCTION job_exit_failed(result jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(jsonb_typeof(result -> 'exit_code') = 'number'
                    AND (result ->> 'exit_code') ~ '^-?[0-9]+$'
                    AND (result ->> 'exit_code')::numeric <> 0, false)
$$;

-- When the job re-parked for its `retries`-th retry may be leased: delay_ms × 2^(retries-1)
-- after now, capped at one hour; NULL (at once) when the delay is 0 or there is no policy. The
-- exponent is capped too (2^22 × 1 ms is past the hour already), so no retry count overflows.
CREATE FUNCTION job_retry_not_before(retry jsonb, retries integer) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN COALESCE((retry ->> 'delay_ms')::bigint, 0) > 0 THEN
        now() + least((retry ->> 'delay_ms')::float8
                          * power(2::float8, least(greatest(retries - 1, 0), 22)),
                      3600000::float8) * interval '1 millisecond'
    END
$$;

-- Parked jobs waiting out a retry delay, for the sweep that wakes their runners once it passes
-- (sweep_retry_due.sql). Only delayed jobs are in it: retries are rare, so it stays small.
CREATE INDEX jobs_retry_due ON jobs (not_before)
    WHERE state = 'parked' AND not_before IS NOT NULL;
