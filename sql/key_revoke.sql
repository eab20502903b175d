-- $1 key id, $2 caller's workspace. Zero rows: unknown, another tenant's, or already revoked.
UPDATE api_keys SET revoked_at = now()
 WHERE id = $1 AND workspace = $2 AND revoked_at IS NULL
