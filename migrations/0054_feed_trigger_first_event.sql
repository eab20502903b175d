-- The feed's trigger (migration 0050) read two rows for every event: its job's workspace when
-- the statement did not name it, and the job's previous event's transaction id. A job's first
-- event (seq 1, its dispatch) has no previous event, and the hot statements (dispatch, claim,
-- complete, fail) now name the workspace: a dispatched, leased and completed job costs one
-- read here instead of six (the throughput bench's PostgreSQL time a job, docs/perf.md).
CREATE OR REPLACE FUNCTION job_events_feed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    previous xid8;
BEGIN
    IF NEW.workspace IS NULL THEN
        SELECT j.workspace INTO NEW.workspace FROM jobs j WHERE j.id = NEW.job_id;
    END IF;
    IF NEW.seq > 1 THEN
        SELECT e.xid INTO previous FROM job_events e
         WHERE e.job_id = NEW.job_id ORDER BY e.seq DESC LIMIT 1;
        IF previous > NEW.xid THEN
            NEW.xid := previous;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
