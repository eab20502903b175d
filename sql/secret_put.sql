-- Create or replace a workspace secret: $1 workspace, $2 name, $3 nonce, $4 sealed value,
-- $5 runners ('workspace' | 'any') and $6 dispatch ('member' | 'admin'), each NULL to keep
-- what the secret has (a new one takes 'workspace' and 'member': re-sealing passes NULLs).
-- Only the ciphertext is stored; the key never reaches the database.
INSERT INTO secrets (workspace, name, nonce, ciphertext, runners, dispatch)
VALUES ($1, $2, $3, $4, COALESCE($5::text, 'workspace'), COALESCE($6::text, 'member'))
ON CONFLICT (workspace, name) DO UPDATE
   SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = now(),
       runners = COALESCE($5::text, secrets.runners),
       dispatch = COALESCE($6::text, secrets.dispatch)
