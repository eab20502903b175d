-- How many transactions old the oldest thing is that keeps this database's dead row versions
-- (and the claim index entries of jobs already taken) from going: a session's snapshot or
-- transaction in this database, a walsender's standby feedback (no database), a replication
-- slot, a prepared transaction of this database. Sessions of other databases hold no horizon
-- for this one's tables. Read once a second by each replica: its plain claims start from
-- remembered places while this is old (store::horizon, hub::dispatcher). A role that may not see other sessions'
-- snapshots reads its own only, and its claims start at the head, as before.
SELECT greatest((SELECT max(greatest(age(backend_xmin), age(backend_xid)))
                   FROM pg_stat_activity
                  WHERE datname = current_database() OR datname IS NULL),
                (SELECT max(age(xmin)) FROM pg_replication_slots),
                (SELECT max(age(transaction)) FROM pg_prepared_xacts
                  WHERE database = current_database()),
                0)::bigint AS age
