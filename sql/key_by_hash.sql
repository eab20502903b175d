-- Authenticate an API key: $1 sha256(token). Revoked keys are never found.
SELECT id, workspace, subject, role
  FROM api_keys
 WHERE token_hash = $1 AND revoked_at IS NULL
