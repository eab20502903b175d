-- The workspace feed (contract v1.4, "The workspace feed"): every job event in commit order.
--
-- Each event row records the id of the transaction that wrote it (`xid`, an xid8 taken by a
-- column default, so no statement that appends events changes; raised to its job's previous
-- event's by the trigger below) and its job's workspace (set
-- by the statements that know it, else by the trigger below from the job row). A reader
-- reads only rows whose transaction id is below the snapshot's xmin (every transaction that
-- could still commit a row there has finished) and orders them by (xid, job_id, seq): a row
-- that commits after a later-numbered one is never passed over, because the cursor never
-- moves past a transaction still in progress (docs/contract-notes.md, "The feed's order").
--
-- The events already kept are filed under this migration's transaction (one pass over the
-- table: the columns are added without a default, so adding them rewrites nothing).
ALTER TABLE job_events
    ADD COLUMN workspace text,
    ADD COLUMN xid xid8;

UPDATE job_events e SET workspace = j.workspace, xid = pg_current_xact_id()
  FROM jobs j WHERE j.id = e.job_id;
UPDATE job_events SET xid = pg_current_xact_id() WHERE xid IS NULL;

ALTER TABLE job_events
    ALTER COLUMN xid SET DEFAULT pg_current_xact_id(),
    ALTER COLUMN xid SET NOT NULL;

-- The statements that park or move a job (claim.sql and the sweeps) do not name the
-- workspace: the job row does. A volatile trigger function sees the rows its own statement
-- inserted earlier (job_insert.sql's job, before that job's first event).
--
-- One job's events keep their `seq` order in the feed: a transaction that took its id before
-- another wrote the job's previous event (a dispatcher tick whose reports came first, then a
-- claim of a job parked meanwhile) files its event under that previous event's transaction id.
-- That id is of a transaction already committed (it held the job's row lock first), and a
-- stored id is never below the writer's own, so a reader below the snapshot's xmin still never
-- passes a transaction in progress.
CREATE FUNCTION job_events_feed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    previous xid8;
BEGIN
    IF NEW.workspace IS NULL THEN
        SELECT j.workspace INTO NEW.workspace FROM jobs j WHERE j.id = NEW.job_id;
    END IF;
    SELECT e.xid INTO previous FROM job_events e
     WHERE e.job_id = NEW.job_id ORDER BY e.seq DESC LIMIT 1;
    IF previous > NEW.xid THEN
        NEW.xid := previous;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER job_events_feed BEFORE INSERT ON job_events
    FOR EACH ROW EXECUTE FUNCTION job_events_feed();

-- A page of the feed is one index range per kind it reads (feed_page.sql).
CREATE INDEX job_events_feed ON job_events (workspace, kind, xid, job_id, seq);

-- Where retention has deleted events of a workspace up to: a cursor below it may have missed
-- some and answers 410 gone (feed_pruned.sql). Kept by the trigger below, whoever deletes.
CREATE TABLE feed_pruned (
    workspace text PRIMARY KEY,
    xid       xid8 NOT NULL
);

CREATE FUNCTION job_events_pruned() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO feed_pruned (workspace, xid)
    SELECT g.workspace, (array_agg(g.xid ORDER BY g.xid DESC))[1]
      FROM gone g
     WHERE g.workspace IS NOT NULL
     GROUP BY g.workspace
    ON CONFLICT (workspace) DO UPDATE SET xid = greatest(feed_pruned.xid, EXCLUDED.xid);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_events_pruned AFTER DELETE ON job_events
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job_events_pruned();
