-- A workspace's secrets by name, never a value: $1 workspace.
SELECT name, created_at, updated_at FROM secrets WHERE workspace = $1 ORDER BY name
