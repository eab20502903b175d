-- A page of a workspace's jobs by ascending id: $1 workspace, $2 state or NULL,
-- $3 exclusive lower bound id or NULL, $4 page size, $5 byte budget, $6 outcome or NULL (v1.3:
-- `job_outcome()`, migration 0037), $7 search text or NULL (leasehold's `q`,
-- docs/contract-notes.md): a `command` job whose argv joined with spaces holds it in any case,
-- or, when $8 (its hex digits, hyphens dropped, lower case: 4..32 of them) is not NULL, a job
-- whose id's hex digits start or end with $8. The page also ends before
-- the first job that would start past $5 bytes of payload, result and error (as JSON text)
-- counted over the jobs before it, so it always holds at least one job, and a replica never
-- reads a page much larger than the budget (docs/contract-notes.md, "Memory per request is
-- bounded"). The sizes are computed here, row by row, over at most $4 candidates; the values
-- of the candidates past the cut never leave the database. `scanned` is how many candidates
-- there were: more than the rows returned means the budget ended the page.
WITH page AS (
    SELECT j.*,
           COALESCE(sum(octet_length(j.payload::text) + COALESCE(octet_length(j.result::text), 0)
                        + COALESCE(octet_length(j.error::text), 0))
                    OVER (ORDER BY j.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                    0) AS bytes_before
      FROM jobs j
     WHERE j.workspace = $1
       AND ($2::text IS NULL OR j.state = $2)
       AND ($3::uuid IS NULL OR j.id > $3)
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
     ORDER BY j.id
     LIMIT $4
)
SELECT p.*, (SELECT count(*) FROM page) AS scanned
  FROM page p
 WHERE p.bytes_before < $5
 ORDER BY p.id
