-- Up to $1 object keys of deleted S3 blobs, locked for this sweep's transaction (another
-- replica's sweep skips them).
SELECT key FROM artifact_garbage ORDER BY deleted_at LIMIT $1 FOR UPDATE SKIP LOCKED
