-- A tick's lock (hub::dispatcher), before its claims in the same transaction: lock the rows of
-- the runners it claims for, in id order (two replicas' ticks never deadlock on them), so the
-- claims that follow count each runner's leases in a snapshot taken after every earlier claim of
-- it committed: concurrent claims of one runner, on any replica, never take more than capacity -
-- held. Also the tick's commit mode: $2 false (no report in the tick) lets it commit without
-- waiting for the WAL, which a claim that leases anything takes back (claim.sql).
-- $1 runner ids; $2 whether the tick carries reports. Rows: the ids locked (live or not).
WITH mode AS (
    SELECT set_config('synchronous_commit',
                      CASE WHEN $2 THEN current_setting('synchronous_commit') ELSE 'off' END,
                      true) AS synchronous_commit
)
SELECT r.id FROM runners r, mode WHERE r.id = ANY ($1::uuid[]) ORDER BY r.id FOR NO KEY UPDATE OF r
