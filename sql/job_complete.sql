-- First terminal report wins, fenced: $1 id, $2 epoch, $3 runner id, $4 result.
-- Provenance is stamped here from the row, never taken from the runner.
WITH settled AS (
    UPDATE jobs
       SET state = 'completed', finished_at = now(), lease_expires_at = NULL, result = $4,
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', $3::uuid,
                                           'by', owner, 'epoch', epoch),
           event_seq = event_seq + 1
     WHERE id = $1 AND epoch = $2 AND leased_by = $3 AND state = 'leased'
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'completed', 'reason', NULL, 'runner', $3::uuid, 'epoch', epoch)
      FROM settled
)
SELECT * FROM settled
