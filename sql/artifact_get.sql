-- Artifact $2 of job $1 as workspace $3 sees it, with where its bytes are: the file of epoch $4,
-- or with $4 NULL the newest epoch's file of that path (v1.3).
SELECT a.epoch, a.size, a.sha256, a.chunk_size, a.created_at, b.id AS blob_id, b.store, b.key
  FROM artifacts a
  JOIN jobs j ON j.id = a.job_id
  JOIN artifact_blobs b ON b.id = a.blob_id
 WHERE a.job_id = $1 AND a.path = $2 AND j.workspace = $3
   AND ($4::bigint IS NULL OR a.epoch = $4)
 ORDER BY a.epoch DESC
 LIMIT 1
