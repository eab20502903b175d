-- Queue depth for /metrics, once per replica per interval: parked and leased jobs in the whole
-- database. Each count reads a partial index on its state, never the settled jobs.
SELECT
    (SELECT count(*) FROM jobs WHERE state = 'parked') AS parked,
    (SELECT count(*) FROM jobs WHERE state = 'leased') AS leased
