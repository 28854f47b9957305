//! The Rust ZooKeeper client library: a sans-IO session core (`session`) with its watch
//! registry (`watches`), server choice (`host_provider`) and connection strings
//! (`connect_string`); the typed `Client` handle (`client`); the async driver that runs a
//! session over TCP on glommio or tokio (`driver`); a retry helper for recoverable errors
//! (`retry`); seed 001's recipes built on the handle (`recipes`).
//! Rules: only `ringkeeper-proto` knows bytes on the wire; only `driver/` knows a runtime, sockets
//! and the clock; the core is deterministic given its inputs and seed; every queue between
//! the handle and the driver is bounded; nothing received from a server panics.
//!
//! This crate builds without the server: it depends on `ringkeeper-proto` (the wire protocol)
//! and, per runtime feature, on tokio (`tokio`, the default) or glommio (`glommio`).
//!
//! # Example
//!
//! Connect on tokio, create a node, read it back and close the session:
//!
//! ```no_run
//! use std::time::Duration;
//! use ringkeeper_client::driver::tokio::connect;
//! use ringkeeper_client::{ClientOptions, CreateMode, OPEN_ACL_UNSAFE};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! runtime.block_on(async {
//!     let options = ClientOptions::default().session_timeout(Duration::from_secs(10));
//!     let (client, _session_events) = connect("127.0.0.1:2181/app", options).await?;
//!     let path = client.create("/greeting", "hello", &OPEN_ACL_UNSAFE, CreateMode::Persistent).await?;
//!     let (data, stat) = client.get_data(&path).await?;
//!     assert_eq!(&data[..], b"hello");
//!     println!("{path}: version {}", stat.version);
//!     client.close().await?;
//!     Ok(())
//! })
//! # }
//! ```

#![warn(missing_docs)]

pub mod acl;
#[allow(clippy::module_inception)]
pub mod client;
pub mod connect_string;
pub mod driver;
#[cfg(feature = "glommio")]
pub mod host;
pub mod host_provider;
pub mod recipes;
pub mod retry;
pub mod session;
pub mod tls;
pub mod types;
pub mod watches;

pub use acl::{CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE};
pub use client::{Client, ClientOptions, ConnectError, OneShotWatch, PersistentWatch, SessionEvents, SessionInfo};
pub use connect_string::{Chroot, ConnectString, ConnectStringError, HostPort};
pub use session::{SaslCredentials, SessionConfig};
pub use types::*;
