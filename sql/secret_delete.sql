-- Delete a secret: $1 workspace, $2 name. Zero rows: no such secret (404).
DELETE FROM secrets WHERE workspace = $1 AND name = $2
