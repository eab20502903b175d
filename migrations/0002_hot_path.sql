-- leasehold schema, v1.1: a lean hot row, the workspace-scoped queue key, placement columns.
--
-- What every transition pays for is the set of index entries its new row version needs
-- (shared/PERF-FACTS.md 7 and 9). The job row keeps only partial indexes on live states beside
-- its primary key and the listing index, so a transition writes entries only into the indexes
-- whose predicate the new row meets, and a heartbeat (which moves no indexed column) is a HOT
-- update.

-- 1. The queue key is (workspace, owner, runner_id) (PROTOCOL.md v1.1, Words): a personal runner
--    serves its owner only in the workspace it was paired or enrolled in. Existing rows need no
--    rewrite: jobs and runners already carry their workspace; every statement now matches on it.
DROP INDEX jobs_claim_pool;
CREATE INDEX jobs_claim_pool ON jobs (workspace, owner, priority DESC, id)
    WHERE state = 'parked' AND runner_id IS NULL;
DROP INDEX runners_live_by_owner;
CREATE INDEX runners_live_by_owner ON runners (workspace, owner)
    WHERE revoked_at IS NULL AND owner IS NOT NULL;
-- (`owner IS NOT NULL` is always true; it keeps a token look-up, which never names the owner,
-- from scanning this index whole when statistics say the table is empty: see 5.)
DROP INDEX runners_live_by_workspace;
CREATE INDEX runners_live_by_workspace ON runners (workspace)
    WHERE revoked_at IS NULL AND workspace IS NOT NULL;

-- 2. Which pool a pool job was dispatched to; NULL for a job named for a runner. An 'any' job is
--    owned by its dispatching subject and may also be taken by the workspace's runners, whose
--    claim reads it through jobs_claim_any.
ALTER TABLE jobs ADD COLUMN pool text CHECK (pool IN ('personal', 'workspace', 'any'));
UPDATE jobs SET pool = CASE WHEN owner LIKE 'ws:%' THEN 'workspace' ELSE 'personal' END
 WHERE runner_id IS NULL;
ALTER TABLE jobs ADD CONSTRAINT jobs_pool_or_named CHECK ((runner_id IS NULL) = (pool IS NOT NULL));
CREATE INDEX jobs_claim_any ON jobs (workspace, priority DESC, id)
    WHERE state = 'parked' AND pool = 'any';

-- 3. Placement and trust (v1.1): secrets a job names, its repository source (source_key is
--    provider || ' ' || repository, compared with a runner's approved targets), a runner's
--    exclusive (canary) set, and the repository targets runners advertise.
ALTER TABLE jobs ADD COLUMN secrets text[] NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN source jsonb;
ALTER TABLE jobs ADD COLUMN source_key text;
ALTER TABLE runners ADD COLUMN exclusive text[] NOT NULL DEFAULT '{}';
CREATE TABLE runner_repo_targets (
    id          uuid        PRIMARY KEY,
    runner_id   uuid        NOT NULL REFERENCES runners (id),
    provider    text        NOT NULL,
    repository  text        NOT NULL,
    label       text,
    status      text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'approved', 'revoked')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (runner_id, provider, repository)
);

-- 4. Lease expiry without an index on the column a heartbeat moves. The sweeper walks
--    lease_check_at (set at lease time, moved only by the sweeper) and compares
--    lease_expires_at, which heartbeats extend with a HOT update.
ALTER TABLE jobs ADD COLUMN lease_check_at timestamptz;
UPDATE jobs SET lease_check_at = lease_expires_at WHERE state = 'leased';
DROP INDEX jobs_lease_expiry;
CREATE INDEX jobs_lease_check ON jobs (lease_check_at)
    WHERE state = 'leased' AND lease_check_at IS NOT NULL;

-- 5. Sweeper indexes that no other statement may borrow. A partial index whose predicate a
--    query implies can be scanned whole as a cheap source of "all parked rows" (then sorted),
--    and a generic plan picks that whenever statistics make a queue look big: the claim once
--    read every parked job that way. The extra `IS NOT NULL` is implied only by the sweeper's
--    own `<= now()` conditions (docs/perf.md, "plans").
DROP INDEX jobs_no_runner_check;
CREATE INDEX jobs_no_runner_check ON jobs (no_runner_check_at)
    WHERE state = 'parked' AND no_runner_check_at IS NOT NULL;
-- The same for the listing index: a statement that reaches jobs by id alone must use the
-- primary key, never walk this one for the id column it also carries.
DROP INDEX jobs_by_workspace;
CREATE INDEX jobs_by_workspace ON jobs (workspace, id) WHERE workspace IS NOT NULL;

-- 6. Events are appended only by the statement that just changed or fenced their job, and jobs
--    are never deleted: the foreign key's per-row check (an index probe and a KEY SHARE row
--    lock on the job) buys nothing.
ALTER TABLE job_events DROP CONSTRAINT job_events_job_id_fkey;
ALTER TABLE job_events SET (autovacuum_vacuum_insert_scale_factor = 0.05);

-- 7. One definition of "an ephemeral runner whose first job has settled": its token is dead.
--    Its sub-select keeps the planner from inlining it, so callers guard the call with
--    `r.ephemeral AND ...` and the (few) ephemeral runners alone pay for it.
CREATE FUNCTION runner_spent(ephemeral boolean, ephemeral_job uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT ephemeral AND ephemeral_job IS NOT NULL AND EXISTS (
        SELECT 1 FROM jobs j
         WHERE j.id = ephemeral_job
           AND j.state IN ('completed', 'failed', 'cancelled', 'rejected'))
$$;

-- 8. One definition of "this runner may run this job" (PROTOCOL.md: capabilities, v1.1
--    exclusive sets and approved repository targets), used by the claim, its rejection of named
--    jobs, and the no-runner judgment. PL/pgSQL on purpose: the planner cannot see into it, so
--    it assumes a third of a queue fits instead of the near-nothing it estimates for array
--    containment against an unknown parameter, and a claim's generic plan keeps walking its
--    claim index in order instead of sorting the whole queue (docs/perf.md, "plans").
CREATE FUNCTION job_fits(required text[], source_key text,
                         capabilities text[], exclusive text[], sources text[])
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN required <@ capabilities
       AND exclusive <@ required
       AND (source_key IS NULL OR source_key = ANY (sources));
END
$$;
