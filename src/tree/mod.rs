//! The replicated data model: paths, znodes and their stats, the DataTree, ACL checks and the
//! watch index. Rules: nothing under src/tree/ does I/O, reads a clock or draws randomness.

pub mod acl;
#[cfg(test)]
mod counts_tests;
pub mod datatree;
pub mod java_order;
pub mod node_map;
// Paths are shared with the client: they live in the protocol crate.
pub use ringkeeper_proto::path;
pub mod quota;
#[cfg(test)]
mod quota_tests;
pub mod watches;

pub use datatree::{Children, DataTree, NodeKind, Znode};
