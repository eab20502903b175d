-- The sealed values of the names $2 in workspace $1, for the lease of a job that names them.
SELECT name, nonce, ciphertext FROM secrets WHERE workspace = $1 AND name = ANY($2::text[])
