-- The claim for the waiting runners of one class (hub::dispatcher, docs/design.md), after their
-- rows were locked (runners_lock_for_claim.sql): it sees every lease another claim of theirs
-- committed. $1 runners, oldest waiter first; $2 jobs each wants; $3 where each one's leases
-- start (NULL: unknown); $4 whether to read each one's named lane; $5 lease ttl ms; $6, $7 where
-- each pool lane starts, (-priority, id): own plain, own constrained, `any` plain, `any`
-- constrained (head: -1001, nil); $8 whether to answer where each starts next. Rows: one per live
-- runner of $1 and job it took.
WITH r AS (
    SELECT w.*, r.workspace, r.owner, r.capabilities, r.exclusive, r.capacity, r.ephemeral, r.ephemeral_job,
           runner_sources(r.id) AS sources
      FROM unnest($1::uuid[], $2::integer[], $3::timestamptz[], $4::boolean[]) WITH ORDINALITY AS w (id, want, since, named, ord)
      JOIN runners r ON r.id = w.id
     WHERE r.revoked_at IS NULL AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
),
-- The class is the first runner's; each lane it reads by its key (migration 0040; NULL: closed).
g AS (
    SELECT workspace, owner, capabilities, exclusive, sources, owner LIKE 'ws:%' AS ws,
           CASE WHEN exclusive = '{}' THEN 'p/' || workspace || '/' || owner || '/0' END AS own0,
           CASE WHEN capabilities || sources <> '{}' THEN 'p/' || workspace || '/' || owner || '/1' END AS own1,
           CASE WHEN owner LIKE 'ws:%' AND exclusive = '{}' THEN 'a/' || workspace || '/0' END AS any0,
           CASE WHEN owner LIKE 'ws:%' AND capabilities || sources <> '{}' THEN 'a/' || workspace || '/1' END AS any1
      FROM r ORDER BY ord LIMIT 1
),
-- Its runners (one that advertises otherwise since it was grouped is not), with free slots.
m AS (
    SELECT r.*, h.oldest,
           greatest(least(CASE WHEN r.ephemeral THEN (r.ephemeral_job IS NULL)::integer ELSE r.want END, r.capacity - h.n), 0) AS free
      FROM r JOIN g USING (workspace, owner, capabilities, exclusive, sources) CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(j.leased_at) AS oldest FROM jobs j WHERE j.leased_by = r.id AND j.state = 'leased'
           AND j.leased_at >= CASE WHEN r.since <= now() THEN r.since ELSE '-infinity' END) AS h
),
-- Its named jobs, parked (due or not), each locked as reached; `fits` whether it can run them.
lane AS (
    SELECT m.id AS runner, n.* FROM m CROSS JOIN LATERAL (
        SELECT j.id, -j.priority AS neg, (j.not_before IS NULL OR j.not_before <= now()) AS due,
               job_fits(j.required_capabilities, j.source_key, j.needs_workspace_runner, m.capabilities,
                        m.exclusive, m.sources, (SELECT ws FROM g)) AS fits
          FROM jobs j WHERE m.named AND j.state = 'parked' AND job_lane(j.workspace, j.owner, j.runner_id,
                j.pool, j.needs_workspace_runner, j.required_capabilities, j.source_key) = 'r/' || m.id
         ORDER BY -j.priority, j.id LIMIT 1000 FOR UPDATE SKIP LOCKED) AS n
),
-- What it takes of them (one it cannot run is lease_reject_unfit.sql's), up to its free slots.
named AS (
    SELECT n.runner, n.id FROM (SELECT l.*, row_number() OVER (PARTITION BY l.runner ORDER BY l.neg, l.id) AS i
                                  FROM lane l WHERE l.fits AND l.due) AS n JOIN m ON m.id = n.runner WHERE n.i <= m.free
),
-- Each runner's slots left, numbered round-robin: every runner's first, then every second.
slots AS (
    SELECT m.id AS runner, row_number() OVER (ORDER BY s.round, m.ord) AS k FROM m
     CROSS JOIN LATERAL generate_series(1, m.free - (SELECT count(*) FROM named WHERE runner = m.id)) AS s (round)
),
-- The open lanes merged in order, each an ordered range of its index from its start: the jobs
-- due that fit the class, read only as far as the claim goes.
cand AS (
    SELECT c.*, row_number() OVER (ORDER BY c.neg, c.id) AS ord FROM (
        SELECT * FROM (SELECT 1 AS slot, -priority AS neg, id, required_capabilities AS rc, source_key AS sk, not_before AS nb
            FROM jobs WHERE state = 'parked' AND ROW(-priority, id) >= ROW(($6::integer[])[1], ($7::uuid[])[1]) AND job_lane(
            workspace, owner, runner_id, pool, needs_workspace_runner, required_capabilities, source_key) = (SELECT own0 FROM g)
            ORDER BY 2, 3 LIMIT 1000) AS own0 UNION ALL
        SELECT * FROM (SELECT 2, -priority, id, required_capabilities, source_key, not_before
            FROM jobs WHERE state = 'parked' AND ROW(-priority, id) >= ROW(($6::integer[])[2], ($7::uuid[])[2]) AND job_lane(
            workspace, owner, runner_id, pool, needs_workspace_runner, required_capabilities, source_key) = (SELECT own1 FROM g)
            ORDER BY 2, 3 LIMIT 1000) AS own1 UNION ALL
        SELECT * FROM (SELECT 3, -priority, id, required_capabilities, source_key, not_before
            FROM jobs WHERE state = 'parked' AND ROW(-priority, id) >= ROW(($6::integer[])[3], ($7::uuid[])[3])
             AND pool = 'any' AND NOT needs_workspace_runner AND job_any_lane(workspace, required_capabilities, source_key)
                 = (SELECT any0 FROM g) ORDER BY 2, 3 LIMIT 1000) AS any0 UNION ALL
        SELECT * FROM (SELECT 4, -priority, id, required_capabilities, source_key, not_before
            FROM jobs WHERE state = 'parked' AND ROW(-priority, id) >= ROW(($6::integer[])[4], ($7::uuid[])[4])
             AND pool = 'any' AND NOT needs_workspace_runner AND job_any_lane(workspace, required_capabilities, source_key)
                 = (SELECT any1 FROM g) ORDER BY 2, 3 LIMIT 1000) AS any1
        ORDER BY 2, 3 LIMIT 4000) AS c
     WHERE (c.nb IS NULL OR c.nb <= now())
       AND (c.slot IN (1, 3) OR (SELECT job_fits(c.rc, c.sk, false, capabilities, exclusive, sources, ws) FROM g))
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
    SELECT array_agg(slot) AS slots, array_agg(neg) AS negs, array_agg(id) AS ids FROM (SELECT DISTINCT ON (slot) * FROM (
        SELECT * FROM cand LIMIT CASE WHEN $8 THEN (SELECT COALESCE(max(ord), 0) + 1 FROM pool) ELSE 0 END) AS c
         WHERE id NOT IN (SELECT id FROM pool) ORDER BY slot, ord) AS a
),
taken AS (SELECT runner, id FROM named UNION ALL SELECT s.runner, p.id FROM pool p JOIN slots s USING (k)),
-- By key, not a join (whatever the statistics); leased_at after the runners' lock, so after every bound.
leased AS (
    UPDATE jobs j
       SET state = 'leased', epoch = j.epoch + 1, attempts = j.attempts + 1, not_before = NULL,
           leased_by = (SELECT t.runner FROM taken t WHERE t.id = j.id), leased_at = clock_timestamp(),
           lease_expires_at = now() + $5::bigint * interval '1 millisecond', event_seq = j.event_seq + 1,
           lease_check_at = now() + $5::bigint * interval '1 millisecond',
           billing_tenant = CASE WHEN j.pool = 'any' AND (SELECT ws FROM g) THEN j.workspace
                                 WHEN j.pool = 'any' THEN NULL ELSE j.billing_tenant END
     WHERE j.id = ANY (ARRAY(SELECT id FROM taken))
    RETURNING j.*
),
ephemeral AS (
    UPDATE runners r SET ephemeral_job = (SELECT l.id FROM leased l WHERE l.leased_by = r.id LIMIT 1)
     WHERE r.id = ANY (ARRAY(SELECT leased_by FROM leased)) AND r.ephemeral AND r.ephemeral_job IS NULL
),
events AS (
    INSERT INTO job_events (job_id, seq, kind, data) SELECT id, event_seq, 'state', jsonb_build_object(
        'state', 'leased', 'reason', NULL, 'runner', leased_by, 'epoch', epoch) FROM leased
),
-- An answered lease survives a crash: one that leased commits durably (the lock let others skip it).
durable AS (SELECT set_config('synchronous_commit', NULL, true) WHERE EXISTS (SELECT 1 FROM leased))
SELECT r.id AS runner, m.id IS NOT NULL AS grouped, r.capabilities, r.exclusive, r.sources,
       COALESCE(m.free, 0) AS free, least(m.oldest, now() - interval '1 second') AS leases_since,
       EXISTS (SELECT 1 FROM lane WHERE runner = r.id AND NOT fits) AS unfit_named, l.id, l.workspace,
       l.epoch, l.attempts, l.kind, l.payload, l.required_capabilities, l.priority, l.runner_id IS NOT NULL AS named,
       l.lease_expires_at, l.secrets, l.source, l.traceparent, l.pool, l.needs_workspace_runner,
       a.slots AS next_slots, a.negs AS next_negs, a.ids AS next_ids
  FROM r LEFT JOIN m USING (id) LEFT JOIN leased l ON l.leased_by = r.id LEFT JOIN durable ON true CROSS JOIN ahead a
 ORDER BY r.ord, l.runner_id IS NULL, l.priority DESC, l.id
