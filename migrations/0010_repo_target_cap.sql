-- A runner's recorded repository targets are capped (issue 18, row 8; docs/contract-notes.md,
-- "Memory per request is bounded"): a runner's own calls only ever add `pending` targets, so
-- without a cap its heartbeats could grow its row in every roster answer without bound.
--
-- After each statement that records targets, a runner holding more than 100 loses its oldest
-- `pending` ones (by created_at, then id: ids are UUIDv7, so within one call the targets listed
-- first are the older) until it holds 100. `approved` and `revoked` targets are an operator's
-- decisions and are never dropped; if a runner's 100 are all approved or revoked, a new target
-- is dropped at once, i.e. it is not recorded.
CREATE FUNCTION runner_repo_targets_cap() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM runner_repo_targets d
     WHERE d.id IN (
           SELECT t.id
             FROM (SELECT DISTINCT runner_id FROM added) AS a
            CROSS JOIN LATERAL (
                  SELECT t.id FROM runner_repo_targets t
                   WHERE t.runner_id = a.runner_id AND t.status = 'pending'
                   ORDER BY t.created_at, t.id
                   LIMIT greatest((SELECT count(*) FROM runner_repo_targets c
                                    WHERE c.runner_id = a.runner_id) - 100, 0)) AS t);
    RETURN NULL;
END
$$;

CREATE TRIGGER runner_repo_targets_cap
    AFTER INSERT ON runner_repo_targets
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION runner_repo_targets_cap();
