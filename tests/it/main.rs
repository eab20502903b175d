//! Integration tests: real PostgreSQL (a private server per test binary, a fresh database per
//! test), real HTTP (replicas on port 0). Each module's doc names the invariants it defends.

mod support;

mod dispatch;
mod errors;
mod failover;
mod faults;
mod lease;
mod procs;
mod replicas;
mod runner_e2e;
mod schema;
mod security;
