-- Mark runners as seen now: $1 ids. One statement for every runner a replica holds a poll for.
UPDATE runners SET last_seen_at = now()
 WHERE id = ANY($1) AND revoked_at IS NULL
