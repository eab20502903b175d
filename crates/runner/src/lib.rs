//! # leasehold-runner
//!
//! What a machine that runs jobs, or a person at a terminal, needs of leasehold, and nothing of
//! the server: no PostgreSQL client, no HTTP server, no telemetry exporters, no bench or drill.
//! It is its own crate so that what owners install on the machines that run hostile jobs links
//! only this (`cargo tree -p leasehold-runner` is checked for that by `tests/it/layout.rs`).
//! The `leasehold` binary (the workspace's root package) re-exports these modules under their
//! own names, so `leasehold::wire` and the rest are what they always were.
//!
//! # Layout
//!
//! - [`wire`]: the HTTP contract's request and response types (`docs/api.md`), shared by
//!   the server, the client, the runner and the tests.
//! - [`client`]: a typed HTTP client over [`wire`] (runner, CLI, bench and tests use it).
//! - [`tls`]: what both ends of HTTPS share: PEM files, key pins, the client's trust.
//! - [`runner`]: the reference runner: enrolment, lease loop, executor, sandbox, drain, and
//!   its command line (`leasehold runner connect|run`).
//! - [`cli`]: the human command line (`leasehold job|runners|join-code|pool|preflight|secrets`).
//!
//! Imports run one way: `tls` imports nothing of ours; `client` imports only `wire` and `tls`
//! (and re-exports [`client::Trust`] and [`client::Pin`]); `runner` and `cli` import only
//! `client` and `wire`, never each other: what both need lives there (the `command` job kind in
//! [`wire::command`], retry back-off and "is this failure transient" in [`client`]).
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod runner;
pub mod tls;
pub mod wire;
