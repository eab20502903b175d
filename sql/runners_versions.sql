-- Every live runner's version and verdict, re-judged by each replica at start against its
-- LEASEHOLD_MIN_RUNNER_VERSION.
SELECT id, version, outdated FROM runners WHERE revoked_at IS NULL
