-- A webhook of workspace $1 by name $2 (its deliveries' calls).
SELECT w.id, w.workspace, w.name, w.url, w.kinds, w.states, w.secret, w.disabled_at,
       w.disabled_reason, w.failing_since, w.created_at, w.updated_at, false AS created
  FROM webhooks w
 WHERE w.workspace = $1 AND w.name = $2
