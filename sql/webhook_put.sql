-- PUT /v1/webhooks/{name} (v1.4): create or replace a webhook of workspace $2 named $3: $1 the
-- id of a new one, $4 url, $5 kinds, $6 states (NULL: every state), $7 the secret of a new one
-- (a replace keeps its secret), $8 most webhooks a workspace may have. A replace enables a
-- disabled webhook; it then follows the feed from now, as a new one does (the events of the
-- time it was disabled are not delivered). No row: the workspace has $8 webhooks already and
-- this name is new. `created` tells a new one from a replace.
INSERT INTO webhooks AS w (id, workspace, name, url, kinds, states, secret, cursor_xid)
SELECT $1, $2, $3, $4, $5, $6, $7, pg_snapshot_xmin(pg_current_snapshot())
 WHERE (SELECT count(*) FROM webhooks c WHERE c.workspace = $2) < $8
    OR EXISTS (SELECT 1 FROM webhooks c WHERE c.workspace = $2 AND c.name = $3)
ON CONFLICT (workspace, name) DO UPDATE
   SET url = EXCLUDED.url, kinds = EXCLUDED.kinds, states = EXCLUDED.states,
       updated_at = now(),
       cursor_xid = CASE WHEN w.disabled_at IS NULL THEN w.cursor_xid ELSE EXCLUDED.cursor_xid END,
       cursor_job = CASE WHEN w.disabled_at IS NULL THEN w.cursor_job
                         ELSE '00000000-0000-0000-0000-000000000000' END,
       cursor_seq = CASE WHEN w.disabled_at IS NULL THEN w.cursor_seq ELSE 0 END,
       disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
RETURNING w.id, w.workspace, w.name, w.url, w.kinds, w.states, w.secret, w.disabled_at,
          w.disabled_reason, w.failing_since, w.created_at, w.updated_at, (w.xmax = 0) AS created
