-- Mint a join code: $1 sha256(code), $2 workspace, $3 owner of the runner it will enrol,
-- $4 approved_by, $5 ephemeral, $6 ttl seconds.
INSERT INTO join_codes (code_hash, workspace, owner, approved_by, ephemeral, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6::bigint * interval '1 second')
RETURNING expires_at
