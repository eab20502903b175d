-- The claim, for every runner: second in the lease transaction, after runner_lock_for_lease (and
-- before lease_reject_unfit when the replica expects a rejection; else `unfit_named` says whether
-- one is needed). Its snapshot is taken after the lock was granted, so it sees every lease a
-- concurrent call of the same runner committed: never more than capacity - active leases.
-- $1 sha256(token), $2 runner id, $3 its workspace, $4 its owner (fixed for a runner, so a replica
-- may know them before the lock answers; the row is still matched on the token), $5 most jobs
-- wanted, $6 lease ttl ms, $7 where the runner's leases start (`held`; NULL: not known), $8
-- whether to answer `more`, $9..$20 where each lane starts (priority, id, xmin of the pool's plain
-- jobs, the `any` plain ones, the pool's constrained ones, the `any` constrained ones; the head:
-- 1001, nil, NULL), $21 whether to read ahead (answer `more` and the next places: store::bounds),
-- $22 whether the transaction carries reports (`done`): then it commits durably, whatever it takes.
--
-- In order: jobs named for this runner that fit it, then its pool (a workspace runner's also
-- the workspace's `any` jobs), skipping jobs it cannot run; highest priority first, FIFO by id.
-- Named jobs it cannot run are lease_reject_unfit's. The pool is read by class (migration 0012):
-- a plain job (no required capability, no source) fits every runner without an exclusive set,
-- unless it needs a workspace runner; a constrained one is read only for a runner that
-- advertises a capability or holds an approved source, and job_fits() decides. Each lane's gate
-- is uncorrelated (a one-time filter), so a closed lane reads no index entry. Each lane starts
-- at its place (migrations 0013, 0016: the jobs parked since the place's xmin first), the same
-- priority after it, then the lower ones; from the head that is the whole queue. Scans are
-- ordered by their partial index, limited by a constant (a generic plan always walks the index),
-- FOR UPDATE SKIP LOCKED, and lock only the rows taken.
-- Rows out: one per job taken, always at least one (the job's columns NULL if none); no row: the
-- token is not live.
WITH r AS (
    SELECT r.id, r.capabilities, r.exclusive, r.capacity, r.ephemeral, r.ephemeral_job,
           ARRAY(SELECT t.provider || ' ' || t.repository FROM runner_repo_targets t
                  WHERE t.runner_id = r.id AND t.status = 'approved') AS sources
      FROM runners r
     WHERE r.token_hash = $1 AND r.id = $2 AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
gate AS (
    SELECT cardinality(exclusive) = 0 AS plain_open,
           cardinality(capabilities) > 0 OR cardinality(sources) > 0 AS constrained_open
      FROM r
),
-- The runner's leases from the remembered bound $7 (migration 0015), which skips the entries of
-- leases long settled that an old snapshot keeps; a bound ahead of the clock is not trusted.
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
-- Named jobs that fit; job_fits() is opaque to the planner (migration 0011).
named AS (
    SELECT id, priority FROM (
        SELECT j.id, j.priority FROM jobs j
         WHERE j.runner_id = $2 AND j.state = 'parked'
           AND (j.not_before IS NULL OR j.not_before <= now())
           AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                        (SELECT sources FROM r), $4 LIKE 'ws:%')
         ORDER BY j.priority DESC, j.id LIMIT 1000 FOR UPDATE SKIP LOCKED) AS c
     LIMIT COALESCE((SELECT take FROM slots), 0)
),
-- The pool's lanes, one per claim class open to this runner, and (for a workspace runner) the
-- workspace's `any` jobs', each with its place ($9..$20; the head: 1001, nil, NULL).
lanes AS (
    SELECT l.* FROM (VALUES (false, 0, $9::integer, $10::uuid, $11::text),
                            (true, 0, $12::integer, $13::uuid, $14::text),
                            (false, 1, $15::integer, $16::uuid, $17::text),
                            (true, 1, $18::integer, $19::uuid, $20::text))
                    AS l (is_any, class, priority, id, xmin), gate g
     WHERE (NOT l.is_any OR $4 LIKE 'ws:%')
       AND CASE l.class WHEN 0 THEN g.plain_open ELSE g.constrained_open END
),
-- Where each lane starts: the first job parked since its place's xmin ahead of the place (read
-- whole, by parked_xid: a few), else the place (migrations 0013, 0016, 0030 say why this misses
-- nothing). From the head (no xmin) that is the head.
starts AS (
    SELECT l.is_any, l.class, COALESCE(s.priority, l.priority) AS priority, COALESCE(s.id, l.id) AS id
      FROM lanes l LEFT JOIN LATERAL (
          SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                          WHERE NOT l.is_any AND j.workspace = $3 AND j.owner = $4
                            AND j.runner_id IS NULL AND j.state = 'parked'
                            AND job_claim_class(j.required_capabilities, j.source_key) = l.class
                            AND j.parked_xid >= l.xmin::xid8
                            AND (j.priority > l.priority OR (j.priority = l.priority AND j.id < l.id))
                          ORDER BY j.parked_xid OFFSET 0) AS own_since
          UNION ALL
          SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                          WHERE l.is_any AND j.workspace = $3 AND j.pool = 'any' AND j.state = 'parked'
                            AND job_claim_class(j.required_capabilities, j.source_key) = l.class
                            AND j.parked_xid >= l.xmin::xid8
                            AND (j.priority > l.priority OR (j.priority = l.priority AND j.id < l.id))
                          ORDER BY j.parked_xid OFFSET 0) AS any_since
           ORDER BY priority DESC, id LIMIT 1) AS s ON true
),
-- Each lane's jobs from its start, in the claim index's order: the rest of the start's priority,
-- then the lower ones (Append reads its branches in turn). `ahead` (only with $21): the parked
-- ones, locked or not, one more than this call may take: the first is where the lane's next
-- claim may start (a job locked by a lease in flight stays at or after it, so a rollback leaves
-- nothing behind the place), any not taken is `more`. `taken`: the ones this runner may run,
-- locked as they are taken.
ahead AS (
    SELECT s.is_any, s.class, a.priority, a.id FROM starts s CROSS JOIN LATERAL (
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $21 AND NOT s.is_any AND j.workspace = $3 AND j.owner = $4
                          AND j.runner_id IS NULL AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                          AND j.priority = s.priority AND j.id >= s.id
                        ORDER BY j.id LIMIT 1000) AS own_same
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $21 AND NOT s.is_any AND j.workspace = $3 AND j.owner = $4
                          AND j.runner_id IS NULL AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                          AND j.priority < s.priority
                        ORDER BY j.priority DESC, j.id LIMIT 1000) AS own_lower
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $21 AND s.is_any AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                          AND j.priority = s.priority AND j.id >= s.id
                        ORDER BY j.id LIMIT 1000) AS any_same
        UNION ALL
        SELECT * FROM (SELECT j.priority, j.id FROM jobs j
                        WHERE $21 AND s.is_any AND j.workspace = $3 AND j.pool = 'any'
                          AND j.state = 'parked'
                          AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                          AND j.priority < s.priority
                        ORDER BY j.priority DESC, j.id LIMIT 1000) AS any_lower
         LIMIT COALESCE((SELECT take FROM slots), 0) + 1) AS a
),
-- `taken`: the lane's jobs due now, from its start, each checked (the pool's one job_fits())
-- and locked by primary key as it is reached, so a call locks only rows it may take and reads no
-- further than it takes.
taken AS (
    SELECT t.id, t.priority FROM starts s CROSS JOIN LATERAL (
        SELECT c.id, c.priority FROM (
            SELECT * FROM (SELECT j.id, j.priority, j.not_before FROM jobs j
                            WHERE NOT s.is_any AND j.workspace = $3 AND j.owner = $4
                              AND j.runner_id IS NULL AND j.state = 'parked'
                              AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                              AND j.priority = s.priority AND j.id >= s.id
                            ORDER BY j.id LIMIT 1000) AS own_same
            UNION ALL
            SELECT * FROM (SELECT j.id, j.priority, j.not_before FROM jobs j
                            WHERE NOT s.is_any AND j.workspace = $3 AND j.owner = $4
                              AND j.runner_id IS NULL AND j.state = 'parked'
                              AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                              AND j.priority < s.priority
                            ORDER BY j.priority DESC, j.id LIMIT 1000) AS own_lower
            UNION ALL
            SELECT * FROM (SELECT j.id, j.priority, j.not_before FROM jobs j
                            WHERE s.is_any AND j.workspace = $3 AND j.pool = 'any'
                              AND j.state = 'parked'
                              AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                              AND j.priority = s.priority AND j.id >= s.id
                            ORDER BY j.id LIMIT 1000) AS any_same
            UNION ALL
            SELECT * FROM (SELECT j.id, j.priority, j.not_before FROM jobs j
                            WHERE s.is_any AND j.workspace = $3 AND j.pool = 'any'
                              AND j.state = 'parked'
                              AND job_claim_class(j.required_capabilities, j.source_key) = s.class
                              AND j.priority < s.priority
                            ORDER BY j.priority DESC, j.id LIMIT 1000) AS any_lower
        ) AS c CROSS JOIN LATERAL (
            SELECT j.id FROM jobs j
             WHERE j.id = c.id AND j.state = 'parked'
               AND (j.not_before IS NULL OR j.not_before <= now())
               AND job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                            (SELECT capabilities FROM r), (SELECT exclusive FROM r),
                            (SELECT sources FROM r), $4 LIKE 'ws:%')
               FOR UPDATE SKIP LOCKED) AS locked
         WHERE c.not_before IS NULL OR c.not_before <= now()
         LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
    ) AS t
),
pool AS (
    SELECT id FROM taken ORDER BY priority DESC, id
     LIMIT greatest(COALESCE((SELECT take FROM slots), 0) - (SELECT count(*) FROM named), 0)
),
picked AS (
    SELECT id FROM named UNION ALL SELECT id FROM pool
),
leased AS (
    UPDATE jobs j
       SET state = 'leased', epoch = j.epoch + 1, attempts = j.attempts + 1, leased_by = $2,
           -- The clock now, not the transaction's start: this runner's row lock was granted
           -- after every earlier claim of it committed, so its stamp follows their bounds.
           leased_at = clock_timestamp(),
           lease_expires_at = now() + $6::bigint * interval '1 millisecond',
           lease_check_at = now() + $6::bigint * interval '1 millisecond',
           event_seq = j.event_seq + 1,
           -- A leased job waits for nothing (v1.3), whether or not the sweeper cleared its delay.
           not_before = NULL,
           -- An 'any' job is billed to whoever holds its lease.
           billing_tenant = CASE WHEN j.pool = 'any'
                                 THEN CASE WHEN $4 LIKE 'ws:%' THEN j.workspace END
                                 ELSE j.billing_tenant END
     -- Not a join: a join's order is the planner's, and on a table it believes empty it would
     -- walk every job.
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
-- A call that took nothing and carried no report wrote only the runner's bookkeeping, which a
-- crash may lose without harm: it need not wait for the WAL flush. A call that leased anything,
-- or settled a report ($22), commits durably (v1.3: an answered lease or report survives a crash
-- and a failover); a rejection puts the durable commit back.
commit_mode AS (
    SELECT set_config('synchronous_commit',
                      CASE WHEN $22 OR EXISTS (SELECT 1 FROM leased)
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
           -- The next claim's $7: once this commits, every lease the runner holds was stamped at
           -- or after it; a second before, so that a clock stepped back as much changes nothing.
           least((SELECT oldest FROM held), now() - interval '1 second') AS leases_since,
           -- Only plain lanes are open to it (no capability, no exclusive set, no source).
           (SELECT cardinality(capabilities) = 0 AND cardinality(exclusive) = 0
                   AND cardinality(sources) = 0 FROM r) AS plain,
           -- Named jobs still parked that it cannot run (it dropped a capability or lost a
           -- target since): then lease_reject_unfit.sql runs, if it was not sent already.
           EXISTS (SELECT 1 FROM jobs j
                    WHERE j.runner_id = $2 AND j.state = 'parked'
                      AND NOT job_fits(j.required_capabilities, j.source_key,
                                       j.needs_workspace_runner, (SELECT capabilities FROM r),
                                       (SELECT exclusive FROM r), (SELECT sources FROM r),
                                       $4 LIKE 'ws:%')) AS unfit_named,
           -- Pool jobs of an open lane this call did not take (with $8 and $21).
           $8::boolean AND EXISTS (SELECT 1 FROM ahead a WHERE a.id NOT IN (SELECT id FROM pool))
               AS more
      FROM slots s, commit_mode
),
-- Where each lane's next claim may start (with $21): the first parked job at or after this
-- one's start, or (-1001, nil), past every job; NULL for a lane not read.
nexts AS (
    SELECT l.is_any, l.class,
           COALESCE(a.priority, -1001) AS priority,
           COALESCE(a.id, '00000000-0000-0000-0000-000000000000'::uuid) AS id
      FROM lanes l LEFT JOIN LATERAL (
          SELECT priority, id FROM ahead a WHERE a.is_any = l.is_any AND a.class = l.class
           ORDER BY priority DESC, id LIMIT 1) AS a ON true
     WHERE $21
)
SELECT a.plain, a.free, a.leases_since, a.unfit_named, a.more,
       o.priority AS own_next_priority, o.id AS own_next_id,
       y.priority AS any_next_priority, y.id AS any_next_id,
       oc.priority AS own_c_next_priority, oc.id AS own_c_next_id,
       yc.priority AS any_c_next_priority, yc.id AS any_c_next_id,
       CASE WHEN $21 THEN pg_snapshot_xmin(pg_current_snapshot())::text END AS snapshot_xmin,
       l.id, l.workspace, l.epoch, l.attempts, l.kind, l.payload, l.required_capabilities,
       l.priority, l.named, l.lease_expires_at, l.secrets, l.source, l.traceparent
  FROM answer a
  LEFT JOIN nexts o ON NOT o.is_any AND o.class = 0
  LEFT JOIN nexts y ON y.is_any AND y.class = 0
  LEFT JOIN nexts oc ON NOT oc.is_any AND oc.class = 1
  LEFT JOIN nexts yc ON yc.is_any AND yc.class = 1
  LEFT JOIN leased l ON true
