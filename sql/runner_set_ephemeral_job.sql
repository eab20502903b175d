-- Remember an ephemeral runner's first job: $1 runner id, $2 job id.
UPDATE runners SET ephemeral_job = $2 WHERE id = $1 AND ephemeral_job IS NULL
