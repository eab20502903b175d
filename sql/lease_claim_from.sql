-- The general claim from remembered places: lease_claim.sql, but each class of each queue (the
-- pool's and, for a workspace runner, the workspace's `any` jobs; plain and constrained,
-- migration 0012) is read from where the last claim of that class on this replica found the
-- first parked job (store::bounds, migrations 0013 and 0016), as lease_claim_plain_from.sql
-- reads the plain classes. A replica sends it, for a runner that is not plain, while some
-- session holds a snapshot old enough that a queue's head is a long walk of jobs already taken
-- (docs/perf.md, "Round 11" and "Round 12"). A place is shared by every runner of the queue,
-- so it is computed without the runner's lists: the plain place is the first plain job parked
-- (a plain job fits every runner of the queue that has no exclusive set: job_fits() with the
-- runner's lists and with empty ones agree on it), the constrained place the first constrained
-- job parked, whoever can run it; only the claims themselves read the runner's lists. Same
-- place in the lease transaction (lease_reject_unfit.sql follows it) and the same rows out as
-- lease_claim.sql, and, as lease_claim_plain_from.sql, `more` (with $8) and where each class's
-- next claim may start.
-- $1..$7 as lease_claim.sql; $8 whether to report 'more'; $9..$14 the plain places, as in
-- lease_claim_plain_from.sql; $15..$20 the constrained places, in the same form (the pool's
-- priority, id and xmin, then the `any` jobs').
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
-- The pool's plain class (migration 0012), as lease_claim_plain_from.sql reads it. The scan
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
                          AND (SELECT cardinality(exclusive) = 0 FROM r)
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
                          AND (SELECT cardinality(exclusive) = 0 FROM r)
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
-- The pool's constrained class, from its own place ($15, $16, $17) the same way: the parks
-- since that place's xmin, whoever can run them, through jobs_parked_since_pool_constrained
-- (migration 0016); the place ahead, whoever can run the jobs; the claim, of what fits.
own_c_since_all AS MATERIALIZED (
    SELECT j.priority, j.id FROM jobs j
     WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL AND j.state = 'parked'
       AND job_claim_class(j.required_capabilities, j.source_key) = 1
       AND j.parked_xid >= $17::text::xid8
       AND (j.priority > $15 OR (j.priority = $15 AND j.id < $16))
     ORDER BY j.parked_xid
),
own_c_since AS (
    SELECT priority, id FROM own_c_since_all ORDER BY priority DESC, id LIMIT 1
),
own_c_start AS (
    SELECT COALESCE((SELECT priority FROM own_c_since), $15) AS priority,
           COALESCE((SELECT id FROM own_c_since), $16::uuid) AS id
),
own_c_ahead AS (
    SELECT * FROM (
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority = (SELECT priority FROM own_c_start)
                          AND j.id >= (SELECT id FROM own_c_start)
                        ORDER BY j.id
                        LIMIT 1000) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority < (SELECT priority FROM own_c_start)
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000) AS lower_priority
    ) AS ahead
     LIMIT COALESCE((SELECT take FROM slots), 0) + 1
),
own_constrained AS (
    SELECT id, priority FROM (
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND (SELECT cardinality(capabilities) > 0
                                      OR cardinality(sources) > 0 FROM r)
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority = (SELECT priority FROM own_c_start)
                          AND j.id >= (SELECT id FROM own_c_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, (SELECT capabilities FROM r),
                                       (SELECT exclusive FROM r), (SELECT sources FROM r),
                                       $4 LIKE 'ws:%')
                        ORDER BY j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE j.workspace = $3 AND j.owner = $4 AND j.runner_id IS NULL
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND (SELECT cardinality(capabilities) > 0
                                      OR cardinality(sources) > 0 FROM r)
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority < (SELECT priority FROM own_c_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, (SELECT capabilities FROM r),
                                       (SELECT exclusive FROM r), (SELECT sources FROM r),
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
                          AND (SELECT cardinality(exclusive) = 0 FROM r)
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
                          AND (SELECT cardinality(exclusive) = 0 FROM r)
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
any_c_since_all AS MATERIALIZED (
    SELECT j.priority, j.id FROM jobs j
     WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked'
       AND job_claim_class(j.required_capabilities, j.source_key) = 1
       AND j.parked_xid >= $20::text::xid8
       AND (j.priority > $18 OR (j.priority = $18 AND j.id < $19))
     ORDER BY j.parked_xid
),
any_c_since AS (
    SELECT priority, id FROM any_c_since_all ORDER BY priority DESC, id LIMIT 1
),
any_c_start AS (
    SELECT COALESCE((SELECT priority FROM any_c_since), $18) AS priority,
           COALESCE((SELECT id FROM any_c_since), $19::uuid) AS id
),
any_c_ahead AS (
    SELECT * FROM (
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority = (SELECT priority FROM any_c_start)
                          AND j.id >= (SELECT id FROM any_c_start)
                        ORDER BY j.id
                        LIMIT 1000) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority < (SELECT priority FROM any_c_start)
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000) AS lower_priority
    ) AS ahead
     LIMIT COALESCE((SELECT take FROM slots), 0) + 1
),
any_constrained AS (
    SELECT id, priority FROM (
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND (SELECT cardinality(capabilities) > 0
                                      OR cardinality(sources) > 0 FROM r)
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority = (SELECT priority FROM any_c_start)
                          AND j.id >= (SELECT id FROM any_c_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, (SELECT capabilities FROM r),
                                       (SELECT exclusive FROM r), (SELECT sources FROM r),
                                       true)
                        ORDER BY j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS same_priority
        UNION ALL
        SELECT * FROM (SELECT j.id, j.priority FROM jobs j
                        WHERE $4 LIKE 'ws:%' AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
                          AND (SELECT cardinality(capabilities) > 0
                                      OR cardinality(sources) > 0 FROM r)
                          AND job_claim_class(j.required_capabilities, j.source_key) = 1
                          AND j.priority < (SELECT priority FROM any_c_start)
                          AND job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, (SELECT capabilities FROM r),
                                       (SELECT exclusive FROM r), (SELECT sources FROM r),
                                       true)
                        ORDER BY j.priority DESC, j.id
                        LIMIT 1000
                          FOR UPDATE SKIP LOCKED) AS lower_priority
    ) AS c
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
           -- Only plain jobs fit it: the replica sends lease_claim_plain*.sql next time.
           (SELECT cardinality(capabilities) = 0 AND cardinality(exclusive) = 0
                   AND cardinality(sources) = 0 FROM r) AS plain,
           -- Pool jobs this call did not take (the ones it took still look parked to its
           -- snapshot), of either class: another runner may run what this one cannot. Each
           -- class is read from its start (the *_ahead scans).
           $8::boolean
           AND (EXISTS (SELECT 1 FROM own_ahead c WHERE c.id NOT IN (SELECT id FROM pool))
                OR EXISTS (SELECT 1 FROM own_c_ahead c WHERE c.id NOT IN (SELECT id FROM pool))
                OR ($4 LIKE 'ws:%'
                    AND (EXISTS (SELECT 1 FROM any_ahead c
                                  WHERE c.id NOT IN (SELECT id FROM pool))
                         OR EXISTS (SELECT 1 FROM any_c_ahead c
                                     WHERE c.id NOT IN (SELECT id FROM pool))))) AS more
      FROM slots s, commit_mode
),
-- Where the next claim of each class of each queue may start (store::bounds): the first parked
-- job at or after this one's start, or (-1001, nil), past every job, when there was none; and
-- this statement's snapshot xmin. The 'any' places are NULL for a personal runner.
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
           COALESCE((SELECT priority FROM own_c_ahead ORDER BY priority DESC, id LIMIT 1), -1001)
               AS own_c_next_priority,
           COALESCE((SELECT id FROM own_c_ahead ORDER BY priority DESC, id LIMIT 1),
                    '00000000-0000-0000-0000-000000000000'::uuid) AS own_c_next_id,
           CASE WHEN $4 LIKE 'ws:%'
                THEN COALESCE((SELECT priority FROM any_c_ahead ORDER BY priority DESC, id LIMIT 1),
                              -1001) END AS any_c_next_priority,
           CASE WHEN $4 LIKE 'ws:%'
                THEN COALESCE((SELECT id FROM any_c_ahead ORDER BY priority DESC, id LIMIT 1),
                              '00000000-0000-0000-0000-000000000000'::uuid) END AS any_c_next_id,
           pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin
)
SELECT a.plain, a.free, a.leases_since, a.more, p.own_next_priority, p.own_next_id,
       p.any_next_priority, p.any_next_id, p.own_c_next_priority, p.own_c_next_id,
       p.any_c_next_priority, p.any_c_next_id, p.snapshot_xmin, l.id, l.workspace, l.epoch,
       l.attempts, l.kind, l.payload, l.required_capabilities, l.priority, l.named,
       l.lease_expires_at, l.secrets, l.source, l.traceparent
  FROM answer a CROSS JOIN places p LEFT JOIN leased l ON true
