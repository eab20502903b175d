-- The runner could not run the job at all, fenced: $1 id, $2 epoch, $3 runner id, $4 message.
WITH settled AS (
    UPDATE jobs
       SET state = 'failed', finished_at = now(), lease_expires_at = NULL,
           error = jsonb_build_object('reason', 'runner_failed', 'message', $4::text),
           provenance = jsonb_build_object('ran_on', 'self-hosted', 'runner', $3::uuid,
                                           'by', owner, 'epoch', epoch),
           event_seq = event_seq + 1
     WHERE id = $1 AND epoch = $2 AND leased_by = $3 AND state = 'leased'
    RETURNING *
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'failed', 'reason', 'runner_failed', 'runner', $3::uuid,
                              'epoch', epoch)
      FROM settled
)
SELECT * FROM settled
