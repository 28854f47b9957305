//! Jute records of the client protocol, as Rust types, with their encoders and decoders.
//! Rules: field order is wire order; decoders never panic on any input and allocate no more
//! than the input length justifies; encoders write exactly the bytes Apache ZooKeeper writes.

use bytes::Bytes;

/// The 68-byte Stat of a znode, as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

/// An identity: `scheme:id`, e.g. `world:anyone`, `digest:alice:<hash>`, `ip:10.0.0.0/8`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    pub scheme: String,
    pub id: String,
}

/// One ACL entry: permission bits granted to an identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    pub perms: i32,
    pub id: Id,
}
