-- Hand out a join URL's sealed connect payload, once: $1 the short code's lookup hash. The row
-- is locked and its payload cleared in this one statement; of two concurrent calls (through any
-- replicas) the second waits for the first, re-checks the row, sees url_sealed NULL and gets
-- nothing. A used or expired join code hands out nothing either.
UPDATE join_codes j
   SET url_sealed = NULL
  FROM (SELECT code_hash, url_sealed
          FROM join_codes
         WHERE url_hash = $1 AND url_sealed IS NOT NULL
           AND used_at IS NULL AND expires_at > now()
           FOR UPDATE) old
 WHERE j.code_hash = old.code_hash
RETURNING old.url_sealed
