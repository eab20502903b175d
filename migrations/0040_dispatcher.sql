-- The dispatcher (issue 48): a replica claims once for all its waiting runners of one class,
-- and placement is decided at dispatch. A parked job waits in one *lane*: the key of the queue
-- it waits in and its claim class, fixed by what the dispatch said. One partial index holds
-- every parked job by lane, in the order a claim takes them (highest priority first, then
-- FIFO by id), so a claim of one lane is one ordered range of one index, and the claim for a
-- class of runners reads the few lanes open to that class, nothing else.
--
-- A lane (job_lane):
--   'r/<runner id>'              a job named for a runner (the claim checks job_fits() on it:
--                                a named job that does not fit is rejected, not skipped);
--   'p/<workspace>/<owner>/<c>'  a pool job: the owner's personal pool (a subject) or the
--                                workspace pool ('ws:<workspace>'); an `any` job waits in its
--                                owner's personal lane, and one that names a `workspace`
--                                secret (needs a workspace runner) in the workspace's lane:
--                                decided here, once, not by a check on every claim (a personal
--                                job that needs a workspace runner, which a dispatch refuses,
--                                waits in '.../ws', which no claim reads);
--   <c> the claim class (job_claim_class, migration 0012): 0 plain, which fits every runner
--   without an exclusive set; 1 constrained (a required capability or a source), checked
--   with job_fits() against the class of runners that reads it.
-- Workspace runners also take the workspace's `any` jobs of every owner: those are also in
-- jobs_claim_any by ('a/<workspace>/<c>'), which only `any` jobs a personal runner may take
-- enter (one that needs a workspace runner is already in the workspace's own lane).
--
-- PL/pgSQL and IMMUTABLE, as job_claim_class: usable in an index, and opaque, so a statement's
-- `job_lane(...) = $1` matches the index column exactly.
-- Subjects and workspace ids never contain '/' (domain::owner::is_valid_name).
CREATE FUNCTION job_lane(workspace text, owner text, runner_id uuid, pool text,
                         needs_workspace_runner boolean, required text[], source_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF runner_id IS NOT NULL THEN
        RETURN 'r/' || runner_id;
    END IF;
    IF needs_workspace_runner AND owner NOT LIKE 'ws:%' THEN
        IF pool <> 'any' THEN
            RETURN 'p/' || workspace || '/' || owner || '/ws';
        END IF;
        owner := 'ws:' || workspace;
    END IF;
    RETURN 'p/' || workspace || '/' || owner || '/' || job_claim_class(required, source_key);
END
$$;

CREATE FUNCTION job_any_lane(workspace text, required text[], source_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN 'a/' || workspace || '/' || job_claim_class(required, source_key);
END
$$;

-- What a runner offers a job with a source: `provider repository` of each repository target
-- approved for it, sorted (what job_fits() compares a job's source_key with; a class of runners
-- is also one set of these, claim.sql).
CREATE FUNCTION runner_sources(runner uuid) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ARRAY(SELECT t.provider || ' ' || t.repository FROM runner_repo_targets t
                  WHERE t.runner_id = runner AND t.status = 'approved' ORDER BY 1)
$$;

-- Ordered by (-priority, id), both ascending, so that where a claim starts (a place: the
-- dispatcher's memory of the last job it took from the lane) is one row comparison the index
-- can start from: `ROW(-priority, id) >= ROW($p, $id)`. The predicate names the lane (never
-- NULL) so that only a statement that reads a lane can use the index: replicas plan each
-- statement once, generically, and a plan that walked this index for `state = 'parked'` alone
-- would read every parked job (tests/it/plans.rs).
CREATE INDEX jobs_claim
    ON jobs (job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                      required_capabilities, source_key), (-priority), id)
    WHERE state = 'parked'
      AND job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                   required_capabilities, source_key) IS NOT NULL;

DROP INDEX jobs_claim_any;
CREATE INDEX jobs_claim_any
    ON jobs (job_any_lane(workspace, required_capabilities, source_key), (-priority), id)
    WHERE state = 'parked' AND pool = 'any' AND NOT needs_workspace_runner
      AND job_any_lane(workspace, required_capabilities, source_key) IS NOT NULL;

-- Replaced by jobs_claim.
DROP INDEX jobs_claim_pool;
DROP INDEX jobs_claim_named;

-- Where a claim starts under an old snapshot is the dispatcher's to remember now (docs/design.md,
-- "The dispatcher"), not found from the parks stamped since a remembered xmin (migrations 0013,
-- 0016, 0030): those indexes go, and with them an index entry and a stamp on every park. The
-- column stays (a replica of the last build may still write it during a rolling upgrade).
DROP INDEX jobs_parked_since_pool;
DROP INDEX jobs_parked_since_any;
ALTER TABLE jobs ALTER COLUMN parked_xid DROP DEFAULT;
