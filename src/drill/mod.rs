//! `leasehold drill`: exercises a deployment under faults and proves the invariants while it
//! runs (docs/drill.md).

pub mod check;
pub mod cluster;
pub mod history;
