-- Retention of the webhook delivery log (v1.4): delete up to $1 deliveries that are settled
-- (delivered or failed) and were made more than $2 ms ago (the jobs' retention window).
-- SKIP LOCKED: replicas sweeping at once never take the same row. Returns how many.
WITH gone AS (
    DELETE FROM webhook_deliveries
     WHERE id IN (
        SELECT id FROM webhook_deliveries
         WHERE created_at < now() - $2::bigint * interval '1 millisecond'
           AND status <> 'pending'
         ORDER BY created_at
         LIMIT $1
           FOR UPDATE SKIP LOCKED)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone
