-- Webhooks (contract v1.4, "Webhooks"). A webhook follows its workspace's feed like a reader
-- (`cursor_*`, advanced by webhook_fanout.sql in the transaction that writes the deliveries,
-- so each matching event becomes exactly one delivery). Deliveries are rows that replicas
-- claim as jobs are: FOR UPDATE SKIP LOCKED and a lease (`lease_until`, `lease_token`); a
-- replica that dies mid-delivery leaves the row to another once its lease lapses.
CREATE TABLE webhooks (
    id              uuid        PRIMARY KEY,
    workspace       text        NOT NULL,
    name            text        NOT NULL,
    url             text        NOT NULL,
    kinds           text[]      NOT NULL,
    -- Only these `state` values of `state` events; NULL: every one.
    states          text[],
    -- The signing key (whsec_...): kept to sign every delivery (shown once, on creation).
    secret          text        NOT NULL,
    cursor_xid      xid8        NOT NULL,
    cursor_job      uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    cursor_seq      integer     NOT NULL DEFAULT 0,
    -- Since when every try of every delivery failed (NULL: the last one succeeded).
    failing_since   timestamptz,
    disabled_at     timestamptz,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace, name)
);

CREATE TABLE webhook_deliveries (
    id           uuid        PRIMARY KEY,
    webhook_id   uuid        NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    -- The event as the feed answers it (a copy: retention may delete the event first).
    event_xid    xid8        NOT NULL,
    job_id       uuid        NOT NULL,
    seq          integer     NOT NULL,
    kind         text        NOT NULL,
    data         jsonb       NOT NULL,
    at           timestamptz NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts     integer     NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT now(),
    -- Retries stop this long after it was made (or redelivered by hand).
    retry_from   timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz,
    lease_token  uuid,
    last_status  integer,
    last_error   text,
    last_at      timestamptz,
    redelivery_of uuid,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The claim: each webhook's due pending deliveries, and how many it has in flight.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (webhook_id, next_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id)
    WHERE status = 'pending' AND lease_until IS NOT NULL;
-- In feed order per job: a delivery waits for the earlier pending ones of its job.
CREATE INDEX webhook_deliveries_job ON webhook_deliveries (webhook_id, job_id, seq)
    WHERE status = 'pending';
-- The delivery log, newest first (ids are UUIDv7).
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, id);
-- Retention of the log.
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created_at);

-- A time-ordered id made in SQL (UUIDv7 layout: milliseconds, then random bits) for the
-- deliveries webhook_fanout.sql makes, so the log sorts newest first by id.
CREATE FUNCTION webhook_delivery_id() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                  PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                    FROM 3)
                  FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
