-- First statement of a lease transaction, and its authentication: find the live runner by
-- $1 sha256(token) and lock its row, so concurrent lease calls of one runner serialise and
-- capacity holds. Record what the call advertises (NULL keeps): $2 capabilities, $3 exclusive
-- set (its names are always also advertised capabilities), $4 version; and mark it seen once
-- last_seen_at is older than $5 ms. The row is written only when one of those changes: most
-- lease calls only lock it (FOR NO KEY UPDATE, which a complete's or heartbeat's own runner
-- look-up never waits for). No row: the token is not live (unknown, revoked, spent).
WITH locked AS (
    SELECT r.id, r.owner, r.workspace, r.version, r.capabilities, r.exclusive, r.last_seen_at,
           CASE WHEN $2::text[] IS NULL AND $3::text[] IS NULL THEN r.capabilities
                ELSE ARRAY(SELECT DISTINCT c
                             FROM unnest(COALESCE($2, r.capabilities)
                                         || COALESCE($3, r.exclusive)) AS c
                            ORDER BY c) END AS advertised
      FROM runners r
     WHERE r.token_hash = $1
       AND r.revoked_at IS NULL
       AND NOT (r.ephemeral AND runner_spent(r.ephemeral, r.ephemeral_job))
       FOR NO KEY UPDATE
),
recorded AS (
    UPDATE runners r
       SET last_seen_at = now(),
           capabilities = l.advertised,
           exclusive = COALESCE($3, r.exclusive),
           version = COALESCE($4, r.version)
      FROM locked l
     WHERE r.id = l.id
       AND (l.last_seen_at IS NULL
            OR l.last_seen_at < now() - $5::bigint * interval '1 millisecond'
            OR l.advertised IS DISTINCT FROM l.capabilities
            OR COALESCE($3, l.exclusive) IS DISTINCT FROM l.exclusive
            OR COALESCE($4, l.version) IS DISTINCT FROM l.version)
    RETURNING r.version
)
SELECT l.id, l.owner, l.workspace, COALESCE((SELECT version FROM recorded), l.version) AS version
  FROM locked l
