-- Extend a lease, fenced: $1 id, $2 epoch, $3 runner id, $4 lease ttl ms.
UPDATE jobs SET lease_expires_at = now() + $4::bigint * interval '1 millisecond'
 WHERE id = $1 AND epoch = $2 AND leased_by = $3 AND state = 'leased'
RETURNING lease_expires_at
