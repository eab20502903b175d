-- Retention (v1.2): delete up to $1 jobs settled more than $2 ms ago, with their events (no
-- foreign key: migration 0002, 6) and their artifacts (ON DELETE CASCADE; an S3 blob's key goes
-- to artifact_garbage by trigger, migration 0020); the idempotency key lives on the job row, so
-- it is forgotten with it. An ephemeral runner whose one job is deleted is revoked here: its
-- token died when that job settled (runner_spent), and must not come back to life because the
-- job is gone.
--
-- The walk is the primary key's head, not an index of its own: ids are UUIDv7 (dispatch time in
-- the first 48 bits), and a job settled before now() - $2 was dispatched before it too, so every
-- candidate's id sorts below the UUID of that instant. No index on finished_at, so settling a
-- job costs nothing more. (A replica clock ahead of the database's only delays a deletion.)
-- SKIP LOCKED: replicas sweeping at once never take the same job, and a job a report, cancel or
-- retry holds is left for the next sweep (its state is re-checked after the lock).
WITH gone AS (
    DELETE FROM jobs
     WHERE id IN (
        SELECT id FROM jobs
         WHERE id < (lpad(to_hex(floor(extract(epoch FROM now() - $2::bigint * interval '1 millisecond')
                                       * 1000)::bigint), 12, '0')
                     || '00000000000000000000')::uuid
           AND state IN ('completed', 'failed', 'cancelled', 'rejected')
           AND finished_at < now() - $2::bigint * interval '1 millisecond'
         ORDER BY id
         LIMIT $1
           FOR UPDATE SKIP LOCKED)
    RETURNING id
), events AS (
    DELETE FROM job_events WHERE job_id IN (SELECT id FROM gone)
), spent AS (
    UPDATE runners SET revoked_at = now()
     WHERE ephemeral AND revoked_at IS NULL AND ephemeral_job IN (SELECT id FROM gone)
)
SELECT count(*)::bigint AS deleted FROM gone
