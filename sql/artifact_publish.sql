-- The last byte is stored: make artifact $4 (blob $5, $6 bytes, sha256 $7, chunk size $8) of
-- job $1 at epoch $2 visible, fenced again by that epoch and token $3 in this same statement. The job row is
-- locked FOR SHARE, so a lease that is superseded while this runs either waits for it or
-- keeps it from publishing. `held` false: the fence missed (nothing published);
-- `created_at` NULL with `held` true: the path was taken at this epoch meanwhile.
WITH held AS (
    SELECT j.id
      FROM jobs j
      JOIN runners r ON r.id = j.leased_by
     WHERE j.id = $1 AND j.epoch = $2 AND j.state = 'leased'
       AND r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
       FOR SHARE OF j
),
published AS (
    INSERT INTO artifacts (job_id, path, epoch, blob_id, size, sha256, chunk_size)
    SELECT id, $4, $2, $5, $6, $7, $8 FROM held
    ON CONFLICT (job_id, path, epoch) DO NOTHING
    RETURNING created_at
),
completed AS (
    UPDATE artifact_blobs SET complete = true
     WHERE id = $5 AND EXISTS (SELECT 1 FROM published)
)
SELECT EXISTS (SELECT 1 FROM held) AS held, (SELECT created_at FROM published) AS created_at
