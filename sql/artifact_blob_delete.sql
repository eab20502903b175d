-- An upload that did not complete: blob $1 and its chunks go (an S3 blob leaves its key in
-- artifact_garbage, by trigger).
DELETE FROM artifact_blobs WHERE id = $1 AND NOT complete
