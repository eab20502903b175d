-- Bytes of chunks $2 to $3 of blob $1, in order: chunk $2 from offset $4 (from 0), chunk $3 up
-- to offset $5 (exclusive), the others whole. One statement reads a batch of chunks; the column
-- is stored uncompressed, so only the slices asked for are read.
SELECT seq,
       substring(data FROM (CASE WHEN seq = $2 THEN $4::integer ELSE 0 END) + 1
                      FOR (CASE WHEN seq = $3 THEN $5::integer ELSE octet_length(data) END)
                          - (CASE WHEN seq = $2 THEN $4::integer ELSE 0 END)) AS data
  FROM artifact_chunks
 WHERE blob_id = $1 AND seq BETWEEN $2 AND $3
 ORDER BY seq
