-- Placement and trust (shared/PROTOCOL.md v1.1 "Placement"), beside the columns 0002 added.

-- A runner whose reported version is below LEASEHOLD_MIN_RUNNER_VERSION (or is absent or not
-- semver). Semver precedence is decided in Rust (src/domain/version.rs) when a version is
-- recorded, and every replica re-judges all runners at start, so SQL only reads the flag: an
-- outdated runner stops no no-runner clock and counts for no preflight match.
ALTER TABLE runners ADD COLUMN outdated boolean NOT NULL DEFAULT false;
