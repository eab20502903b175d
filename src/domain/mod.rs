//! Pure rules of leasehold, with no I/O: credentials, owners and tenancy, capability names,
//! job states, runner versions and sealing of secrets.

pub mod capabilities;
pub mod credentials;
pub mod join_url;
pub mod owner;
pub mod sealing;
pub mod state;
pub mod version;
