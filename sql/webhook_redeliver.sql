-- POST /v1/webhooks/{name}/deliveries/{id}/redeliver (v1.4): a new delivery $1 of the event of
-- delivery $3 of webhook $2, due now, with a day of retries of its own (GitHub's "Redeliver").
-- No row: the webhook has no such delivery.
INSERT INTO webhook_deliveries (id, webhook_id, event_xid, job_id, seq, kind, data, at,
                                redelivery_of)
SELECT $1, d.webhook_id, d.event_xid, d.job_id, d.seq, d.kind, d.data, d.at, d.id
  FROM webhook_deliveries d
 WHERE d.id = $3 AND d.webhook_id = $2
RETURNING id, event_xid::text::bigint AS xid, job_id, seq, kind, data, at, status, attempts,
          next_at, last_status, last_error, last_at, redelivery_of, created_at
