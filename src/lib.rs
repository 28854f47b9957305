//! ringkeeper: a ZooKeeper-compatible coordination service, thread-per-core on io_uring.
//! See ARCHITECTURE.md for the map of modules and the rules they keep.

pub mod cli;
pub mod client;
pub mod config;
pub mod host;
pub mod local_session;
pub mod offline;
pub mod proto;
pub mod query;
pub mod sasl;
pub mod server;
pub mod session;
pub mod storage;
pub mod tls;
pub mod tree;
pub mod txn;
pub mod zab;
pub mod zkformat;
