-- An upload starts: blob $1 of job $2 in store $3 ('pg' | 's3'), object key $4 (s3 only).
INSERT INTO artifact_blobs (id, job_id, store, key) VALUES ($1, $2, $3, $4)
