-- Object keys $1 are gone from the bucket.
DELETE FROM artifact_garbage WHERE key = ANY ($1)
