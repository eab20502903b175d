-- Give a lease back (draining), fenced: $1 id, $2 epoch, $3 runner id. The job is parked again
-- with its epoch unchanged; the next lease bumps it. Never fails the job.
WITH released AS (
    UPDATE jobs
       SET state = 'parked', leased_by = NULL, lease_expires_at = NULL,
           event_seq = event_seq + 1
     WHERE id = $1 AND epoch = $2 AND leased_by = $3 AND state = 'leased'
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'parked', 'reason', 'released', 'runner', $3::uuid,
                              'epoch', epoch)
      FROM released
)
SELECT * FROM released
