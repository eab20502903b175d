-- One claim statement (issue 37): lease_claim.sql reads every lane of a runner's queues (the
-- pool's or the workspace's `any` jobs, plain or constrained: migration 0012) with one scan per
-- queue, the class a parameter of each lane. Where a lane starts (migrations 0013, 0016) it
-- finds the jobs parked since its place's xmin; the four indexes of those parks were each partial
-- on one class, which a scan whose class is a parameter cannot use. They are replaced by two with
-- the class as a key column: the same entries (a job is of one class), one index per queue kind.
-- `parked_xid IS NOT NULL` is kept for migration 0016's reason: only a statement that asks for
-- parks since an xid may be planned on them.
DROP INDEX jobs_parked_since_pool;
DROP INDEX jobs_parked_since_any;
DROP INDEX jobs_parked_since_pool_constrained;
DROP INDEX jobs_parked_since_any_constrained;
CREATE INDEX jobs_parked_since_pool
    ON jobs (workspace, owner, job_claim_class(required_capabilities, source_key), parked_xid)
    WHERE state = 'parked' AND runner_id IS NULL AND parked_xid IS NOT NULL;
CREATE INDEX jobs_parked_since_any
    ON jobs (workspace, job_claim_class(required_capabilities, source_key), parked_xid)
    WHERE state = 'parked' AND pool = 'any' AND parked_xid IS NOT NULL;
