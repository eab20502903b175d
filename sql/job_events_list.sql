-- A page of a job's events: $1 job id, $2 exclusive lower seq, $3 page size.
SELECT seq, at, kind, data FROM job_events
 WHERE job_id = $1 AND seq > $2
 ORDER BY seq
 LIMIT $3
