-- A delivery's try ended (v1.4): $1 delivery, $2 its lease token (fenced: a replica whose lease
-- lapsed and was taken over changes nothing), $3 delivered (a 2xx), $4 the status code or
-- NULL, $5 the error or NULL, $6 first retry delay (ms, doubling per try), $7 its cap (ms), $8
-- how long after it was made retries go on (ms; then it is `failed`), $9 how long every try of
-- a webhook may fail before it is disabled (ms). The webhook's row is written only when its
-- health changes (a failing streak starts or ends, or it is disabled), so a healthy webhook's
-- deliveries never queue on it. No row: the lease was lost.
WITH done AS (
    UPDATE webhook_deliveries d
       SET status = CASE WHEN $3 THEN 'delivered'
                         WHEN now() >= d.retry_from + $8::bigint * interval '1 millisecond'
                             THEN 'failed'
                         ELSE 'pending' END,
           next_at = now() + least($6::bigint::float8 * power(2::float8, least(d.attempts - 1, 40)),
                                   $7::bigint::float8) * interval '1 millisecond',
           lease_until = NULL, lease_token = NULL,
           last_status = $4, last_error = $5, last_at = now()
     WHERE d.id = $1 AND d.lease_token = $2
    RETURNING d.webhook_id, d.status
),
health AS (
    UPDATE webhooks w
       SET failing_since = CASE WHEN $3 THEN NULL ELSE COALESCE(w.failing_since, now()) END,
           disabled_at = CASE
               WHEN NOT $3 AND w.failing_since <= now() - $9::bigint * interval '1 millisecond'
                   THEN now() END,
           disabled_reason = CASE
               WHEN NOT $3 AND w.failing_since <= now() - $9::bigint * interval '1 millisecond'
                   THEN 'every delivery failed since ' || w.failing_since::text END
      FROM done
     WHERE w.id = done.webhook_id AND w.disabled_at IS NULL
       AND (($3 AND w.failing_since IS NOT NULL)
            OR (NOT $3 AND (w.failing_since IS NULL
                            OR w.failing_since <= now() - $9::bigint * interval '1 millisecond')))
    RETURNING w.disabled_at
)
SELECT done.status, (SELECT h.disabled_at IS NOT NULL FROM health h) AS disabled FROM done
