-- Create or replace a workspace secret: $1 workspace, $2 name, $3 nonce, $4 sealed value.
-- Only the ciphertext is stored; the key never reaches the database.
INSERT INTO secrets (workspace, name, nonce, ciphertext)
VALUES ($1, $2, $3, $4)
ON CONFLICT (workspace, name) DO UPDATE
   SET nonce = EXCLUDED.nonce, ciphertext = EXCLUDED.ciphertext, updated_at = now()
