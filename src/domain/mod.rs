//! Pure rules of leasehold, with no I/O: credentials, owners and tenancy, capability names,
//! job states, runner versions, sealing of secrets, the feed's cursor and webhook rules.

pub mod capabilities;
pub mod credentials;
pub mod feed;
pub mod join_url;
pub mod owner;
pub mod sealing;
pub mod state;
pub mod version;
pub mod webhook;
