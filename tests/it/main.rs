//! Integration tests: real PostgreSQL (a private server per test binary, a fresh database per
//! test), real HTTP (replicas on port 0). Each module's doc names the invariants it defends.

mod support;

mod artifacts;
mod balancer;
mod bench;
mod browser;
mod claim_start;
mod contain;
mod deadlines;
mod deploy;
mod dev;
mod dispatch;
mod enrolment;
mod errors;
mod failover;
mod faults;
mod fits;
mod fuzz;
mod holes;
mod http1;
mod join;
mod layout;
mod lease;
mod logs;
mod mcp;
mod metrics;
mod openapi;
mod patroni;
mod placement;
mod plans;
mod private_pg;
mod procs;
mod replicas;
mod report_and_lease;
mod retention;
mod retries;
mod runner_e2e;
mod schema;
mod secrets;
mod sources;
mod tenancy;
mod tls;
mod traces;
mod transport;
mod trust;
