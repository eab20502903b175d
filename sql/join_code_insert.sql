-- Mint a join code: $1 sha256(code), $2 workspace, $3 owner of the runner it will enrol,
-- $4 approved_by, $5 ephemeral, $6 ttl seconds, $7 the join URL's lookup hash and $8 its sealed
-- connect payload (both NULL without a join URL).
INSERT INTO join_codes (code_hash, workspace, owner, approved_by, ephemeral, expires_at,
                        url_hash, url_sealed)
VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 second', $7, $8)
RETURNING expires_at
