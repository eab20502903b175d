-- The sealed values of the names $2 in workspace $1, for the lease of a job that names them,
-- with which runners may receive each ('workspace' | 'any') and who may name it ('member' |
-- 'admin': a job whose dispatcher is not an admin gets no `admin` secret).
SELECT name, nonce, ciphertext, runners, dispatch FROM secrets
 WHERE workspace = $1 AND name = ANY($2::text[])
