-- The claim for any runner: second in the lease transaction, after runner_lock_for_lease and
-- before lease_reject_unfit (the four are sent together, pipelined, with BEGIN and COMMIT: one
-- round trip). Its own snapshot is taken after the lock was granted, so it sees every lease that
-- a concurrent lease call of the same runner committed, and "never more than capacity - active
-- leases" holds. lease_claim_plain.sql is the same claim for a runner that only plain jobs fit.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner (id, workspace and owner never
-- change for a runner, so a replica may know them before the lock answers; the runner row is
-- still matched on the token, so a wrong guess claims nothing), $5 most jobs wanted, $6 lease ttl
-- ms, $7 where the runner's leases start (`held`, below; NULL: not known). Whether pool jobs
-- are left for another runner is lease_more.sql's, sent after it when wanted.
--
-- In order: jobs named for this runner that it can run are taken, then its pool (for a
-- workspace runner also the workspace's 'any' jobs), skipping jobs it cannot run (job_fits: a
-- required capability it does not advertise, an exclusive name they do not require, a source it
-- holds no approved target for, a 'workspace' secret for a personal runner); highest priority
-- first, FIFO by id. Named jobs it cannot run are lease_reject_unfit's.
-- Pool jobs are read one claim class at a time (plain, constrained: migration 0012), and a class
-- no job of which can fit the runner is not read at all, so a head of unrunnable jobs costs
-- nothing to a runner that could run none of them.
-- Each candidate scan is ordered by its partial index and limited, with FOR UPDATE SKIP LOCKED,
-- and locks only the rows it takes.
-- Rows out: one per job taken, and always at least one: `free` (how many this call could take)
-- and `plain` (the runner advertises no capability and holds no approved target) on every row,
-- the job's columns NULL on the one row of a call that took nothing. No row: the token is not
-- live.
WITH r AS (
    SELECT r.id, r.capabilities, r.exclusive, r.capacity, r.ephemeral, r.ephemeral_job,
           ARRAY(SELECT t.provider || ' ' || t.repository FROM runner_repo_targets t
                  WHERE t.runner_id = r.id AND t.status = 'approved') AS sources
      FROM runners r
     WHERE r.token_hash = $1 AND r.id = $2 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
-- The runner's leases: how many it holds, and the oldest one's stamp. $7 is a bound that every
-- lease the runner still holds was stamped at or after, remembered by the replica from an
-- earlier claim (NULL: none; store::lease, migration 0015), so that the count skips, in the
-- index, the entries of leases long settled that an old snapshot keeps. A bound ahead of the
-- database's clock is not trusted (the clock went back, or this is another server): then every
-- entry is read.
held AS (
    SELECT count(*) AS n, min(j.leased_at) AS oldest FROM jobs j
     WHERE j.leased_by = $2 AND j.state = 'leased'
       AND j.leased_at >= CASE WHEN $7::timestamptz <= now() THEN $7::timestamptz
                               ELSE '-infinity'::timestamptz END
),
slots AS (
    SELECT greatest(least(CASE WHEN r.ephemeral THEN (r.ephemeral_job IS NULL)::integer
                               ELSE $5::bigint END,
                          r.capacity - (SELECT n FROM held)), 0) AS take
      FROM r
),
-- The candidate scans below each read their claim index in order. The inner LIMIT is a constant
-- so that a generic plan (planned once per connection, for any parameters) always walks the
-- index rather than sorting a whole queue that statistics make look big; the outer LIMIT takes
-- only what this call may have, and rows are locked only as they are taken (the plan pulls
-- them one by one). Runner attributes come in as scalar subqueries, not a join, so nothing
-- stands between the ordered index scan and its LIMIT; job_fits() (the migration says why it
-- is opaque to the planner) decides what the runner may run.
named AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.runner_id = $2 AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT COALESCE((SELECT take FROM slots), 0)
),
-- The pool is read by class (migration 0012): plain jobs (no required capability, no source)
-- fit every runner without an exclusive set; a constrained job fits only a runner that
-- advertises a capability or holds an approved source. Each class's scan is gated on the
-- runner (an uncorrelated condition: a one-time filter, so a gated scan reads no index entry
-- at all), so a head of jobs this runner cannot run costs it nothing when their class is
-- closed to it. The gates only skip scans that could find nothing; job_fits still decides.
own_plain AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_claim_class(j.required_capabilities, j.source_key) = 0
           AND (SELECT cardinality(exclusive) = 0 FROM r)
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
own_constrained AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_claim_class(j.required_capabilities, j.source_key) = 1
           AND (SELECT cardinality(capabilities) > 0 OR cardinality(sources) > 0 FROM r)
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
-- A workspace runner also serves the workspace's 'any' jobs (owned by their subjects).
any_plain AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_claim_class(j.required_capabilities, j.source_key) = 0
           AND (SELECT cardinality(exclusive) = 0 FROM r)
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
any_constrained AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_claim_class(j.required_capabilities, j.source_key) = 1
           AND (SELECT cardinality(capabilities) > 0 OR cardinality(sources) > 0 FROM r)
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
pool AS (
    SELECT id FROM (SELECT * FROM own_plain UNION ALL SELECT * FROM own_constrained
                    UNION ALL SELECT * FROM any_plain UNION ALL SELECT * FROM any_constrained)
                AS candidates
     ORDER BY priority DESC, id
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
picked AS (
    SELECT id FROM named UNION ALL SELECT id FROM pool
),
leased AS (
    UPDATE jobs j
       SET state = 'leased', epoch = j.epoch + 1, attempts = j.attempts + 1, leased_by = $2,
           -- The clock now, not the transaction's start: this runner's row lock was granted
           -- after every earlier claim of it committed, so its stamp follows their bounds
           -- (store::lease).
           leased_at = clock_timestamp(),
           lease_expires_at = now() + $6::bigint * interval '1 millisecond',
           lease_check_at = now() + $6::bigint * interval '1 millisecond',
           event_seq = j.event_seq + 1,
           -- An 'any' job is billed to whoever holds its lease.
           billing_tenant = CASE WHEN j.pool = 'any'
                                 THEN CASE WHEN $4 LIKE 'ws:%' THEN j.workspace END
                                 ELSE j.billing_tenant END
     -- Not a join: a join's order is the planner's to choose, and on a table it believes empty it
     -- would walk every job.
     WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.workspace, j.epoch, j.attempts, j.kind, j.payload, j.required_capabilities,
              j.priority, j.runner_id IS NOT NULL AS named, j.lease_expires_at, j.event_seq,
              j.secrets, j.source, j.traceparent
),
-- An ephemeral runner takes one job in its life: remember which.
ephemeral AS (
    UPDATE runners SET ephemeral_job = (SELECT id FROM leased ORDER BY id LIMIT 1)
     WHERE (SELECT ephemeral FROM r) AND EXISTS (SELECT 1 FROM leased)
       AND id = $2 AND ephemeral AND ephemeral_job IS NULL
),
-- A call that took nothing wrote only the runner's bookkeeping (seen, advertised), which a
-- crash may lose without harm: its transaction need not wait for the WAL flush. A call that
-- leased anything commits durably, as always (a lease answered to a runner must survive a
-- crash); lease_reject_unfit, after this, puts the durable commit back when it rejects.
commit_mode AS (
    SELECT set_config('synchronous_commit',
                      CASE WHEN EXISTS (SELECT 1 FROM leased)
                           THEN current_setting('synchronous_commit') ELSE 'off' END,
                      true)
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data)
    SELECT id, event_seq, 'state',
           jsonb_build_object('state', 'leased', 'reason', NULL, 'runner', $2::uuid, 'epoch', epoch)
      FROM leased
),
answer AS (
    SELECT s.take AS free,
           -- The next claim's $7: once this transaction commits, every lease the runner holds
           -- was stamped at or after it (the ones taken here after now()); a second before, so
           -- that a clock stepped back by as much (NTP steps past 128 ms) changes nothing.
           least((SELECT oldest FROM held), now() - interval '1 second') AS leases_since,
           -- Only plain jobs fit it: the replica sends lease_claim_plain.sql next time.
           (SELECT cardinality(capabilities) = 0 AND cardinality(exclusive) = 0
                   AND cardinality(sources) = 0 FROM r) AS plain
      FROM slots s, commit_mode
)
SELECT a.plain, a.free, a.leases_since, l.id, l.workspace, l.epoch, l.attempts, l.kind, l.payload,
       l.required_capabilities, l.priority, l.named, l.lease_expires_at, l.secrets, l.source,
       l.traceparent
  FROM answer a LEFT JOIN leased l ON true
