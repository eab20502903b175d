-- Record repository targets runner $1 advertises: $2 ids, $3 providers, $4 repositories,
-- $5 labels. New ones are 'pending'; a known one keeps its status (a revoked target stays
-- revoked when advertised again) and takes the new label.
INSERT INTO runner_repo_targets AS t (runner_id, id, provider, repository, label)
SELECT $1, a.id, a.provider, a.repository, a.label
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[]) AS a(id, provider, repository, label)
ON CONFLICT (runner_id, provider, repository) DO UPDATE
   SET label = COALESCE(EXCLUDED.label, t.label)
RETURNING t.id, t.provider, t.repository, t.label, t.status
