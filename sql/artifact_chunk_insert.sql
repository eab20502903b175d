-- One chunk of a blob as it arrives: $1 blob, $2 seq (from 0), $3 the bytes.
INSERT INTO artifact_chunks (blob_id, seq, data) VALUES ($1, $2, $3)
