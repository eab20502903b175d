//! The binary's operator subcommands, one module each: [`serve`] (one replica), [`dev`]
//! (everything on one machine), [`admin`] (straight against the database),
//! [`bench`](mod@bench) (the benchmark), [`drill`] (faults and the invariant checker) and
//! [`openapi`] (the API's document) and [`mcp`](mod@mcp) (the operator tools over stdio).
//! `main.rs` parses the command line and dispatches here; the people's HTTP commands stay in
//! [`crate::cli`] and the runner's in [`crate::runner::cli`].

pub mod admin;
pub mod bench;
pub mod dev;
pub mod drill;
pub mod mcp;
pub mod openapi;
pub mod serve;
