-- Claim due deliveries (v1.4), as a lease claims jobs: $1 lease (ms), $2 most to claim, $3 most
-- in flight per webhook. Each enabled webhook offers its due pending deliveries whose lease is
-- free, oldest first, up to what it has room for under $3 counting the ones leased now (so a
-- slow endpoint holds at most $3 of the replicas' sends, and the others go on); a delivery waits
-- while an earlier event of its job is still pending for that webhook (feed order per job).
-- SKIP LOCKED and the lease: two replicas never send one delivery at once, and one that dies
-- mid-delivery leaves it to another when the lease lapses (attempts counts every try started).
WITH busy AS (
    SELECT b.webhook_id, count(*) AS n
      FROM webhook_deliveries b
     WHERE b.status = 'pending' AND b.lease_until IS NOT NULL AND b.lease_until > now()
     GROUP BY b.webhook_id
),
room AS (
    SELECT w.id, $3::bigint - COALESCE(busy.n, 0) AS free
      FROM webhooks w
      LEFT JOIN busy ON busy.webhook_id = w.id
     WHERE w.disabled_at IS NULL AND $3::bigint - COALESCE(busy.n, 0) > 0
),
due AS (
    SELECT d.id, d.next_at
      FROM room r
     CROSS JOIN LATERAL (
        SELECT d.id, d.next_at
          FROM webhook_deliveries d
         WHERE d.webhook_id = r.id AND d.status = 'pending' AND d.next_at <= now()
           AND (d.lease_until IS NULL OR d.lease_until <= now())
           AND NOT EXISTS (
               SELECT 1 FROM webhook_deliveries p
                WHERE p.webhook_id = d.webhook_id AND p.job_id = d.job_id
                  AND p.status = 'pending' AND p.seq < d.seq)
         ORDER BY d.next_at
         LIMIT r.free
     ) AS d
     ORDER BY d.next_at
     LIMIT $2
),
taken AS (
    SELECT d.id
      FROM webhook_deliveries d
     WHERE d.id IN (SELECT id FROM due)
       AND d.status = 'pending' AND (d.lease_until IS NULL OR d.lease_until <= now())
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET lease_until = now() + $1::bigint * interval '1 millisecond',
       lease_token = gen_random_uuid(), attempts = d.attempts + 1
  FROM taken, webhooks w
 WHERE d.id = taken.id AND w.id = d.webhook_id
RETURNING d.id, d.lease_token, d.attempts, d.event_xid::text::bigint AS xid, d.job_id, d.seq,
          d.kind, d.data, d.at, w.workspace, w.name, w.url, w.secret
