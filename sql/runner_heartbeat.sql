-- A runner's own heartbeat: $1 id, $2 version (NULL keeps), $3 capabilities (NULL keeps),
-- $4 capacity (NULL keeps), $5 presence window ms, $6 whether $2 is outdated (judged in
-- Rust against LEASEHOLD_MIN_RUNNER_VERSION), $7 exclusive set (NULL keeps). An exclusive name
-- is always also an advertised capability.
UPDATE runners r
   SET last_seen_at = now(),
       version = COALESCE($2, r.version),
       outdated = CASE WHEN $2::text IS NULL THEN r.outdated ELSE $6 END,
       capabilities = CASE WHEN $3::text[] IS NULL AND $7::text[] IS NULL THEN r.capabilities
                           ELSE ARRAY(SELECT DISTINCT c
                                        FROM unnest(COALESCE($3, r.capabilities)
                                                    || COALESCE($7, r.exclusive)) AS c
                                       ORDER BY c) END,
       exclusive = COALESCE($7, r.exclusive),
       capacity = COALESCE($4, r.capacity)
 WHERE r.id = $1 AND r.revoked_at IS NULL
RETURNING r.id, r.owner, r.workspace, r.label, r.os, r.version, r.capabilities, r.capacity,
          (SELECT count(*) FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased') AS active_leases,
          ARRAY(SELECT j.id FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased'
                 ORDER BY j.id) AS current_jobs,
          runner_presence(r.last_seen_at, $5) AS presence,
          r.last_seen_at, r.created_at, r.approved_by, r.ephemeral,
          r.outdated, r.exclusive,
          COALESCE((SELECT jsonb_agg(jsonb_build_object('id', t.id, 'provider', t.provider,
                                                        'repository', t.repository, 'label', t.label,
                                                        'status', t.status) ORDER BY t.id)
                      FROM runner_repo_targets t WHERE t.runner_id = r.id), '[]'::jsonb) AS repo_targets
