-- Turn feed events into deliveries (v1.4): each enabled webhook (up to $1, SKIP LOCKED: two
-- replicas never fan one out at once) reads up to $2 events of its workspace past its cursor,
-- as feed_page.sql does (below the snapshot's xmin, so none that commits later is passed), makes
-- a delivery of each that matches its `states`, and moves its cursor past all it read, in this
-- one statement: each event becomes one delivery per webhook, whoever runs it. Returns how many
-- webhooks it served and the most events it read for one (a full batch: run again).
WITH hooks AS (
    SELECT w.id, w.workspace, w.kinds, w.states, w.cursor_xid, w.cursor_job, w.cursor_seq
      FROM webhooks w
     WHERE w.disabled_at IS NULL
     ORDER BY w.id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT h.id AS webhook_id, h.states, e.xid, e.job_id, e.seq, e.kind, e.data, e.at
      FROM hooks h
     CROSS JOIN LATERAL (
        SELECT x.xid, x.job_id, x.seq, x.kind, x.data, x.at
          FROM unnest(h.kinds) AS k (kind)
         CROSS JOIN LATERAL (
            SELECT y.xid, y.job_id, y.seq, y.kind, y.data, y.at
              FROM job_events y
             WHERE y.workspace = h.workspace AND y.kind = k.kind
               AND (y.xid, y.job_id, y.seq) > (h.cursor_xid, h.cursor_job, h.cursor_seq)
               AND y.xid < (SELECT pg_snapshot_xmin(pg_current_snapshot()))
             ORDER BY y.xid, y.job_id, y.seq
             LIMIT $2
         ) AS x
         ORDER BY x.xid, x.job_id, x.seq
         LIMIT $2
     ) AS e
),
made AS (
    INSERT INTO webhook_deliveries (id, webhook_id, event_xid, job_id, seq, kind, data, at)
    SELECT webhook_delivery_id(), p.webhook_id, p.xid, p.job_id, p.seq, p.kind, p.data, p.at
      FROM picked p
     WHERE p.states IS NULL OR p.kind <> 'state' OR p.data ->> 'state' = ANY (p.states)
     ORDER BY p.xid, p.job_id, p.seq
    RETURNING webhook_id
),
last AS (
    SELECT DISTINCT ON (p.webhook_id) p.webhook_id, p.xid, p.job_id, p.seq
      FROM picked p
     ORDER BY p.webhook_id, p.xid DESC, p.job_id DESC, p.seq DESC
),
moved AS (
    UPDATE webhooks w
       SET cursor_xid = last.xid, cursor_job = last.job_id, cursor_seq = last.seq
      FROM last
     WHERE w.id = last.webhook_id
    RETURNING w.id
)
SELECT (SELECT count(*) FROM hooks) AS hooks,
       (SELECT COALESCE(max(n), 0) FROM (SELECT count(*) AS n FROM picked GROUP BY webhook_id) AS c)
           AS most,
       (SELECT count(*) FROM made) AS made, (SELECT count(*) FROM moved) AS moved
