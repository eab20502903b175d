-- First terminal report wins, fenced and authenticated in one statement: a report settles its
-- job only if its runner token is live and that runner holds the lease at that epoch. One
-- statement settles one report or several coalesced by the replica (hub::combine).
-- $1 a JSON array of reports {ord, id, epoch, token (hex sha256), result}; $2 how stale (ms) a
-- runner's last_seen_at may get before this call refreshes it.
-- Provenance is stamped here from the rows, never taken from the runner. Rows out: the settled
-- jobs, each with the `ord` of the report that settled it (of two reports of one job in one
-- batch, one wins); a report with no row missed its fence (the caller asks job_fence_miss why).
WITH reports AS (
    SELECT x.ord, x.id, x.epoch, x.result, r.id AS runner_id, r.owner AS runner_owner,
           r.last_seen_at
      FROM jsonb_to_recordset($1::jsonb) AS x (ord bigint, id uuid, epoch bigint, token text,
                                                result jsonb)
      -- Per report, by the unique token index (OFFSET 0 keeps the planner from turning this
      -- into a join over every runner).
      CROSS JOIN LATERAL (
          SELECT r.id, r.owner, r.last_seen_at FROM runners r
           WHERE r.token_hash = decode(x.token, 'hex') AND r.revoked_at IS NULL
             AND NOT runner_spent(r.ephemeral, r.ephemeral_job)
          OFFSET 0) AS r
),
settled AS (
    UPDATE jobs j
       SET state = 'completed', finished_at = now(), lease_expires_at = NULL, result = COALESCE(x.result, 'null'::jsonb),
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', x.runner_id,
                                           'by', x.runner_owner, 'epoch', j.epoch),
           event_seq = j.event_seq + 1
      FROM reports x
     WHERE j.id = x.id AND j.epoch = x.epoch
       -- Reached by primary key only (see job_fail.sql).
       AND j.leased_by IS NOT DISTINCT FROM x.runner_id AND j.state IS NOT DISTINCT FROM 'leased'
    RETURNING j.*, x.ord
),
seen AS (
    UPDATE runners r SET last_seen_at = now()
     WHERE r.id = ANY (ARRAY(SELECT runner_id FROM reports
                              WHERE last_seen_at < now() - $2::bigint * interval '1 millisecond'))
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'completed', 'reason', NULL, 'runner', leased_by,
                              'epoch', epoch)
      FROM settled
)
SELECT * FROM settled
