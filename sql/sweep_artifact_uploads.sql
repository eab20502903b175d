-- Uploads whose replica stopped touching them over $1 ms ago (it died, or lost its
-- connection): their blobs and chunks go, a batch at a time.
DELETE FROM artifact_blobs
 WHERE id IN (SELECT id FROM artifact_blobs
               WHERE NOT complete AND touched_at < now() - $1::bigint * interval '1 millisecond'
               ORDER BY touched_at
               LIMIT 100
                 FOR UPDATE SKIP LOCKED)
