-- Placement and trust (shared/PROTOCOL.md v1.1 "Placement", "Repository sources").

-- A runner whose reported version is below LEASEHOLD_MIN_RUNNER_VERSION (or is absent or not
-- semver). Semver precedence is decided in Rust (src/domain/version.rs) when a version is
-- recorded, and every replica re-judges all runners at start, so SQL only reads the flag: an
-- outdated runner stops no no-runner clock and counts for no preflight match.
ALTER TABLE runners ADD COLUMN outdated boolean NOT NULL DEFAULT false;

-- Repository targets a runner advertises. A runner's own calls create them 'pending' and
-- never change a status; only an admin (or a personal runner's owner) approves or revokes.
CREATE TABLE runner_repo_targets (
    runner_id   uuid        NOT NULL REFERENCES runners (id),
    id          uuid        NOT NULL PRIMARY KEY,
    provider    text        NOT NULL,
    repository  text        NOT NULL,
    label       text,
    status      text        NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'approved', 'revoked')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (runner_id, provider, repository)
);
