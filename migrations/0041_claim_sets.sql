-- No class starves (v1.4, issue 51): every constrained job of a pool shares one lane (its
-- key ends in '/1', migration 0040), so a claim for `arm64` runners read the lane's head, found
-- 1,000 `gpu` jobs it could not run, and stopped there. A constrained lane is now read by its
-- requirement sets: this index orders each lane's constrained jobs by the set they require
-- (job_claim_set) before (-priority, id), so a claim finds the sets parked in a lane with one
-- probe each (a skip scan: claim.sql's `sets`), keeps those its class can run, and reads each
-- of them as one ordered range. What a runner cannot run costs it one probe per requirement
-- set, however many jobs wait in it.
--
-- jobs_claim and jobs_claim_any stay as they are (plain lanes, named lanes, the safety net's
-- probe of a whole lane): only constrained pool jobs get an entry more, the plain hot path none.

-- The requirement set of a constrained job, as one bounded key: its required capabilities
-- (sorted and de-duplicated at dispatch, domain::capabilities) and its source. md5 keeps an
-- index entry small however many capabilities a job names; claim.sql checks job_fits() on
-- every job it takes as well, so two sets that shared a key could never place a job wrongly.
CREATE FUNCTION job_claim_set(required text[], source_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN md5(array_to_string(required, ',') || '|' || COALESCE(source_key, ''));
END
$$;

CREATE INDEX jobs_claim_sets
    ON jobs (job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                      required_capabilities, source_key),
             job_claim_set(required_capabilities, source_key), (-priority), id)
    WHERE state = 'parked' AND runner_id IS NULL
      AND job_claim_class(required_capabilities, source_key) = 1;

CREATE INDEX jobs_claim_any_sets
    ON jobs (job_any_lane(workspace, required_capabilities, source_key),
             job_claim_set(required_capabilities, source_key), (-priority), id)
    WHERE state = 'parked' AND pool = 'any' AND NOT needs_workspace_runner AND runner_id IS NULL
      AND job_claim_class(required_capabilities, source_key) = 1;
