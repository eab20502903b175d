-- A claim that starts past the jobs already taken (issue 19, the soak). A claim used to read its
-- queue's claim index from the head, so it walked one entry per job taken since the oldest
-- snapshot any session holds: an entry leaves the index only once its row version is dead to
-- every snapshot, so an hour-long analytics query made every claim read an hour of taken jobs
-- (docs/perf.md, "The soak under an open snapshot").
--
-- A replica now remembers, per queue, where its last plain claim found the first parked job
-- (store::bounds), and the next plain claim starts there. What it must not miss are jobs that
-- became parked since, before that place: a job released, re-delivered or given back, one
-- dispatched with a higher priority, one whose UUIDv7 came from a clock behind. Each of those
-- became parked in a transaction that the remembered claim's snapshot did not see, so its xid
-- is at least that snapshot's xmin. `parked_xid` records the xid of the transaction that last
-- made a job parked, and the claim reads the jobs parked since the remembered xmin through the
-- two indexes below (recent parks only: a short range at the end of each).
--
-- No rewrite: the column is added without a default, then given one for new rows. Rows parked
-- before this migration have none, and are older than any remembered place.
ALTER TABLE jobs ADD COLUMN parked_xid xid8;
ALTER TABLE jobs ALTER COLUMN parked_xid SET DEFAULT pg_current_xact_id();

CREATE INDEX jobs_parked_since_pool
    ON jobs (workspace, owner, parked_xid)
    WHERE state = 'parked' AND runner_id IS NULL
      AND job_claim_class(required_capabilities, source_key) = 0;
CREATE INDEX jobs_parked_since_any
    ON jobs (workspace, parked_xid)
    WHERE state = 'parked' AND pool = 'any'
      AND job_claim_class(required_capabilities, source_key) = 0;
