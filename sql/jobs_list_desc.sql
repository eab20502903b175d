-- A page of a workspace's jobs by descending id (v1.1 `order=desc`): $1 workspace, $2 state or
-- NULL, $3 exclusive upper bound id or NULL, $4 page size.
SELECT * FROM jobs
 WHERE workspace = $1
   AND ($2::text IS NULL OR state = $2)
   AND ($3::uuid IS NULL OR id < $3)
 ORDER BY id DESC
 LIMIT $4
