-- The plain claim from a remembered place: lease_claim_plain.sql, but each plain class is read
-- from where the last plain claim of its queue on this replica found the first parked job
-- (store::bounds, migration 0013), not from its head. A replica sends it while some session
-- holds a snapshot old enough that a queue's head is a long walk of jobs already taken
-- (docs/perf.md, "The soak under an open snapshot"); with a fresh horizon those entries are
-- gone and the head claim is cheaper. Same place in the lease transaction and the same rows
-- out as lease_claim_plain.sql, and where each queue's next claim may start; and, unlike it,
-- `more` (with $8) itself: its plain class is read from the places here, where lease_more.sql
-- would walk each queue from its head, through every entry the old snapshot keeps.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner, $5 most jobs wanted, $6 lease
-- ttl ms, $7 where the runner's leases start (`held`, below), $8 whether to report 'more';
-- where to start in its pool's plain class: $9 priority, $10 id, $11 the xmin (as text) of the
-- claim that found that place, NULL with the head (1001, nil); $12, $13, $14 the same for the
-- workspace's 'any' jobs.
--
-- Named jobs the runner can run are taken first, then its pool's plain jobs (for a workspace
-- runner also the workspace's 'any' ones), highest priority first, FIFO by id; job_fits() with
-- the runner's empty lists still decides.
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
-- The pool's plain class (migration 0012) only: the constrained one is never read. The scan
-- starts at a place (priority, id) in the claim index's order that the replica remembered from
-- its last plain claim of this queue ($9, $10: store::bounds), or at the head (1001, nil: above
-- every priority) when it remembers none. Every job before that place was taken, or not
-- parked, when that claim looked, except jobs parked since by a transaction its snapshot did
-- not see, whose parked_xid is at least that snapshot's xmin ($11; NULL with the head):
-- `own_since` finds the first of those, and the scan starts there when it is earlier
-- (migration 0013 says why this misses nothing). They are read whole through
-- jobs_parked_since_pool (parks since a moment ago: a few), in that index's order, so that no
-- plan prefers walking the claim index from its head to find the first.
own_since_all AS MATERIALIZED (
    SELECT j.priority, j.id FROM jobs j
     WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL AND j.state = 'parked'
       AND job_claim_class(j.required_capabilities, j.source_key) = 0
       AND j.parked_xid >= $11::text::xid8
       AND (j.priority > $9 OR (j.priority = $9 AND j.id < $10))
       AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                    '{}', '{}', '{}', $4 LIKE 'ws:%')
     ORDER BY j.parked_xid
),
own_since AS (
    SELECT priority, id FROM own_since_all ORDER BY priority DESC, id LIMIT 1
),
own_start AS (
    SELECT COALESCE((SELECT priority FROM own_since), $9) AS priority,
           COALESCE((SELECT id FROM own_since), $10::uuid) AS id
),
-- The parked jobs at or after the start, locked or not (no lock taken), one more than this call
-- may take. The first is where the next claim may start: a job another call holds locked
-- stays at or after it until that call commits its lease, so a lease rolled back leaves
-- nothing behind the place remembered. Any of them this call does not take is `more`.
own_ahead AS (
    SELECT * FROM (
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority = (SELECT priority FROM own_start)
                          AND j.id >= (SELECT id FROM own_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}',
                                       $4 LIKE 'ws:%')
                        ORDER BY j.id
                        LIMIT 1000) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority < (SELECT priority FROM own_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}',
                                       $4 LIKE 'ws:%')
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000) AS lower_priority
    ) AS ahead
     LIMIT COALESCE((SELECT take FROM slots), 0) + 1
),
-- The claim proper, from the start: the rest of the start's priority, then the lower ones.
-- Append reads its branches in turn, so rows are locked only as they are taken.
own_plain AS (
    SELECT id, priority FROM (
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority = (SELECT priority FROM own_start)
                          AND j.id >= (SELECT id FROM own_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}',
                                       $4 LIKE 'ws:%')
                        ORDER BY j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority < (SELECT priority FROM own_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}',
                                       $4 LIKE 'ws:%')
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS lower_priority
    ) AS c
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
-- A workspace runner also serves the workspace's 'any' jobs (owned by their subjects), read
-- the same way from its own remembered place ($12, $13, $14).
any_since_all AS MATERIALIZED (
    SELECT j.priority, j.id FROM jobs j
     WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked'
       AND job_claim_class(j.required_capabilities, j.source_key) = 0
       AND j.parked_xid >= $14::text::xid8
       AND (j.priority > $12 OR (j.priority = $12 AND j.id < $13))
       AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                    '{}', '{}', '{}', true)
     ORDER BY j.parked_xid
),
any_since AS (
    SELECT priority, id FROM any_since_all ORDER BY priority DESC, id LIMIT 1
),
any_start AS (
    SELECT COALESCE((SELECT priority FROM any_since), $12) AS priority,
           COALESCE((SELECT id FROM any_since), $13::uuid) AS id
),
any_ahead AS (
    SELECT * FROM (
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority = (SELECT priority FROM any_start)
                          AND j.id >= (SELECT id FROM any_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}', true)
                        ORDER BY j.id
                        LIMIT 1000) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority < (SELECT priority FROM any_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}', true)
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000) AS lower_priority
    ) AS ahead
     LIMIT COALESCE((SELECT take FROM slots), 0) + 1
),
any_plain AS (
    SELECT id, priority FROM (
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority = (SELECT priority FROM any_start)
                          AND j.id >= (SELECT id FROM any_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}', true)
                        ORDER BY j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND job_claim_class(j.required_capabilities, j.source_key) = 0
                          AND j.priority < (SELECT priority FROM any_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, '{}', '{}', '{}', true)
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS lower_priority
    ) AS c
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
           -- Pool jobs this call did not take (the ones it took still look parked to its
           -- snapshot), of either class: another runner may run what this one cannot. The
           -- plain class is read from the start (own_ahead, any_ahead), the constrained one
           -- from its head.
           $8::boolean AND (EXISTS (SELECT 1 FROM own_ahead c WHERE c.id NOT IN (SELECT id FROM pool))
            OR EXISTS (SELECT 1 FROM (SELECT j.id FROM jobs j
                              WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                                AND j.state = 'parked'
                                AND job_claim_class(j.required_capabilities, j.source_key) = 1
                              ORDER BY j.priority DESC, j.id
                              LIMIT 1000) AS c
                     WHERE c.id NOT IN (SELECT id FROM pool))
            OR ($4 LIKE 'ws:%' AND (EXISTS (SELECT 1 FROM any_ahead c
                                          WHERE c.id NOT IN (SELECT id FROM pool))
                 OR EXISTS (SELECT 1 FROM (SELECT j.id FROM jobs j
                              WHERE j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked'
                                AND job_claim_class(j.required_capabilities, j.source_key) = 1
                              ORDER BY j.priority DESC, j.id
                              LIMIT 1000) AS c
                     WHERE c.id NOT IN (SELECT id FROM pool))))) AS more,
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
),
-- Where the next plain claim of each queue may start (store::bounds): the first parked job at or
-- after this one's start, or (-1001, nil), past every job, when there was none; and this
-- statement's snapshot xmin. The 'any' place is NULL for a personal runner.
places AS (
    SELECT COALESCE((SELECT priority FROM own_ahead ORDER BY priority DESC, id LIMIT 1), -1001)
               AS own_next_priority,
           COALESCE((SELECT id FROM own_ahead ORDER BY priority DESC, id LIMIT 1),
                    '00000000-0000-0000-0000-000000000000'::uuid) AS own_next_id,
           CASE WHEN $4 LIKE 'ws:%'
                THEN COALESCE((SELECT priority FROM any_ahead ORDER BY priority DESC, id LIMIT 1),
                              -1001) END AS any_next_priority,
           CASE WHEN $4 LIKE 'ws:%'
                THEN COALESCE((SELECT id FROM any_ahead ORDER BY priority DESC, id LIMIT 1),
                              '00000000-0000-0000-0000-000000000000'::uuid) END AS any_next_id,
           pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin
)
SELECT a.plain, a.free, a.leases_since, a.more, a.unfit_named, p.own_next_priority,
       p.own_next_id, p.any_next_priority, p.any_next_id, p.snapshot_xmin, l.id, l.workspace,
       l.epoch, l.attempts, l.kind, l.payload, l.required_capabilities, l.priority, l.named, l.lease_expires_at, l.secrets, l.source,
       l.traceparent
  FROM answer a CROSS JOIN places p LEFT JOIN leased l ON true
