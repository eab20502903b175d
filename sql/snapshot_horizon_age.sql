-- How many transactions old the oldest thing is that keeps dead row versions (and the claim
-- index entries of jobs already taken) from going: a session's snapshot or transaction, a
-- replication slot, a prepared transaction. Read once a second by each replica: its plain
-- claims start from remembered places while this is old (store::bounds). A role that may not
-- see other sessions' snapshots reads its own only, and its claims start at the head, as
-- before.
SELECT greatest((SELECT max(age(backend_xmin)) FROM pg_stat_activity),
                (SELECT max(age(backend_xid)) FROM pg_stat_activity),
                (SELECT max(age(xmin)) FROM pg_replication_slots),
                (SELECT max(age(transaction)) FROM pg_prepared_xacts),
                0)::bigint AS age
