-- GET /v1/webhooks/{name}/deliveries (v1.4): a page of webhook $1's delivery log, newest first
-- (ids are time-ordered): $2 the last id of the previous page (exclusive) or NULL, $3 size.
SELECT d.id, d.event_xid::text::bigint AS xid, d.job_id, d.seq, d.kind, d.data, d.at, d.status,
       d.attempts, d.next_at, d.last_status, d.last_error, d.last_at, d.redelivery_of,
       d.created_at
  FROM webhook_deliveries d
 WHERE d.webhook_id = $1 AND ($2::uuid IS NULL OR d.id < $2::uuid)
 ORDER BY d.id DESC
 LIMIT $3
