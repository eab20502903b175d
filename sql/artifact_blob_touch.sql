-- An upload still runs: the stale-upload sweep leaves blob $1 alone.
UPDATE artifact_blobs SET touched_at = now() WHERE id = $1 AND NOT complete
