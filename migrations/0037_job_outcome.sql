-- A job's outcome (v1.3, "Outcome"), what `GET /v1/jobs?outcome=` filters on: NULL while the
-- job is live; 'succeeded' when it completed and its result names no exit_code, or exit_code 0;
-- 'failed' when its state is failed, or it completed with any other exit_code (a number other
-- than 0, null, or anything else: the runner reports a command killed by a signal with a null
-- exit_code); 'cancelled' and 'rejected' as the state says. The same rule as
-- `domain::state::outcome` in Rust, which makes the Job view's field; tests/it/outcome.rs
-- checks the two agree. Computed, not stored: nothing on the hot path writes it.
CREATE FUNCTION job_outcome(state text, result jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN state = 'completed' THEN
            CASE WHEN jsonb_typeof(result) = 'object' AND result ? 'exit_code'
                      AND result -> 'exit_code' IS DISTINCT FROM '0'::jsonb
                 THEN 'failed' ELSE 'succeeded' END
        WHEN state IN ('failed', 'cancelled', 'rejected') THEN state
    END
$$;
