-- A runner appends events, fenced: $1 id, $2 epoch, $3 runner id, $4 kinds, $5 data.
-- Returns the seq of the last event appended, or NULL when the fence did not match.
WITH fenced AS (
    UPDATE jobs SET event_seq = event_seq + cardinality($4::text[])
     WHERE id = $1 AND epoch = $2 AND leased_by = $3 AND state = 'leased'
    RETURNING id, event_seq - cardinality($4::text[]) AS base
),
appended AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT fenced.id, fenced.base + e.ord::integer, e.kind, e.data
      FROM fenced, unnest($4::text[], $5::jsonb[]) WITH ORDINALITY AS e (kind, data, ord)
    RETURNING seq
)
SELECT max(seq) AS next FROM appended
