-- The claim for the waiting runners of one class (hub::dispatcher, docs/design.md), after their
-- rows were locked (runners_lock_for_claim.sql): it sees every lease another claim of theirs
-- committed. $1 runners, the least recently served first; $2 jobs each wants; $3 where each
-- one's leases start (NULL: unknown); $4 whether to read each one's named lane; $5 lease ttl
-- ms; $6, $7 where each pool lane starts, (-priority, id): own plain, own constrained, `any`
-- plain, `any` constrained (head: -1001, nil); $8 whether to answer where each starts next;
-- the class the dispatcher grouped them by: $9 workspace, $10 owner, $11 capabilities, $12
-- exclusive set, $13 approved sources. Rows: one per live runner of $1 and job it took.
WITH RECURSIVE r AS (
    SELECT w.*, r.workspace, r.owner, r.capabilities, r.exclusive, r.capacity, r.ephemeral,
           r.ephemeral_job, runner_sources(r.id) AS sources
      FROM unnest($1::uuid[], $2::integer[], $3::timestamptz[], $4::boolean[])
           WITH ORDINALITY AS w (id, want, since, named, ord)
      JOIN runners r ON r.id = w.id
     WHERE r.revoked_at IS NULL AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
-- The class, as passed; each lane it reads by its key (migration 0040; NULL: closed).
g AS (
    SELECT $9::text AS workspace, $10::text AS owner, $11::text[] AS capabilities,
           $12::text[] AS exclusive, $13::text[] AS sources, $10 LIKE 'ws:%' AS ws,
           CASE WHEN $12 = '{}' THEN 'p/' || $9 || '/' || $10 || '/0' END AS own0,
           CASE WHEN $11 || $13 <> '{}' THEN 'p/' || $9 || '/' || $10 || '/1' END AS own1,
           CASE WHEN $10 LIKE 'ws:%' AND $12 = '{}' THEN 'a/' || $9 || '/0' END AS any0,
           CASE WHEN $10 LIKE 'ws:%' AND $11 || $13 <> '{}' THEN 'a/' || $9 || '/1' END AS any1
),
-- Its runners (one that advertises otherwise now is not), with free slots.
m AS (
    SELECT r.*, h.oldest,
           greatest(least(CASE WHEN r.ephemeral THEN (r.ephemeral_job IS NULL)::integer
                               ELSE r.want END, r.capacity - h.n), 0) AS free
      FROM r JOIN g USING (workspace, owner, capabilities, exclusive, sources)
     CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(j.leased_at) AS oldest FROM jobs j
         WHERE j.leased_by = r.id AND j.state = 'leased'
           AND j.leased_at >= CASE WHEN r.since <= now() THEN r.since ELSE '-infinity' END) AS h
),
-- Its named jobs, parked (due or not); `fits` whether it can run them. Read, not locked.
lane AS (
    SELECT m.id AS runner, n.* FROM m CROSS JOIN LATERAL (
        SELECT j.id, -j.priority AS neg, (j.not_before IS NULL OR j.not_before <= now()) AS due,
               job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner,
                        m.capabilities, m.exclusive, m.sources, (SELECT ws FROM g)) AS fits
          FROM jobs j WHERE m.named AND j.state = 'parked'
           AND job_lane(j.workspace, j.owner, j.runner_id, j.pool, j.needs_workspace_runner,
                        j.required_capabilities, j.source_key) = 'r/' || m.id
         ORDER BY -j.priority, j.id LIMIT 1000) AS n
),
-- What it takes of them (one it cannot run is lease_reject_unfit.sql's), up to its free
-- slots, each locked by primary key: only what it takes.
named AS (
    SELECT t.runner, t.id FROM (
        SELECT n.* FROM (SELECT l.*, row_number() OVER (PARTITION BY l.runner ORDER BY l.neg, l.id)
                           AS i FROM lane l WHERE l.fits AND l.due) AS n
          JOIN m ON m.id = n.runner WHERE n.i <= m.free) AS t
     CROSS JOIN LATERAL (SELECT 1 FROM jobs j WHERE j.id = t.id
                            AND j.state IS NOT DISTINCT FROM 'parked' FOR UPDATE SKIP LOCKED) AS l
),
-- Each runner's slots left, numbered round-robin: every runner's first, then every second.
slots AS (
    SELECT m.id AS runner, row_number() OVER (ORDER BY s.round, m.ord) AS k FROM m
     CROSS JOIN LATERAL generate_series(1, m.free - (SELECT count(*) FROM named
                                                       WHERE runner = m.id)) AS s (round)
),
-- The requirement sets parked in its constrained lanes, one probe each (migration 0041), that
-- the class can run: what it cannot run costs one probe per set, never a read of its jobs.
own_sets (s, rc, sk) AS (
    (SELECT job_claim_set(required_capabilities, source_key), required_capabilities, source_key
       FROM jobs WHERE state = 'parked' AND runner_id IS NULL
        AND job_claim_class(required_capabilities, source_key) = 1
        AND job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                     required_capabilities, source_key) = (SELECT own1 FROM g)
      ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT n.* FROM own_sets o CROSS JOIN LATERAL (
        SELECT job_claim_set(required_capabilities, source_key), required_capabilities, source_key
          FROM jobs WHERE state = 'parked' AND runner_id IS NULL
           AND job_claim_class(required_capabilities, source_key) = 1
           AND job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                        required_capabilities, source_key) = (SELECT own1 FROM g)
           AND job_claim_set(required_capabilities, source_key) > o.s
         ORDER BY 1 LIMIT 1) AS n
),
any_sets (s, rc, sk) AS (
    (SELECT job_claim_set(required_capabilities, source_key), required_capabilities, source_key
       FROM jobs WHERE state = 'parked' AND pool = 'any' AND NOT needs_workspace_runner
        AND runner_id IS NULL AND job_claim_class(required_capabilities, source_key) = 1
        AND job_any_lane(workspace, required_capabilities, source_key) = (SELECT any1 FROM g)
      ORDER BY 1 LIMIT 1)
    UNION ALL
    SELECT n.* FROM any_sets o CROSS JOIN LATERAL (
        SELECT job_claim_set(required_capabilities, source_key), required_capabilities, source_key
          FROM jobs WHERE state = 'parked' AND pool = 'any' AND NOT needs_workspace_runner
           AND runner_id IS NULL AND job_claim_class(required_capabilities, source_key) = 1
           AND job_any_lane(workspace, required_capabilities, source_key) = (SELECT any1 FROM g)
           AND job_claim_set(required_capabilities, source_key) > o.s
         ORDER BY 1 LIMIT 1) AS n
),
fit AS (
    SELECT 2 AS slot, o.s FROM own_sets o, g
     WHERE job_fits(o.rc, o.sk, false, g.capabilities, g.exclusive, g.sources, g.ws)
    UNION ALL
    SELECT 4, a.s FROM any_sets a, g
     WHERE job_fits(a.rc, a.sk, false, g.capabilities, g.exclusive, g.sources, g.ws)
),
-- The open lanes merged in order, each an ordered range of its index from its start, due jobs
-- only: plain lanes read only as far as the claim goes; a fitting set as far as it could
-- (every slot, and some another claim may hold locked), each of its jobs checked again.
cand AS (
    SELECT c.*, row_number() OVER (ORDER BY c.neg, c.id) AS ord FROM (
        SELECT * FROM (SELECT 1 AS slot, -priority AS neg, id FROM jobs
            WHERE state = 'parked' AND (not_before IS NULL OR not_before <= now())
              AND ROW(-priority, id) >= ROW(($6::integer[])[1], ($7::uuid[])[1])
              AND job_lane(workspace, owner, runner_id, pool, needs_workspace_runner,
                           required_capabilities, source_key) = (SELECT own0 FROM g)
            ORDER BY 2, 3 LIMIT 1000) AS own0 UNION ALL
        SELECT * FROM (SELECT 3, -priority, id FROM jobs
            WHERE state = 'parked' AND (not_before IS NULL OR not_before <= now())
              AND ROW(-priority, id) >= ROW(($6::integer[])[3], ($7::uuid[])[3])
              AND pool = 'any' AND NOT needs_workspace_runner
              AND job_any_lane(workspace, required_capabilities, source_key) = (SELECT any0 FROM g)
            ORDER BY 2, 3 LIMIT 1000) AS any0 UNION ALL
        SELECT x.* FROM fit f CROSS JOIN LATERAL (
            SELECT f.slot, -j.priority, j.id FROM jobs j, g
             WHERE j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
               AND j.runner_id IS NULL
               AND job_claim_class(j.required_capabilities, j.source_key) = 1
               AND job_lane(j.workspace, j.owner, j.runner_id, j.pool, j.needs_workspace_runner,
                            j.required_capabilities, j.source_key) = g.own1
               AND job_claim_set(j.required_capabilities, j.source_key) = f.s
               AND ROW(-j.priority, j.id) >= ROW(($6::integer[])[2], ($7::uuid[])[2])
               AND job_fits(j.required_capabilities, j.source_key, false, g.capabilities,
                            g.exclusive, g.sources, g.ws)
             ORDER BY 2, 3 LIMIT (SELECT count(*) FROM slots) + 32) AS x WHERE f.slot = 2
        UNION ALL
        SELECT x.* FROM fit f CROSS JOIN LATERAL (
            SELECT f.slot, -j.priority, j.id FROM jobs j, g
             WHERE j.state = 'parked' AND (j.not_before IS NULL OR j.not_before <= now())
               AND j.pool = 'any' AND NOT j.needs_workspace_runner AND j.runner_id IS NULL
               AND job_claim_class(j.required_capabilities, j.source_key) = 1
               AND job_any_lane(j.workspace, j.required_capabilities, j.source_key) = g.any1
               AND job_claim_set(j.required_capabilities, j.source_key) = f.s
               AND ROW(-j.priority, j.id) >= ROW(($6::integer[])[4], ($7::uuid[])[4])
               AND job_fits(j.required_capabilities, j.source_key, false, g.capabilities,
                            g.exclusive, g.sources, g.ws)
             ORDER BY 2, 3 LIMIT (SELECT count(*) FROM slots) + 32) AS x WHERE f.slot = 4
        ORDER BY 2, 3 LIMIT 4000) AS c
),
-- Each candidate locked by primary key as it is reached, until every slot has one.
pool AS (
    SELECT c.id, c.ord, row_number() OVER (ORDER BY c.ord) AS k FROM (
        SELECT c.* FROM cand c CROSS JOIN LATERAL (SELECT 1 FROM jobs j WHERE j.id = c.id
                        AND j.state IS NOT DISTINCT FROM 'parked' FOR UPDATE SKIP LOCKED) AS l
         LIMIT (SELECT count(*) FROM slots)) AS c
),
-- Where each lane's next claim starts (with $8): the first candidate up to one past the last
-- taken that this claim did not take (one another claim holds locked may yet roll back).
ahead AS (
    SELECT array_agg(slot) AS slots, array_agg(neg) AS negs, array_agg(id) AS ids FROM (
        SELECT DISTINCT ON (slot) * FROM (
            SELECT * FROM cand
             LIMIT CASE WHEN $8 THEN (SELECT COALESCE(max(ord), 0) + 1 FROM pool) ELSE 0 END) AS c
         WHERE id NOT IN (SELECT id FROM pool) ORDER BY slot, ord) AS a
),
taken AS (
    SELECT runner, id FROM named UNION ALL SELECT s.runner, p.id FROM pool p JOIN slots s USING (k)
),
-- By key, not a join (whatever the statistics); leased_at after the runners' lock, so after
-- every bound.
leased AS (
    UPDATE jobs j
       SET state = 'leased', epoch = j.epoch + 1, attempts = j.attempts + 1, not_before = NULL,
           leased_by = (SELECT t.runner FROM taken t WHERE t.id = j.id),
           leased_at = clock_timestamp(),
           lease_expires_at = now() + $5::bigint * interval '1 millisecond',
           event_seq = j.event_seq + 1,
           lease_check_at = now() + $5::bigint * interval '1 millisecond',
           billing_tenant = CASE WHEN j.pool = 'any' AND (SELECT ws FROM g) THEN j.workspace
                                 WHEN j.pool = 'any' THEN NULL ELSE j.billing_tenant END
     WHERE j.id = ANY (ARRAY(SELECT id FROM taken))
    RETURNING j.*
),
ephemeral AS (
    UPDATE runners r
       SET ephemeral_job = (SELECT l.id FROM leased l WHERE l.leased_by = r.id LIMIT 1)
     WHERE r.id = ANY (ARRAY(SELECT leased_by FROM leased)) AND r.ephemeral
       AND r.ephemeral_job IS NULL
),
events AS (
    INSERT INTO job_events (job_id, workspace, seq, kind, data) SELECT id, workspace, event_seq,
        'state', jsonb_build_object('state', 'leased', 'reason', NULL, 'runner', leased_by,
                                    'epoch', epoch) FROM leased
),
-- An answered lease survives a crash: one that leased commits durably (the lock let others
-- skip it).
durable AS (SELECT set_config('synchronous_commit', NULL, true) WHERE EXISTS (SELECT 1 FROM leased))
SELECT r.id AS runner, m.id IS NOT NULL AS grouped, r.capabilities, r.exclusive, r.sources,
       COALESCE(m.free, 0) AS free, least(m.oldest, now() - interval '1 second') AS leases_since,
       EXISTS (SELECT 1 FROM lane WHERE runner = r.id AND NOT fits) AS unfit_named, l.id,
       l.workspace, l.epoch, l.attempts, l.kind, l.payload, l.required_capabilities, l.priority,
       l.runner_id IS NOT NULL AS named, l.lease_expires_at, l.secrets, l.source, l.traceparent,
       l.pool, l.needs_workspace_runner,
       a.slots AS next_slots, a.negs AS next_negs, a.ids AS next_ids
  FROM r LEFT JOIN m USING (id) LEFT JOIN leased l ON l.leased_by = r.id
  LEFT JOIN durable ON true CROSS JOIN ahead a
 ORDER BY r.ord, l.runner_id IS NULL, l.priority DESC, l.id
