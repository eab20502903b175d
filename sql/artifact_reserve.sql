-- An upload's reservation under the artifact bounds (migration 0035): blob $1 of job $2 moves
-- to $7 bytes, at least $6 (with $3, it starts: inserted in store $4 under key $5, holding one
-- of the job's files). Bounds: $8 files and $9 bytes per job, $10 bytes per workspace (NULL:
-- none). `reserved` the bytes it now holds; NULL with `refused` the bound that refused it
-- (`files`, `job_bytes`, `workspace_bytes`) or `gone`.
SELECT reserved, refused FROM artifact_reserve($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
