-- The roster: every live runner paired in workspace $1, both tiers. $2 presence window ms.
SELECT r.id, r.owner, r.workspace, r.label, r.os, r.version, r.capabilities, r.capacity,
       (SELECT count(*) FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased') AS active_leases,
       ARRAY(SELECT j.id FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased'
              ORDER BY j.id) AS current_jobs,
       runner_presence(r.last_seen_at, $2) AS presence,
       r.last_seen_at, r.created_at, r.approved_by, r.ephemeral,
       r.outdated, r.exclusive,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('id', t.id, 'provider', t.provider,
                                                     'repository', t.repository, 'label', t.label,
                                                     'status', t.status) ORDER BY t.id)
                   FROM runner_repo_targets t WHERE t.runner_id = r.id), '[]'::jsonb) AS repo_targets
  FROM runners r
 WHERE r.workspace = $1 AND r.revoked_at IS NULL
 ORDER BY r.created_at, r.id
