-- Cancel a live job (a terminal report, so it wins over any later runner report).
-- $1 id, $2 workspace, $3 subject who cancelled. Zero rows: unknown or already terminal.
WITH cancelled AS (
    UPDATE jobs
       SET state = 'cancelled', finished_at = now(), lease_expires_at = NULL,
           error = jsonb_build_object('reason', 'cancelled', 'message', 'cancelled by ' || $3::text),
           event_seq = event_seq + 1
     WHERE id = $1 AND workspace = $2 AND state IN ('parked', 'leased')
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'cancelled', 'reason', 'cancelled',
                              'runner', leased_by, 'epoch', epoch)
      FROM cancelled
)
SELECT * FROM cancelled
