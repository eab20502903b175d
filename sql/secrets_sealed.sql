-- The sealed values of the names $2 in workspace $1, for the lease of a job that names them,
-- with which runners may receive each ('workspace' | 'any').
SELECT name, nonce, ciphertext, runners FROM secrets WHERE workspace = $1 AND name = ANY($2::text[])
