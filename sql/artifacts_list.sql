-- Job $1's artifacts as workspace $2 sees it, newest epoch first, then by path (bytewise), the
-- order of the artifacts_listed index. No row: the job is not visible; one row with a NULL path:
-- it has none.
SELECT a.path, a.epoch, a.size, a.sha256, a.created_at
  FROM jobs j
  LEFT JOIN artifacts a ON a.job_id = j.id
 WHERE j.id = $1 AND j.workspace = $2
 ORDER BY -a.epoch, a.path COLLATE "C"
