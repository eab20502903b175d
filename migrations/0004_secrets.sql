-- Workspace secrets, sealed (shared/PROTOCOL.md v1.1 "Secrets").
--
-- Only ChaCha20-Poly1305 ciphertexts are stored: the key lives with the replicas
-- (LEASEHOLD_SECRETS_KEY), never in the database, and the workspace and name are bound into
-- each value's tag as associated data, so a row copied to another name does not open.
CREATE TABLE secrets (
    workspace   text        NOT NULL,
    name        text        NOT NULL CHECK (name ~ '^[A-Z_][A-Z0-9_]{0,63}$'),
    nonce       bytea       NOT NULL CHECK (length(nonce) = 12),
    ciphertext  bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace, name)
);
