-- Which of the jobs $1 (ids) an admin dispatched or last retried (contract v1.3, "Secrets at
-- every hand-over"): a lease asks it for the jobs it took that name a `dispatch: admin` secret.
-- A job parked before the dispatcher was recorded (migration 0031) counts as a member's.
SELECT id, dispatcher_role IS NOT DISTINCT FROM 'admin' AS by_admin
  FROM jobs WHERE id = ANY($1::uuid[])
