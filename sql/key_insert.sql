-- $1 id, $2 workspace, $3 subject, $4 role, $5 sha256(token)
INSERT INTO api_keys (id, workspace, subject, role, token_hash)
VALUES ($1, $2, $3, $4, $5)
