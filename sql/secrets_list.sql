-- A workspace's secrets by name, with their scope, never a value: $1 workspace.
SELECT name, runners, dispatch, created_at, updated_at FROM secrets WHERE workspace = $1 ORDER BY name
