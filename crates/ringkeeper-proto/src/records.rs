//! Jute records of the client protocol, as Rust types, with their encoders and decoders.
//! Rules: field order is wire order; decoders never panic on any input and allocate no more
//! than the input length justifies; encoders write exactly the bytes Apache ZooKeeper writes.
//! The field codecs live in jute.rs; the small records shared by several messages live here.

use bytes::BytesMut;

use super::jute::{self, JuteError, JuteReader};

/// The 68-byte Stat of a znode, as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stat {
    /// long: the zxid of the txn that created the znode.
    pub czxid: i64,
    /// long: the zxid of the txn that last modified the znode's data.
    pub mzxid: i64,
    /// long: creation time, in milliseconds since the epoch.
    pub ctime: i64,
    /// long: last data modification time, in milliseconds since the epoch.
    pub mtime: i64,
    /// int: the data version, incremented by each setData.
    pub version: i32,
    /// int: the children version, incremented by each change to the znode's children.
    pub cversion: i32,
    /// int: the ACL version, incremented by each setACL.
    pub aversion: i32,
    /// long: the session id of the owner if the znode is ephemeral, else 0.
    pub ephemeral_owner: i64,
    /// int: the length of the znode's data in bytes.
    pub data_length: i32,
    /// int: the number of children.
    pub num_children: i32,
    /// long: the zxid of the txn that last changed the znode's children.
    pub pzxid: i64,
}

/// An identity: `scheme:id`, e.g. `world:anyone`, `digest:alice:<hash>`, `ip:10.0.0.0/8`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    /// ustring: the auth scheme (`world`, `auth`, `digest`, `ip`, `sasl`, `x509`, ...).
    pub scheme: String,
    /// ustring: the identity within the scheme.
    pub id: String,
}

/// One ACL entry: permission bits granted to an identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    /// int: the permission bits (`opcode::perms`).
    pub perms: i32,
    /// Id: the identity they are granted to.
    pub id: Id,
}

/// The 9-byte header before each op of a multi / multiRead request and each result of their
/// responses. The list ends with `MultiHeader::END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiHeader {
    /// int: the opcode of the op that follows, or in a response the result's type (-1 for an
    /// error result, or with the end marker).
    pub op_type: i32,
    /// boolean: true only on the end marker.
    pub done: bool,
    /// int: -1 in requests and the end marker; in a response, the error code of an error
    /// result, else 0.
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

    /// Reads a MultiHeader.
    pub fn read(r: &mut JuteReader) -> Result<MultiHeader, JuteError> {
        Ok(MultiHeader { op_type: r.read_int()?, done: r.read_bool()?, err: r.read_int()? })
    }

    /// Appends the 9-byte MultiHeader.
    pub fn write(&self, out: &mut BytesMut) {
        jute::write_int(out, self.op_type);
        jute::write_bool(out, self.done);
        jute::write_int(out, self.err);
    }
}

/// The body of a watch notification (xid -1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherEvent {
    /// int: the event type (`opcode::event_type`).
    pub event_type: i32,
    /// int: the keeper state (`opcode::STATE_SYNC_CONNECTED` from a server).
    pub state: i32,
    /// ustring: the path of the znode the event is about.
    pub path: String,
}

impl WatcherEvent {
    /// Reads a WatcherEvent record.
    pub fn read(r: &mut JuteReader) -> Result<WatcherEvent, JuteError> {
        Ok(WatcherEvent { event_type: r.read_int()?, state: r.read_int()?, path: r.read_string()? })
    }

    /// Appends a WatcherEvent record.
    pub fn write(&self, out: &mut BytesMut) {
        jute::write_int(out, self.event_type);
        jute::write_int(out, self.state);
        jute::write_string(out, &self.path);
    }
}

/// One entry of a WhoAmIResponse: an auth scheme and the user it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// ustring: the auth scheme of one of the session's identities.
    pub auth_scheme: String,
    /// ustring: the user (the Id's id) authenticated under that scheme.
    pub user: String,
}
