-- Wake-ups for other replicas, sent after the durable transaction committed, on the notifier's
-- own connection (synchronous_commit off for its session). $1 payloads, many in one statement.
SELECT pg_notify('leasehold', payload) FROM unnest($1::text[]) AS payload
