//! ringkeeper: a ZooKeeper-compatible coordination service, thread-per-core on io_uring.
//! See ARCHITECTURE.md for the map of modules and the rules they keep.
//! The wire protocol and the client library are crates of their own (`crates/`); they are
//! re-exported here under their old paths (`ringkeeper::proto`, `ringkeeper::client`,
//! `ringkeeper::host`), so code written against those paths compiles unchanged.

pub use ringkeeper_client as client;
pub use ringkeeper_client::host;

pub mod cli;
pub mod config;
pub mod dynconfig;
pub mod id_hash;
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
