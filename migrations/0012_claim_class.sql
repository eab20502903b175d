-- An unfit head does not cost (issue 19). Every claim index used to hold a queue's parked jobs in
-- one order, so a claim walked (and filtered with job_fits) every job at the head that its
-- runner cannot run: 10,000 parked jobs requiring `gpu` made each lease of a runner without it
-- read 10,000 index entries. The two pool claim indexes now lead (after the queue key) with a
-- job's claim class: 0 for a plain job (no required capability, no repository source), 1 for a
-- constrained one. A claim walks each class in (priority DESC, id) order by equality on it, and
-- skips the constrained class outright when its runner advertises no capability and holds no
-- approved source (no constrained job can fit it). Each parked job still has exactly one entry
-- in each index it had one in before, so no transition writes more than it did.
--
-- PL/pgSQL and IMMUTABLE: usable in an index, and opaque, so a statement's
-- `job_claim_class(...) = 0` matches the index column exactly.
CREATE FUNCTION job_claim_class(required text[], source_key text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN CASE WHEN cardinality(required) > 0 OR source_key IS NOT NULL THEN 1 ELSE 0 END;
END
$$;

DROP INDEX jobs_claim_pool;
CREATE INDEX jobs_claim_pool
    ON jobs (workspace, owner, job_claim_class(required_capabilities, source_key),
             priority DESC, id)
    WHERE state = 'parked' AND runner_id IS NULL;
DROP INDEX jobs_claim_any;
CREATE INDEX jobs_claim_any
    ON jobs (workspace, job_claim_class(required_capabilities, source_key), priority DESC, id)
    WHERE state = 'parked' AND pool = 'any';
