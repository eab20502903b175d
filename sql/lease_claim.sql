-- The claim: one statement, on the database clock. Run inside the lease transaction after
-- runner_lock_for_lease, so its snapshot sees every lease a concurrent lease call of the same
-- runner committed, and "never more than capacity - active leases" holds.
-- $1 runner id, $2 runner's owner, $3 runner's capabilities, $4 most jobs wanted,
-- $5 lease ttl ms, $6 the runner's capacity.
--
-- In order: jobs named for this runner that need a capability it lacks are rejected (never run
-- in the wrong environment); jobs named for it are taken, then the owner's pool, skipping pool
-- jobs it cannot run; highest priority first, FIFO by id. CTE form with LIMIT and
-- FOR UPDATE SKIP LOCKED, so no more than $4 rows are ever locked or updated.
-- Rows out: outcome 'leased' (one per job taken), 'rejected' (one per job rejected), one 'free'
-- row whose epoch column is how many this call could take, and at most one 'more' row when pool
-- jobs this call did not take are still parked (the wake is passed on).
WITH slots AS (
    SELECT greatest(least($4::bigint,
                          $6::bigint - (SELECT count(*) FROM jobs
                                         WHERE leased_by = $1 AND state = 'leased')), 0) AS take
),
rejected AS (
    UPDATE jobs
       SET state = 'rejected', finished_at = now(), event_seq = event_seq + 1,
           error = jsonb_build_object('reason', 'capability_mismatch',
                                      'message', 'the named runner does not advertise every required capability')
     WHERE runner_id = $1 AND state = 'parked' AND NOT (required_capabilities <@ $3::text[])
    RETURNING id, workspace, epoch, event_seq
),
named AS (
    SELECT id FROM jobs
     WHERE runner_id = $1 AND state = 'parked' AND required_capabilities <@ $3::text[]
     ORDER BY priority DESC, id
     LIMIT (SELECT take FROM slots)
       FOR UPDATE SKIP LOCKED
),
pool AS (
    SELECT id FROM jobs
     WHERE owner = $2 AND runner_id IS NULL AND state = 'parked'
       AND required_capabilities <@ $3::text[]
     ORDER BY priority DESC, id
     LIMIT greatest((SELECT take FROM slots) - (SELECT count(*) FROM named), 0)
       FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT id FROM named UNION ALL SELECT id FROM pool
),
leased AS (
    UPDATE jobs j
       SET state = 'leased', epoch = j.epoch + 1, attempts = j.attempts + 1, leased_by = $1,
           leased_at = now(), lease_expires_at = now() + $5::bigint * interval '1 millisecond',
           event_seq = j.event_seq + 1
      FROM picked
     WHERE j.id = picked.id
    RETURNING j.id, j.workspace, j.epoch, j.attempts, j.kind, j.payload, j.required_capabilities,
              j.priority, j.runner_id IS NOT NULL AS named, j.lease_expires_at, j.event_seq,
              j.traceparent
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'leased', 'reason', NULL, 'runner', $1::uuid, 'epoch', epoch)
      FROM leased
    UNION ALL
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'rejected', 'reason', 'capability_mismatch',
                              'runner', $1::uuid, 'epoch', epoch)
      FROM rejected
)
SELECT 'leased' AS outcome, id, workspace, epoch, attempts, kind, payload, required_capabilities,
       priority, named, lease_expires_at, traceparent
  FROM leased
UNION ALL
SELECT 'rejected', id, workspace, epoch, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM rejected
UNION ALL
SELECT 'free', NULL, NULL, take, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
  FROM slots
UNION ALL
-- Parked pool jobs this call did not take: count up to take + 1 of them on the claim index (the
-- ones taken here still look parked to this statement's snapshot) and compare.
SELECT 'more', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
 WHERE (SELECT count(*) FROM (SELECT 1 FROM jobs
                               WHERE owner = $2 AND runner_id IS NULL AND state = 'parked'
                               ORDER BY priority DESC, id
                               LIMIT (SELECT take FROM slots) + 1) AS visible)
       > (SELECT count(*) FROM pool)
