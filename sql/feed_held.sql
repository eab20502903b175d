-- Whether workspace $1 has events of kinds $2 past the cursor ($3..$5, as feed_page.sql) that
-- this statement's snapshot sees committed but feed_page.sql may not answer yet: their
-- transaction id is not below the snapshot's xmin, because an older transaction is still open.
-- A read that found a short page then looks again shortly (hub/feed.rs), so a caller reads its
-- own writes. One index range per kind.
SELECT EXISTS (
    SELECT 1
      FROM unnest($2::text[]) AS k (kind)
     CROSS JOIN LATERAL (
        SELECT 1
          FROM job_events x
         WHERE x.workspace = $1 AND x.kind = k.kind
           AND (x.xid, x.job_id, x.seq) > ($3::bigint::text::xid8, $4::uuid, $5::integer)
           AND x.xid >= (SELECT pg_snapshot_xmin(pg_current_snapshot()))
         LIMIT 1
     ) AS h
) AS held
