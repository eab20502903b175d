-- A job as its workspace sees it: $1 id, $2 workspace. Another tenant's job is not found.
SELECT * FROM jobs WHERE id = $1 AND workspace = $2
