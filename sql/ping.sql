-- Readiness: the pool reaches the database.
SELECT 1
