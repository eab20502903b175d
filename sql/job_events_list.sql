-- A page of a job's events: $1 job id, $2 exclusive lower seq, $3 page size, $4 byte budget:
-- the page ends before the first event that would start past $4 bytes of data (as JSON text)
-- counted over the events before it (so it always holds at least one), as jobs_list.sql.
SELECT seq, at, kind, data FROM (
    SELECT e.seq, e.at, e.kind, e.data,
           COALESCE(sum(octet_length(e.data::text))
                    OVER (ORDER BY e.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    0) AS bytes_before
      FROM job_events e
     WHERE e.job_id = $1 AND e.seq > $2
     ORDER BY e.seq
     LIMIT $3
) AS page
 WHERE bytes_before < $4
 ORDER BY seq
