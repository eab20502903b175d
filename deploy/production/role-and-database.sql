-- leasehold's own role and database on the Patroni cluster's primary. Run once, as the
-- superuser, after the cluster has bootstrapped (docs/operations.md, "Deploying on three
-- hosts"); the replicas' DATABASE_URL then names this role and database:
--
--   export LEASEHOLD_DB_PASSWORD=...      # the password leasehold.env's DATABASE_URL carries
--   PGPASSWORD=$PATRONI_SUPERUSER_PASSWORD psql -h 10.0.0.11 -U postgres -d postgres \
--       -f role-and-database.sql
--
-- The role owns its database and so, on PostgreSQL 15, the database's `public` schema: that is
-- all `leasehold serve` needs (its migrations create tables, indexes and constraints there and
-- its maintenance vacuums them). It is no superuser and can create no roles or databases.
\set ON_ERROR_STOP on
\getenv leasehold_password LEASEHOLD_DB_PASSWORD
\if :{?leasehold_password}
\else
DO $$ BEGIN RAISE EXCEPTION 'set LEASEHOLD_DB_PASSWORD to the leasehold role''s password'; END $$;
\endif

SET password_encryption = 'scram-sha-256';
CREATE ROLE leasehold LOGIN PASSWORD :'leasehold_password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
-- Lets each replica see every session's snapshot age (leasehold_snapshot_horizon_age, and the
-- claims' switch to remembered places while an old snapshot stands). Read-only statistics.
GRANT pg_read_all_stats TO leasehold;

CREATE DATABASE leasehold OWNER leasehold ENCODING 'UTF8' TEMPLATE template0;
-- Nobody else connects (the superuser still may).
REVOKE ALL ON DATABASE leasehold FROM PUBLIC;
