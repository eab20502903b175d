-- Pair a runner. $1 id, $2 owner, $3 workspace, $4 label, $5 os, $6 version, $7 capabilities,
-- $8 capacity, $9 sha256(token), $10 approved_by, $11 ephemeral, $12 seen now (enrolment counts
-- as being seen), $13 presence window ms,
-- $14 outdated (the version judged in Rust against LEASEHOLD_MIN_RUNNER_VERSION), $15 the
-- exclusive (canary) set, whose names $7 already holds.
INSERT INTO runners AS r (id, owner, workspace, label, os, version, capabilities, capacity,
                          token_hash, approved_by, ephemeral, last_seen_at, outdated,
                          exclusive)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, CASE WHEN $12 THEN now() END, $14,
        $15)
RETURNING r.id, r.owner, r.workspace, r.label, r.os, r.version, r.capabilities, r.capacity,
          0::bigint AS active_leases, '{}'::uuid[] AS current_jobs,
          runner_presence(r.last_seen_at, $13) AS presence,
          r.last_seen_at, r.created_at, r.approved_by, r.ephemeral, r.outdated, r.exclusive,
          '[]'::jsonb AS repo_targets
