-- The safety net for lost notifications: of the queues this replica has waiters on (pool owners
-- $1, named runners $2), those with a parked job. One query per replica per recheck interval,
-- however many waiters it holds.
SELECT DISTINCT owner, runner_id FROM jobs
 WHERE state = 'parked' AND runner_id IS NULL AND owner = ANY($1)
UNION
SELECT DISTINCT owner, runner_id FROM jobs
 WHERE state = 'parked' AND runner_id = ANY($2)
