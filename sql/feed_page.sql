-- A page of a workspace's feed (v1.4): $1 workspace, $2 kinds, $3..$5 the cursor's position
-- (transaction id as bigint, job id, seq; exclusive), $6 page size. Only events whose
-- transaction id is below the snapshot's xmin are read: every transaction that could still
-- commit an event at or below that position has ended, so a reader that moves its cursor to
-- the last row answered never passes an event that commits later (migration 0050). Each kind
-- is one range of job_events_feed in (xid, job_id, seq) order; the ranges are merged.
SELECT e.xid::text::bigint AS xid, e.job_id, e.seq, e.kind, e.data, e.at
  FROM unnest($2::text[]) AS k (kind)
 CROSS JOIN LATERAL (
    SELECT x.xid, x.job_id, x.seq, x.kind, x.data, x.at
      FROM job_events x
     WHERE x.workspace = $1 AND x.kind = k.kind
       AND (x.xid, x.job_id, x.seq) > ($3::bigint::text::xid8, $4::uuid, $5::integer)
       AND x.xid < (SELECT pg_snapshot_xmin(pg_current_snapshot()))
     ORDER BY x.xid, x.job_id, x.seq
     LIMIT $6
 ) AS e
 ORDER BY e.xid, e.job_id, e.seq
 LIMIT $6
