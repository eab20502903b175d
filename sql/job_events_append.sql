-- A runner appends events, fenced and authenticated in one statement: $1 id, $2 epoch,
-- $3 sha256(runner token), $4 kinds, $5 data, $6 how stale (ms) last_seen_at may get.
-- Returns the seq of the last event appended; no row when the fence missed.
WITH me AS (
    SELECT r.id, r.last_seen_at FROM runners r
     WHERE r.token_hash = $3 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
fenced AS (
    UPDATE jobs j SET event_seq = j.event_seq + cardinality($4::text[])
      FROM me
     WHERE j.id = $1 AND j.epoch = $2
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM me.id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.id, j.workspace, j.event_seq - cardinality($4::text[]) AS base
),
-- Best effort: a runner row another transaction holds (a tick, a revoke) is skipped, never
-- waited for, so this statement never waits for a runner after taking a job (one lock order,
-- runners first: docs/design.md); its next call refreshes it.
seen AS (
    UPDATE runners r SET last_seen_at = now()
     WHERE r.id IN (SELECT s.id FROM runners s JOIN me ON s.id = me.id
                     WHERE me.last_seen_at < now() - $6::bigint * interval '1 millisecond'
                     ORDER BY s.id FOR NO KEY UPDATE OF s SKIP LOCKED)
),
appended AS (
    INSERT INTO job_events (job_id, workspace, seq, kind, data)
    SELECT fenced.id, fenced.workspace, fenced.base + e.ord::integer, e.kind, e.data
      FROM fenced, unnest($4::text[], $5::jsonb[]) WITH ORDINALITY AS e (kind, data, ord)
    RETURNING seq
)
SELECT max(seq) AS next FROM appended HAVING count(*) > 0
