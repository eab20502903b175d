-- The claim for a runner that only plain jobs fit (no capability advertised, so no exclusive
-- set, and no approved repository target): lease_claim.sql without the constrained class and
-- without the runner's lists, which is the common case. Same place in the lease transaction,
-- same parameters, the same rows out with one more column (`unfit_named`). `plain` is false when the runner (under this statement's
-- snapshot, after the lock) is not such a runner after all; then it took nothing and the caller
-- runs lease_claim.sql in a new transaction. The replica chooses this claim by the `plain` of
-- the runner's previous claim.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner, $5 most jobs wanted, $6 lease
-- ttl ms, $7 where the runner's leases start (as in lease_claim.sql). Whether pool jobs are
-- left for another runner is lease_more.sql's.
--
-- Named jobs the runner can run are taken first, then its pool's plain jobs (for a workspace
-- runner also the workspace's 'any' ones), highest priority first, FIFO by id; job_fits() with
-- the runner's empty lists still decides (a job that needs a workspace runner does not fit a
-- personal one). Constrained jobs are not read: none can fit.
WITH r AS (
    SELECT r.capacity, r.ephemeral, r.ephemeral_job,
           cardinality(r.capabilities) = 0 AND cardinality(r.exclusive) = 0
           AND NOT EXISTS (SELECT 1 FROM runner_repo_targets t
                            WHERE t.runner_id = r.id AND t.status = 'approved') AS plain
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
    SELECT r.plain,
           CASE WHEN r.plain
                THEN greatest(least(CASE WHEN r.ephemeral THEN (r.ephemeral_job IS NULL)::integer
                                         ELSE $5::bigint END,
                                    r.capacity - (SELECT n FROM held)),
                              0)
                ELSE 0 END AS take
      FROM r
),
-- The candidate scans below each read their claim index in order. The inner LIMIT is a constant
-- so that a generic plan (planned once per connection, for any parameters) always walks the
-- index rather than sorting a whole queue that statistics make look big; the outer LIMIT takes
-- only what this call may have, and rows are locked only as they are taken (the plan pulls
-- them one by one). job_fits() (the migration says why it is opaque to the planner)
-- decides what the runner may run.
named AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.runner_id = $2 AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        '{}', '{}', '{}', $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT COALESCE((SELECT take FROM slots), 0)
),
-- The pool's plain class (migration 0012) only: the constrained one is never read.
own_plain AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_claim_class(j.required_capabilities, j.source_key) = 0
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        '{}', '{}', '{}', $4 LIKE 'ws:%')
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
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        '{}', '{}', '{}', $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id
         LIMIT 1000
           FOR UPDATE SKIP LOCKED) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
pool AS (
    SELECT id FROM (SELECT * FROM own_plain UNION ALL SELECT * FROM any_plain) AS candidates
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
-- crash). A rejection (lease_reject_unfit.sql, which these claims leave to the caller) commits
-- durably in its own transaction.
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
    SELECT s.plain, s.take AS free,
           -- The next claim's $7: once this transaction commits, every lease the runner holds
           -- was stamped at or after it (the ones taken here after now()); a second before, so
           -- that a clock stepped back by as much (NTP steps past 128 ms) changes nothing.
           least((SELECT oldest FROM held), now() - interval '1 second') AS leases_since,
           -- Named jobs of this runner still parked that it cannot run (it dropped a
           -- capability, or lost a repository target, since they were dispatched): only then
           -- does the caller run lease_reject_unfit.sql, in a transaction of its own. Most calls
           -- read one empty range of jobs_claim_named here and send no rejection at all.
           EXISTS (SELECT 1 FROM jobs j
                    WHERE j.runner_id = $2 AND j.state = 'parked'
                      AND NOT job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}',
                                       $4 LIKE 'ws:%')) AS unfit_named
      FROM slots s, commit_mode
)
SELECT a.plain, a.free, a.leases_since, a.unfit_named, l.id, l.workspace, l.epoch, l.attempts,
       l.kind, l.payload,
       l.required_capabilities, l.priority, l.named, l.lease_expires_at, l.secrets, l.source,
       l.traceparent
  FROM answer a LEFT JOIN leased l ON true
