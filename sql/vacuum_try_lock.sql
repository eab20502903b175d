-- One replica at a time vacuums the job table after an old snapshot ends (hub::vacuum): a
-- session-level advisory lock, held until the vacuum's own connection closes. False: another
-- replica is at it. The key is "lh_vacuu" as a bigint (the migrator's is another number).
SELECT pg_try_advisory_lock(x'6c685f7661637575'::bigint) AS locked
