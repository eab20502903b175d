-- Bytes $3 (from 0) to $4 (exclusive) of chunk $2 of blob $1: one slice of a download. The
-- column is stored uncompressed, so only the slice is read. No row: no such chunk.
SELECT substring(data FROM $3::integer + 1 FOR $4::integer - $3::integer) AS data
  FROM artifact_chunks
 WHERE blob_id = $1 AND seq = $2
