-- The safety net for lost notifications: of the queues this replica has waiters on (pool queues
-- as pairs of workspace $1 and owner $2, 'any' pools of workspaces $3, named runners $4), those
-- with a parked job. One query per replica per recheck interval, however many waiters it holds;
-- each queue is one probe of its claim index.
SELECT q.workspace, q.owner, NULL::uuid AS runner_id
  FROM unnest($1::text[], $2::text[]) AS q (workspace, owner)
 WHERE EXISTS (SELECT 1 FROM jobs j
                WHERE j.workspace = q.workspace AND j.owner = q.owner
                  AND j.runner_id IS NULL AND j.state = 'parked')
UNION ALL
SELECT w.workspace, NULL, NULL
  FROM unnest($3::text[]) AS w (workspace)
 WHERE EXISTS (SELECT 1 FROM jobs j
                WHERE j.workspace = w.workspace AND j.pool = 'any' AND j.state = 'parked')
UNION ALL
SELECT NULL, NULL, n.id
  FROM unnest($4::uuid[]) AS n (id)
 WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.runner_id = n.id AND j.state = 'parked')
