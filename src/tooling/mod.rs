//! Development and test tooling, never for production: local processes that `leasehold dev`,
//! the tests, the benchmark and the drill start and own. [`private_pg`] is a private
//! PostgreSQL from the installed server binaries; [`dev_lock`] is the lock `leasehold dev` holds on
//! its data directory; [`serve_process`] is `leasehold serve` as a
//! child process. Each stops what it started when its handle drops (or its parent dies).

pub mod dev_lock;
pub mod private_pg;
pub mod serve_process;
