-- leasehold schema, v1.
--
-- PostgreSQL is the only state. A job row *is* the lease (ARCHITECTURE.md rule 1): the
-- claim sets state='leased', bumps epoch and stamps leased_by / lease_expires_at in one
-- statement, and every later transition is fenced on (id, epoch, leased_by, state).

-- API keys: operators and dispatchers. Only SHA-256 of the whole token is stored.
CREATE TABLE api_keys (
    id          uuid        PRIMARY KEY,
    workspace   text        NOT NULL,
    subject     text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('member', 'admin')),
    token_hash  bytea       NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Runners, both tiers. owner is a subject (personal tier) or 'ws:<workspace>'.
CREATE TABLE runners (
    id             uuid        PRIMARY KEY,
    owner          text        NOT NULL,
    workspace      text        NOT NULL,
    label          text        NOT NULL,
    os             text,
    version        text,
    capabilities   text[]      NOT NULL DEFAULT '{}',
    capacity       integer     NOT NULL CHECK (capacity BETWEEN 1 AND 256),
    token_hash     bytea       NOT NULL UNIQUE,
    approved_by    text        NOT NULL,
    ephemeral      boolean     NOT NULL DEFAULT false,
    -- For an ephemeral runner: the first job it leased. Once that job settles the token is dead.
    ephemeral_job  uuid,
    last_seen_at   timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
CREATE INDEX runners_live_by_owner ON runners (owner) WHERE revoked_at IS NULL;
CREATE INDEX runners_live_by_workspace ON runners (workspace) WHERE revoked_at IS NULL;

-- Single-use join codes. Burned by setting used_at; swept once dead.
CREATE TABLE join_codes (
    code_hash    bytea       PRIMARY KEY,
    workspace    text        NOT NULL,
    owner        text        NOT NULL,
    approved_by  text        NOT NULL,
    ephemeral    boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX join_codes_expiry ON join_codes (expires_at);

CREATE TABLE jobs (
    id                    uuid        PRIMARY KEY,          -- UUIDv7: dispatch order
    workspace             text        NOT NULL,
    owner                 text        NOT NULL,
    runner_id             uuid,                             -- NULL: the owner's pool ('*')
    state                 text        NOT NULL CHECK (state IN
                              ('parked', 'leased', 'completed', 'failed', 'cancelled', 'rejected')),
    kind                  text        NOT NULL,
    payload               jsonb       NOT NULL,
    required_capabilities text[]      NOT NULL DEFAULT '{}',
    priority              integer     NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    epoch                 bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    attempts              integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts          integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    leased_by             uuid,
    leased_at             timestamptz,
    lease_expires_at      timestamptz,
    no_runner_timeout_ms  bigint      NOT NULL,
    -- When the sweeper next asks "has a runner that could take this been online lately?".
    -- Starts at dispatch + no_runner_timeout and is pushed forward while capable runners are seen.
    no_runner_check_at    timestamptz NOT NULL,
    queue_deadline        timestamptz,
    idempotency_key       text,
    billing_tenant        text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    finished_at           timestamptz,
    result                jsonb,
    error                 jsonb,
    provenance            jsonb,
    -- Highest event seq appended so far; bumped by the statement that appends.
    event_seq             integer     NOT NULL DEFAULT 0,
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL)),
    CHECK ((state IN ('parked', 'leased')) = (finished_at IS NULL))
);

-- One partial index per claim predicate: the pool claim and the named-runner claim.
-- Only parked rows are in them, so their size tracks queue depth, not history.
CREATE INDEX jobs_claim_pool ON jobs (owner, priority DESC, id)
    WHERE state = 'parked' AND runner_id IS NULL;
CREATE INDEX jobs_claim_named ON jobs (runner_id, priority DESC, id)
    WHERE state = 'parked' AND runner_id IS NOT NULL;
-- Capacity accounting and lease expiry.
CREATE INDEX jobs_leased_by ON jobs (leased_by) WHERE state = 'leased';
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE state = 'leased';
-- Sweeper predicates.
CREATE INDEX jobs_no_runner_check ON jobs (no_runner_check_at) WHERE state = 'parked';
CREATE INDEX jobs_queue_deadline ON jobs (queue_deadline)
    WHERE state = 'parked' AND queue_deadline IS NOT NULL;
-- Listing a workspace's jobs by id, and the first-dispatch-wins idempotency key.
CREATE INDEX jobs_by_workspace ON jobs (workspace, id);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (workspace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- A hot, high-churn table: leave room for HOT updates and vacuum early and often.
ALTER TABLE jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE job_events (
    job_id  uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq     integer     NOT NULL CHECK (seq >= 1),
    at      timestamptz NOT NULL DEFAULT now(),
    kind    text        NOT NULL,
    data    jsonb       NOT NULL,
    PRIMARY KEY (job_id, seq)
);

-- Presence on the database clock: online within the window, dormant before, never if unseen.
CREATE FUNCTION runner_presence(last_seen timestamptz, window_ms bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN last_seen IS NULL THEN 'never'
        WHEN last_seen > now() - window_ms * interval '1 millisecond' THEN 'online'
        ELSE 'dormant'
    END
$$;
