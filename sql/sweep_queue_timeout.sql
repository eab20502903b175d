-- Parked jobs older than their queue_timeout_ms: rejected queue_timeout, even while runners are
-- online but busy. $1 batch size.
WITH due AS (
    SELECT id FROM jobs
     WHERE state = 'parked' AND queue_deadline <= now()
     ORDER BY queue_deadline
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE jobs j
       SET state = 'rejected', finished_at = now(),
           error = jsonb_build_object('reason', 'queue_timeout',
                                      'message', 'the job was still parked when its queue timeout passed'),
           event_seq = j.event_seq + 1
     WHERE j.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING j.id, j.workspace, j.owner, j.runner_id, j.pool, j.state, j.epoch, j.event_seq
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', 'queue_timeout', 'runner', NULL, 'epoch', epoch)
      FROM moved
)
SELECT id, workspace, owner, runner_id, pool, state FROM moved
