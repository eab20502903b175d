-- Burn a join code, once: $1 sha256(code). Of two concurrent burns the second re-checks the row
-- after the first commits, sees used_at set, and gets no row.
UPDATE join_codes SET used_at = now()
 WHERE code_hash = $1 AND used_at IS NULL AND expires_at > now()
RETURNING workspace, owner, approved_by, ephemeral
