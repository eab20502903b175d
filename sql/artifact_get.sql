-- Artifact $2 of job $1 as workspace $3 sees it, with where its bytes are.
SELECT a.size, a.sha256, a.chunk_size, a.created_at, b.id AS blob_id, b.store, b.key
  FROM artifacts a
  JOIN jobs j ON j.id = a.job_id
  JOIN artifact_blobs b ON b.id = a.blob_id
 WHERE a.job_id = $1 AND a.path = $2 AND j.workspace = $3
