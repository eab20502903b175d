-- A claim of the constrained class that starts past the jobs already taken (issue 19, round 12).
-- Migration 0013 let a claim start each queue's plain class at a remembered place under an old
-- snapshot; the constrained class (jobs that require a capability or a repository source, which
-- is what a runner's labels serve) was still read from its head, through one index entry per
-- job of that class taken since the snapshot. lease_claim_from.sql now keeps a place for that
-- class too: the first constrained job parked, whoever can run it, so that one place serves
-- every runner of the queue. As for the plain class, a job that becomes parked before the place
-- later does so in a transaction the place's snapshot did not see, and the claim reads those
-- (parked_xid at least the place's xmin) through the two indexes below: the recent parks of the
-- class only, a short range at the end of each.
--
-- Each constrained park gains one index entry in each; plain jobs are not in them.
--
-- `parked_xid IS NOT NULL` keeps these indexes to the statements that ask for parks since an
-- xid (a strict comparison on parked_xid implies it; a row parked before migration 0013 has
-- none, and is older than any place). Without it a claim's ordered walk of the constrained class
-- (by priority, from its place) may be planned on this index instead of jobs_claim_pool, with
-- priority and id as a filter and a sort on top: a generic plan on statistics that see hardly
-- any parked job did exactly that, and read every constrained job taken since the snapshot.
--
-- The plain class's indexes (migration 0013) are built again with the same predicate, for the
-- same reason: a generic plan walked a plain lane from its place on jobs_parked_since_pool.
DROP INDEX jobs_parked_since_pool;
CREATE INDEX jobs_parked_since_pool
    ON jobs (workspace, owner, parked_xid)
    WHERE state = 'parked' AND runner_id IS NULL AND parked_xid IS NOT NULL
      AND job_claim_class(required_capabilities, source_key) = 0;
DROP INDEX jobs_parked_since_any;
CREATE INDEX jobs_parked_since_any
    ON jobs (workspace, parked_xid)
    WHERE state = 'parked' AND pool = 'any' AND parked_xid IS NOT NULL
      AND job_claim_class(required_capabilities, source_key) = 0;
CREATE INDEX jobs_parked_since_pool_constrained
    ON jobs (workspace, owner, parked_xid)
    WHERE state = 'parked' AND runner_id IS NULL AND parked_xid IS NOT NULL
      AND job_claim_class(required_capabilities, source_key) = 1;
CREATE INDEX jobs_parked_since_any_constrained
    ON jobs (workspace, parked_xid)
    WHERE state = 'parked' AND pool = 'any' AND parked_xid IS NOT NULL
      AND job_claim_class(required_capabilities, source_key) = 1;
