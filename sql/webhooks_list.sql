-- GET /v1/webhooks (v1.4): the webhooks of workspace $1 by name (the secret is selected only
-- to keep one row mapping; the API never shows it after creation).
SELECT w.id, w.workspace, w.name, w.url, w.kinds, w.states, w.secret, w.disabled_at,
       w.disabled_reason, w.failing_since, w.created_at, w.updated_at, false AS created
  FROM webhooks w
 WHERE w.workspace = $1
 ORDER BY w.name
