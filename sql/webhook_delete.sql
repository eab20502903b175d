-- DELETE /v1/webhooks/{name} (v1.4): workspace $1, name $2; its deliveries go with it
-- (ON DELETE CASCADE), so a delivery in flight finds no row when it reports.
DELETE FROM webhooks WHERE workspace = $1 AND name = $2
