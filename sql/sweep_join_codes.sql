-- Dead join codes (expired, used or not) are deleted in batches. $1 batch size.
DELETE FROM join_codes
 WHERE code_hash IN (SELECT code_hash FROM join_codes
                      WHERE expires_at < now()
                      LIMIT $1
                        FOR UPDATE SKIP LOCKED)
