-- A page of job $1's artifacts as workspace $2 sees it, newest epoch first, then by path
-- (bytewise): those after the artifact of epoch $3 and path $4 in that order (exclusive; the
-- first page passes an epoch above any and ''), at most $5. One range of the artifacts_listed
-- index. No row: the job is not visible; one row with a NULL path: the page is empty.
SELECT a.path, a.epoch, a.size, a.sha256, a.created_at
  FROM jobs j
  LEFT JOIN LATERAL (
        SELECT a.path, a.epoch, a.size, a.sha256, a.created_at
          FROM artifacts a
         WHERE a.job_id = j.id
           AND (-a.epoch, a.path COLLATE "C") > (-$3::bigint, $4::text COLLATE "C")
         ORDER BY -a.epoch, a.path COLLATE "C"
         LIMIT $5
       ) a ON true
 WHERE j.id = $1 AND j.workspace = $2
 ORDER BY -a.epoch, a.path COLLATE "C"
