//! The wire protocols: the client protocol lives in the `ringkeeper-proto` crate
//! (`crates/ringkeeper-proto`: frames, jute records, opcodes, error codes), re-exported here so
//! `crate::proto::...` paths keep working; the peer protocol between servers (`peer`) stays in
//! the server because it carries the server's ZAB messages and txns.
//! Rules: no I/O here, only bytes in and bytes out; nothing decoded from the network panics or
//! allocates beyond the frame it came in; the only modules that know wire layouts.

pub use ringkeeper_proto::*;

pub mod peer;
