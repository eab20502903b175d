//! # leasehold
//!
//! A durable, multi-replica job lease service for self-hosted runners, on PostgreSQL.
//! Dispatchers park jobs; runners long-poll any replica for a lease, heartbeat while they
//! work and report results. The job row *is* the lease, fenced by its epoch; replicas are
//! stateless and wake their long-pollers with LISTEN/NOTIFY.
//!
//! # Layout
//!
//! - [`wire`], [`client`], [`tls`], [`runner`], [`cli`]: re-exported from the
//!   `leasehold-runner` crate (crates/runner), which builds without the server side: the
//!   contract's wire types, the typed HTTP client, the TLS trust both ends share, the reference
//!   runner and the people's command line.
//! - [`domain`]: pure rules, no I/O: credentials, owners, capabilities, job states.
//! - [`store`]: PostgreSQL: the pool, one function per statement in `sql/`, the records its
//!   rows become, migrations, the LISTEN connection.
//! - [`hub`]: long-poll waiters and their wake-up, the notifier, the sweeper, and the
//!   operations the API calls (job transitions with the wake each owes, and every other store
//!   call it makes: the API never reaches the store or the configuration through the hub).
//! - [`api`]: the axum router, authentication, the error type and its JSON mapping; the
//!   operator tools for agents over MCP ([`api::mcp`], at `/mcp`).
//! - [`replica`]: wires store, hub and api into one replica with an ordered shutdown, and
//!   accepts its connections (PROXY header, TLS handshake).
//! - [`commands`]: the operator subcommands, beside [`cli`], which stays the people's HTTP
//!   commands: `leasehold serve`, `leasehold dev` (a private PostgreSQL, a replica and a local
//!   runner on one machine), `leasehold admin` (straight against the database), `leasehold
//!   bench` (the benchmark against a raw-SQL baseline), `leasehold drill` (faults on a schedule
//!   and a checker of the invariants) and `leasehold openapi` (the API's OpenAPI document on
//!   standard output) and `leasehold mcp` (the MCP tools over stdio); `main.rs` only parses and dispatches.
//! - [`tooling`]: dev and test tooling, never production: a private PostgreSQL from the
//!   installed binaries ([`tooling::private_pg`]) and `leasehold serve` as a child process
//!   ([`tooling::serve_process`]), for `leasehold dev`, the tests, the bench and the drill.
//! - [`config`]: the typed configuration of a replica.
//! - [`telemetry`]: Prometheus metrics of a replica and its OpenTelemetry traces.
//!
//! Imports run one way: `domain` imports nothing of ours; `store` imports `domain`; `hub`
//! imports `store`, `domain` and `config`; `api` imports `hub`, `store`, `domain`, `config`,
//! `tls` and `wire`; `telemetry` imports nothing of ours and any of them may import it; `tls`
//! imports nothing of ours; `client` imports only `wire` and `tls` (and re-exports
//! [`client::Trust`] and [`client::Pin`]); `runner` and `cli` import only `client` and `wire`,
//! never each other: what both need lives there (the `command` job kind in [`wire::command`], retry
//! back-off and "is this failure transient" in [`client`]); [`commands`] and [`tooling`] sit on
//! top, imported by nothing else.
#![forbid(unsafe_code)]

pub mod api;
pub mod commands;
pub mod config;
pub mod domain;
pub mod hub;
pub mod replica;
pub mod store;
pub mod telemetry;
pub mod tooling;

// What runs jobs and what people type is its own crate (crates/runner), built without this
// one; its modules keep their names here.
pub use leasehold_runner::{cli, client, runner, tls, wire};
