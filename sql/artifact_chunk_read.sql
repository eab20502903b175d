-- Bytes of one chunk: blob $1, chunk $2, $4 bytes from offset $3 (from 0). The column is
-- stored uncompressed, so only the slices asked for are read.
SELECT substring(data FROM $3::integer + 1 FOR $4::integer) AS data
  FROM artifact_chunks
 WHERE blob_id = $1 AND seq = $2
