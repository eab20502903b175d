-- A runner's leases counted from a place (issue 19, the soak). The claims count a runner's
-- leases to keep its capacity; the count read jobs_leased_by, which keeps an entry for every
-- lease the runner ever held until that row version is dead to every snapshot, so under an
-- analytics query held for ten minutes each claim walked one entry per job its runner had run
-- since (10,648 a claim in round 9's soak: most of the claim's time).
--
-- The index now carries leased_at after leased_by, and the claims stamp leased_at with the
-- clock at the moment they take the job (clock_timestamp(), after the runner row lock was
-- granted), so a replica can give the count a lower bound on leased_at that every lease the
-- runner still holds is at or after (store::lease says why the bound it remembers is one).
-- Entries before the bound are skipped in the index, without reading their rows.
--
-- The same index serves every other count of a runner's leases (listings, heartbeats,
-- revocation) through its first column, as before.
--
-- Built inside the migration's transaction, like every index before it: writes to `jobs` wait
-- while it reads the table once (the index itself holds only the leased rows).
CREATE INDEX jobs_leased_since ON jobs (leased_by, leased_at) WHERE state = 'leased';
DROP INDEX jobs_leased_by;
