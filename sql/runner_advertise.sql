-- What a lease call advertises, recorded before the version check (docs/api.md v1.1):
-- authenticate $1 sha256(token) as runner_lock_for_lease does, mark the runner seen, record
-- $2 version (NULL keeps) with $3 its verdict (outdated, judged in Rust), and add the repository
-- targets ($4 ids, $5 providers, $6 repositories, $7 labels) as 'pending'; a known target keeps
-- its status. No row: no live runner has this token.
WITH me AS (
    UPDATE runners r
       SET last_seen_at = now(),
           version = COALESCE($2, r.version),
           outdated = CASE WHEN $2::text IS NULL THEN r.outdated ELSE $3 END
     WHERE r.token_hash = $1
       AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND r.ephemeral_job IS NOT NULL AND EXISTS (
               SELECT 1 FROM jobs j
                WHERE j.id = r.ephemeral_job
                  AND j.state IN ('completed', 'failed', 'cancelled', 'rejected')))
    RETURNING r.id, r.outdated
),
targets AS (
    INSERT INTO runner_repo_targets AS t (runner_id, id, provider, repository, label)
    SELECT me.id, a.id, a.provider, a.repository, a.label
      FROM me, unnest($4::uuid[], $5::text[], $6::text[], $7::text[])
                  AS a(id, provider, repository, label)
    ON CONFLICT (runner_id, provider, repository) DO UPDATE
       SET label = COALESCE(EXCLUDED.label, t.label)
)
SELECT id, outdated FROM me
