-- Leases not renewed in time: back to parked (re-delivery; the next lease bumps the epoch), or
-- failed lease_lost once attempts reached max_attempts. $1 batch size. Safe on every replica at
-- once: SKIP LOCKED, and a row a heartbeat just renewed no longer matches.
WITH lapsed AS (
    SELECT id, leased_by AS holder
      FROM jobs
     WHERE state = 'leased' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE jobs j
       SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'parked' END,
           finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
           error = CASE WHEN j.attempts >= j.max_attempts THEN
                       jsonb_build_object('reason', 'lease_lost', 'message',
                           'the lease lapsed without a report after ' || j.attempts || ' attempts')
                   END,
           leased_by = CASE WHEN j.attempts >= j.max_attempts THEN j.leased_by END,
           lease_expires_at = NULL,
           event_seq = j.event_seq + 1
      FROM lapsed
     WHERE j.id = lapsed.id
    RETURNING j.id, j.owner, j.runner_id, j.state, j.epoch, j.event_seq, lapsed.holder
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', state,
                              'reason', CASE WHEN state = 'failed' THEN 'lease_lost' ELSE 'lease_lapsed' END,
                              'runner', holder, 'epoch', epoch)
      FROM moved
)
SELECT id, owner, runner_id, state FROM moved
