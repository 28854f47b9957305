//! Jute records of the client protocol, as Rust types, with their encoders and decoders.
//! Rules: field order is wire order; decoders never panic on any input and allocate no more
//! than the input length justifies; encoders write exactly the bytes Apache ZooKeeper writes.
//! The field codecs live in jute.rs; the small records shared by several messages live here.

use bytes::BytesMut;

use super::jute::{self, JuteError, JuteReader};

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

/// The 9-byte header before each op of a multi / multiRead request and each result of their
/// responses. The list ends with `MultiHeader::END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiHeader {
    pub op_type: i32,
    pub done: bool,
    pub err: i32,
}

impl MultiHeader {
    /// Encoded size.
    pub const BYTES: usize = 9;
    /// The end marker `{-1, true, -1}`.
    pub const END: MultiHeader = MultiHeader { op_type: -1, done: true, err: -1 };

    /// The header of a request sub-op: `{type, false, -1}`.
    pub fn op(op_type: i32) -> MultiHeader {
        MultiHeader { op_type, done: false, err: -1 }
    }

    pub fn read(r: &mut JuteReader) -> Result<MultiHeader, JuteError> {
        Ok(MultiHeader { op_type: r.read_int()?, done: r.read_bool()?, err: r.read_int()? })
    }

    pub fn write(&self, out: &mut BytesMut) {
        jute::write_int(out, self.op_type);
        jute::write_bool(out, self.done);
        jute::write_int(out, self.err);
    }
}

/// The body of a watch notification (xid -1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherEvent {
    pub event_type: i32,
    pub state: i32,
    pub path: String,
}

impl WatcherEvent {
    pub fn read(r: &mut JuteReader) -> Result<WatcherEvent, JuteError> {
        Ok(WatcherEvent { event_type: r.read_int()?, state: r.read_int()?, path: r.read_string()? })
    }

    pub fn write(&self, out: &mut BytesMut) {
        jute::write_int(out, self.event_type);
        jute::write_int(out, self.state);
        jute::write_string(out, &self.path);
    }
}

/// One entry of a WhoAmIResponse: an auth scheme and the user it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub auth_scheme: String,
    pub user: String,
}
