//! The Rust ZooKeeper client library: a sans-IO session core (`session`) with its watch
//! registry (`watches`), server choice (`host_provider`) and connection strings
//! (`connect_string`); the typed `Client` handle (`client`); the async driver that runs a
//! session over TCP on glommio or tokio (`driver`); a retry helper for recoverable errors
//! (`retry`); seed 001's recipes built on the handle (`recipes`).
//! Rules: only `src/proto/` knows bytes on the wire; only `driver/` knows a runtime, sockets
//! and the clock; the core is deterministic given its inputs and seed; every queue between
//! the handle and the driver is bounded; nothing received from a server panics.

pub mod acl;
#[allow(clippy::module_inception)]
pub mod client;
pub mod connect_string;
pub mod driver;
pub mod host_provider;
pub mod recipes;
pub mod retry;
pub mod session;
pub mod types;
pub mod watches;

pub use acl::{CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE};
pub use client::{Client, ClientOptions, ConnectError, OneShotWatch, PersistentWatch, SessionEvents, SessionInfo};
pub use connect_string::{Chroot, ConnectString, ConnectStringError, HostPort};
pub use session::{SaslCredentials, SessionConfig};
pub use types::*;
