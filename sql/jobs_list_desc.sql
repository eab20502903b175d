-- A page of a workspace's jobs by descending id (v1.1 `order=desc`): $1 workspace, $2 state or
-- NULL, $3 exclusive upper bound id or NULL, $4 page size, $5 byte budget, $6 outcome or NULL,
-- $7 search text or NULL and $8 its hex digits or NULL (as in jobs_list.sql): the page ends as
-- in jobs_list.sql, counted in this order.
WITH page AS (
    SELECT j.*,
           COALESCE(sum(octet_length(j.payload::text) + COALESCE(octet_length(j.result::text), 0)
                        + COALESCE(octet_length(j.error::text), 0))
                    OVER (ORDER BY j.id DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    0) AS bytes_before
      FROM jobs j
     WHERE j.workspace = $1
       AND ($2::text IS NULL OR j.state = $2)
       AND ($3::uuid IS NULL OR j.id < $3)
       AND ($6::text IS NULL OR job_outcome(j.state, j.result) = $6)
       AND ($7::text IS NULL
            OR ($8::text IS NOT NULL
                AND (starts_with(replace(j.id::text, '-', ''), $8)
                     OR right(replace(j.id::text, '-', ''), length($8)) = $8))
            OR strpos(lower(CASE WHEN j.kind = 'command'
                                      AND jsonb_typeof(j.payload -> 'argv') = 'array'
                                 THEN (SELECT string_agg(w.word, ' ' ORDER BY w.n)
                                         FROM jsonb_array_elements_text(j.payload -> 'argv')
                                              WITH ORDINALITY AS w(word, n)) END),
                      lower($7)) > 0)
     ORDER BY j.id DESC
     LIMIT $4
)
SELECT p.*, (SELECT count(*) FROM page) AS scanned
  FROM page p
 WHERE p.bytes_before < $5
 ORDER BY p.id DESC
