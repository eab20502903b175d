-- Leases a runner holds now. Run after runner_lock_for_lease, so its snapshot sees every
-- lease committed by a concurrent lease call of the same runner.
SELECT count(*) FROM jobs WHERE leased_by = $1 AND state = 'leased'
