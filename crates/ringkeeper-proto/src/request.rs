//! Client requests after the handshake: `RequestHeader{xid, type}` plus the op's record,
//! decoded into one `Request` value, and the decision of what to do with frames that are not
//! acceptable requests.
//! Rules: never panic on any frame; paths are not validated here (the server answers
//! BadArguments / NoNode itself), only UTF-8 is; bytes after a complete record are ignored,
//! as Java's deserializers ignore them; buffers are zero-copy slices of the frame.
//!
//! What a bad frame gets (`RequestError`), following the fact sheet (§3, §4, §13):
//! - header shorter than 8 bytes: close without a reply (Java fails to read the header and
//!   drops the connection);
//! - unknown opcode, including 0 (notification), -1 (error) and 20 (deleteContainer, which
//!   only the server's own reaper issues; answered BadArguments as Apache 3.8 does):
//!   Unimplemented, then close;
//! - top-level check (13): a read, as Apache 3.9 answers it: NoNode, NoAuth (READ),
//!   BadVersion, else err 0 with no body. (Apache 3.8 answers the same errors; on success it
//!   fails to serialize its reply and answers nothing.)
//! - reconfig (16): decoded (`Request::Reconfig`; the server answers ReconfigDisabled, -123,
//!   when reconfigEnabled is off, as Apache 3.8); MarshallingError if the body does not
//!   decode; the connection continues;
//! - sasl (102): err 0 with a null token, the connection continuing, as Apache 3.8 answers
//!   when no SASL server is configured (the client's SASL exchange then goes nowhere); a body
//!   that does not decode closes the connection without a reply, as in Apache;
//! - createSession (-10), which only a server issues: MarshallingError if the body is shorter
//!   than its timeout int (the connection continues), else close without a reply (Apache
//!   would open a second session on the connection);
//! - a readable header with a malformed body: MarshallingError and the connection continues
//!   (Java deserializes bodies in the request processors and turns the failure into a
//!   MarshallingError reply). Exception: a malformed AuthPacket closes the connection, since
//!   Java reads it inline while reading the packet and drops the connection on failure;
//! - multi / multiRead with a sub-op type not allowed in it (including read ops in multi,
//!   write ops in multiRead and unknown types), or a truncated op list: MarshallingError,
//!   the connection continues.

use bytes::{Bytes, BytesMut};

use super::error::ErrorCode;
use super::frame::{begin_frame, end_frame};
use super::jute::{self, JuteError, JuteReader};
use super::opcode::OpCode;
use super::records::{Acl, MultiHeader};

/// Size of a RequestHeader.
pub const REQUEST_HEADER_BYTES: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// RequestHeader, before every request record: `{int xid, int type}`.
pub struct RequestHeader {
    /// int: the client's request id, echoed in the reply; special values in `opcode::XID_*`.
    pub xid: i32,
    /// int: the opcode (`OpCode::code`); kept raw, as an unknown one must still be answered.
    pub opcode: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A decoded client request: one variant per op the server accepts, holding its record's fields.
pub enum Request {
    /// ping (op 11): no record.
    Ping,
    /// closeSession (op -11): no record.
    CloseSession,
    /// CreateRequest `{ustring path, buffer data, vector<ACL> acl, int flags}` (ops 1, 15, 19);
    /// CreateTTLRequest (op 21) adds `long ttl`.
    Create {
        /// Create, Create2, CreateContainer or CreateTtl.
        opcode: OpCode,
        /// ustring: the znode path.
        path: String,
        /// buffer: the initial data (`None` for a null buffer).
        data: Option<Bytes>,
        /// `vector<ACL>`: the ACL (`None` for a null vector).
        acl: Option<Vec<Acl>>,
        /// int: the create mode (`opcode::create_flags`).
        flags: i32,
        /// -1 unless the opcode is CreateTtl.
        ttl_ms: i64,
    },
    /// DeleteRequest (op 2).
    Delete {
        /// ustring: the znode path.
        path: String,
        /// int: the expected version; -1 matches any.
        version: i32,
    },
    /// ExistsRequest (op 3).
    Exists {
        /// ustring: the znode path.
        path: String,
        /// boolean: leave a watch on the znode.
        watch: bool,
    },
    /// GetDataRequest (op 4).
    GetData {
        /// ustring: the znode path.
        path: String,
        /// boolean: leave a watch on the znode.
        watch: bool,
    },
    /// SetDataRequest (op 5).
    SetData {
        /// ustring: the znode path.
        path: String,
        /// buffer: the new data (`None` for a null buffer).
        data: Option<Bytes>,
        /// int: the expected version; -1 matches any.
        version: i32,
    },
    /// GetACLRequest (op 6).
    GetAcl {
        /// ustring: the znode path.
        path: String,
    },
    /// SetACLRequest (op 7).
    SetAcl {
        /// ustring: the znode path.
        path: String,
        /// `vector<ACL>`: the new ACL (`None` for a null vector).
        acl: Option<Vec<Acl>>,
        /// int: the expected ACL version (aversion); -1 matches any.
        version: i32,
    },
    /// GetChildrenRequest (op 8).
    GetChildren {
        /// ustring: the znode path.
        path: String,
        /// boolean: leave a watch on the znode.
        watch: bool,
    },
    /// GetChildren2Request (op 12).
    GetChildren2 {
        /// ustring: the znode path.
        path: String,
        /// boolean: leave a watch on the znode.
        watch: bool,
    },
    /// SyncRequest (op 9).
    Sync {
        /// ustring: the znode path.
        path: String,
    },
    /// CheckVersionRequest (op 13): a sub-op of a multi, or top-level (answered as a read, as
    /// Apache 3.9 answers it).
    Check {
        /// ustring: the znode path.
        path: String,
        /// int: the version the znode must have; -1 matches any.
        version: i32,
    },
    /// Sub-ops: Create (any create opcode), Delete, SetData, Check.
    Multi(Vec<Request>),
    /// Sub-ops: GetChildren, GetData, always with `watch: false` (the flag is ignored).
    MultiRead(Vec<Request>),
    /// AuthPacket (op 100, xid -4).
    Auth {
        /// int: the auth type; 0 from real clients.
        auth_type: i32,
        /// ustring: the auth scheme, e.g. `digest`.
        scheme: String,
        /// buffer: the credentials, e.g. `user:password` for digest (a null buffer reads as empty).
        auth: Bytes,
    },
    /// SetWatches (op 101, xid -8): watches to re-register after a reconnect.
    SetWatches {
        /// long: the last zxid the client has seen; a watch on a znode changed after it fires
        /// at once.
        relative_zxid: i64,
        /// `vector<ustring>`: paths with data watches.
        data: Vec<String>,
        /// `vector<ustring>`: paths with exist watches.
        exist: Vec<String>,
        /// `vector<ustring>`: paths with child watches.
        child: Vec<String>,
    },
    /// SetWatches2 (op 105, xid -8): SetWatches plus persistent watches.
    SetWatches2 {
        /// long: the last zxid the client has seen; a watch on a znode changed after it fires
        /// at once.
        relative_zxid: i64,
        /// `vector<ustring>`: paths with data watches.
        data: Vec<String>,
        /// `vector<ustring>`: paths with exist watches.
        exist: Vec<String>,
        /// `vector<ustring>`: paths with child watches.
        child: Vec<String>,
        /// `vector<ustring>`: paths with persistent watches.
        persistent: Vec<String>,
        /// `vector<ustring>`: paths with persistent recursive watches.
        persistent_recursive: Vec<String>,
    },
    /// AddWatchRequest (op 106).
    AddWatch {
        /// ustring: the znode path.
        path: String,
        /// int: the watch mode (`opcode::add_watch_mode`).
        mode: i32,
    },
    /// RemoveWatchesRequest (op 18).
    RemoveWatches {
        /// ustring: the znode path.
        path: String,
        /// int: the watcher type (`opcode::watcher_type`).
        watcher_type: i32,
    },
    /// CheckWatchesRequest (op 17).
    CheckWatches {
        /// ustring: the znode path.
        path: String,
        /// int: the watcher type (`opcode::watcher_type`).
        watcher_type: i32,
    },
    /// GetEphemeralsRequest (op 103).
    GetEphemerals {
        /// ustring: the path prefix the ephemerals must start with ("/" for all).
        prefix: String,
    },
    /// GetAllChildrenNumberRequest (op 104).
    GetAllChildrenNumber {
        /// ustring: the znode path.
        path: String,
    },
    /// whoAmI (op 107): no record.
    WhoAmI,
    /// ReconfigRequest (op 16): an incremental (`joining`/`leaving`) or bulk (`new_members`)
    /// membership change.
    Reconfig {
        /// ustring: `server.N=…` lines joining (comma-separated), or null.
        joining: Option<String>,
        /// ustring: sids leaving (comma-separated), or null.
        leaving: Option<String>,
        /// ustring: the whole new membership (comma-separated lines), or null.
        new_members: Option<String>,
        /// long: the config version expected (-1: any).
        cur_config_id: i64,
    },
    /// GetSASLRequest: a SASL token (no SASL server here: answered with a null token).
    Sasl {
        /// buffer: the token (`None` for a null buffer).
        token: Option<Bytes>,
    },
}

impl Request {
    /// The opcode this request travels under.
    pub fn opcode(&self) -> OpCode {
        match self {
            Request::Ping => OpCode::Ping,
            Request::CloseSession => OpCode::CloseSession,
            Request::Create { opcode, .. } => *opcode,
            Request::Delete { .. } => OpCode::Delete,
            Request::Exists { .. } => OpCode::Exists,
            Request::GetData { .. } => OpCode::GetData,
            Request::SetData { .. } => OpCode::SetData,
            Request::GetAcl { .. } => OpCode::GetAcl,
            Request::SetAcl { .. } => OpCode::SetAcl,
            Request::GetChildren { .. } => OpCode::GetChildren,
            Request::GetChildren2 { .. } => OpCode::GetChildren2,
            Request::Sync { .. } => OpCode::Sync,
            Request::Check { .. } => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Auth { .. } => OpCode::Auth,
            Request::SetWatches { .. } => OpCode::SetWatches,
            Request::SetWatches2 { .. } => OpCode::SetWatches2,
            Request::AddWatch { .. } => OpCode::AddWatch,
            Request::RemoveWatches { .. } => OpCode::RemoveWatches,
            Request::CheckWatches { .. } => OpCode::CheckWatches,
            Request::GetEphemerals { .. } => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber { .. } => OpCode::GetAllChildrenNumber,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::Sasl { .. } => OpCode::Sasl,
            Request::Reconfig { .. } => OpCode::Reconfig,
        }
    }

    /// True for the ops that go through the ordered txn pipeline: the creates, delete,
    /// setData, setACL, multi and closeSession.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Request::Create { .. }
                | Request::Delete { .. }
                | Request::SetData { .. }
                | Request::SetAcl { .. }
                | Request::Multi(_)
                | Request::CloseSession
        )
    }

    /// True for sync: not a write, but answered only after every write ordered before it.
    pub fn is_sync(&self) -> bool {
        matches!(self, Request::Sync { .. })
    }
}

/// What to do with a frame that is not an acceptable request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// Answer `{xid, zxid, err}` with no body and carry on.
    Reply {
        /// The xid of the rejected request.
        xid: i32,
        /// The error code to answer with.
        err: ErrorCode,
    },
    /// Answer `{xid, zxid, err}` with no body, then close the connection.
    ReplyAndClose {
        /// The xid of the rejected request.
        xid: i32,
        /// The error code to answer with.
        err: ErrorCode,
    },
    /// Close the connection without replying.
    Close {
        /// Why, for the log.
        reason: &'static str,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Reply { xid, err } => write!(f, "request {xid} rejected with {err}"),
            RequestError::ReplyAndClose { xid, err } => {
                write!(f, "request {xid} rejected with {err}; closing")
            }
            RequestError::Close { reason } => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Decodes one request frame (without its length prefix).
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, Request), RequestError> {
    let mut r = JuteReader::new(frame);
    let (xid, opcode) = match (r.read_int(), r.read_int()) {
        (Ok(xid), Ok(opcode)) => (xid, opcode),
        _ => return Err(RequestError::Close { reason: "truncated request header" }),
    };
    let hdr = RequestHeader { xid, opcode };
    let unimplemented_close = RequestError::ReplyAndClose { xid, err: ErrorCode::Unimplemented };
    let marshalling = RequestError::Reply { xid, err: ErrorCode::MarshallingError };
    let Some(op) = OpCode::from_code(opcode) else {
        return Err(unimplemented_close);
    };
    let req = match op {
        OpCode::Ping => Request::Ping,
        OpCode::CloseSession => Request::CloseSession,
        OpCode::WhoAmI => Request::WhoAmI,
        OpCode::Auth => {
            return match read_auth(&mut r) {
                Ok(req) => Ok((hdr, req)),
                Err(_) => Err(RequestError::Close { reason: "malformed AuthPacket" }),
            }
        }
        OpCode::Check => Request::Check {
            path: r.read_string().map_err(|_| marshalling)?,
            version: r.read_int().map_err(|_| marshalling)?,
        },
        OpCode::Reconfig => read_reconfig(&mut r).map_err(|_| marshalling)?,
        OpCode::Sasl => match r.read_buffer() {
            Ok(token) => Request::Sasl { token },
            Err(_) => return Err(RequestError::Close { reason: "malformed GetSASLRequest" }),
        },
        OpCode::CreateSession => {
            return Err(match r.read_int() {
                Ok(_) => RequestError::Close { reason: "createSession from a client" },
                Err(_) => marshalling,
            })
        }
        // Only the server's own reaper deletes containers. Apache 3.8 reads a client's op 20
        // body raw as the path, which then fails validation: BadArguments, connection kept.
        OpCode::DeleteContainer => return Err(RequestError::Reply { xid, err: ErrorCode::BadArguments }),
        OpCode::Notification | OpCode::Error => return Err(unimplemented_close),
        OpCode::Multi => Request::Multi(read_multi(&mut r, is_multi_op).map_err(|_| marshalling)?),
        OpCode::MultiRead => Request::MultiRead(read_multi(&mut r, is_multi_read_op).map_err(|_| marshalling)?),
        other => match read_body(other, &mut r) {
            Ok(Some(req)) => req,
            Ok(None) => return Err(unimplemented_close),
            Err(_) => return Err(marshalling),
        },
    };
    Ok((hdr, req))
}

/// ReconfigRequest: joiningServers, leavingServers, newMembers (ustrings), curConfigId (long).
fn read_reconfig(r: &mut JuteReader) -> Result<Request, JuteError> {
    Ok(Request::Reconfig {
        joining: r.read_opt_string()?,
        leaving: r.read_opt_string()?,
        new_members: r.read_opt_string()?,
        cur_config_id: r.read_long()?,
    })
}

fn read_auth(r: &mut JuteReader) -> Result<Request, JuteError> {
    Ok(Request::Auth { auth_type: r.read_int()?, scheme: r.read_string()?, auth: r.read_buffer()?.unwrap_or_default() })
}

/// Why a multi body was refused; both become MarshallingError.
enum MultiError {
    Jute,
    OpNotAllowed,
}

impl From<JuteError> for MultiError {
    fn from(_: JuteError) -> MultiError {
        MultiError::Jute
    }
}

fn is_multi_op(op: OpCode) -> bool {
    matches!(
        op,
        OpCode::Create
            | OpCode::Create2
            | OpCode::CreateTtl
            | OpCode::CreateContainer
            | OpCode::Delete
            | OpCode::SetData
            | OpCode::Check
    )
}

fn is_multi_read_op(op: OpCode) -> bool {
    matches!(op, OpCode::GetChildren | OpCode::GetData)
}

/// Reads `MultiHeader, record` pairs until a header with done = true. The list can only grow
/// by one entry per 9+ bytes consumed, so its memory is bounded by the frame.
fn read_multi(r: &mut JuteReader, allowed: fn(OpCode) -> bool) -> Result<Vec<Request>, MultiError> {
    let mut ops = Vec::new();
    loop {
        let h = MultiHeader::read(r)?;
        if h.done {
            return Ok(ops);
        }
        let op = OpCode::from_code(h.op_type).filter(|op| allowed(*op)).ok_or(MultiError::OpNotAllowed)?;
        let req = match read_body(op, r)? {
            Some(Request::GetData { path, .. }) => Request::GetData { path, watch: false },
            Some(Request::GetChildren { path, .. }) => Request::GetChildren { path, watch: false },
            Some(req) => req,
            None => return Err(MultiError::OpNotAllowed),
        };
        ops.push(req);
    }
}

/// The record of a single op; `Ok(None)` for an opcode that has no record decoder here.
fn read_body(op: OpCode, r: &mut JuteReader) -> Result<Option<Request>, JuteError> {
    Ok(Some(match op {
        OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
            let path = r.read_string()?;
            let data = r.read_buffer()?;
            let acl = r.read_acl_vec()?;
            let flags = r.read_int()?;
            let ttl_ms = if op == OpCode::CreateTtl { r.read_long()? } else { -1 };
            Request::Create { opcode: op, path, data, acl, flags, ttl_ms }
        }
        OpCode::Delete => Request::Delete { path: r.read_string()?, version: r.read_int()? },
        OpCode::Exists => Request::Exists { path: r.read_string()?, watch: r.read_bool()? },
        OpCode::GetData => Request::GetData { path: r.read_string()?, watch: r.read_bool()? },
        OpCode::SetData => Request::SetData { path: r.read_string()?, data: r.read_buffer()?, version: r.read_int()? },
        OpCode::GetAcl => Request::GetAcl { path: r.read_string()? },
        OpCode::SetAcl => Request::SetAcl { path: r.read_string()?, acl: r.read_acl_vec()?, version: r.read_int()? },
        OpCode::GetChildren => Request::GetChildren { path: r.read_string()?, watch: r.read_bool()? },
        OpCode::GetChildren2 => Request::GetChildren2 { path: r.read_string()?, watch: r.read_bool()? },
        OpCode::Sync => Request::Sync { path: r.read_string()? },
        OpCode::Check => Request::Check { path: r.read_string()?, version: r.read_int()? },
        OpCode::CheckWatches => Request::CheckWatches { path: r.read_string()?, watcher_type: r.read_int()? },
        OpCode::RemoveWatches => Request::RemoveWatches { path: r.read_string()?, watcher_type: r.read_int()? },
        OpCode::AddWatch => Request::AddWatch { path: r.read_string()?, mode: r.read_int()? },
        OpCode::GetEphemerals => Request::GetEphemerals { prefix: r.read_string()? },
        OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber { path: r.read_string()? },
        OpCode::SetWatches => Request::SetWatches {
            relative_zxid: r.read_long()?,
            data: r.read_string_vec()?,
            exist: r.read_string_vec()?,
            child: r.read_string_vec()?,
        },
        OpCode::SetWatches2 => Request::SetWatches2 {
            relative_zxid: r.read_long()?,
            data: r.read_string_vec()?,
            exist: r.read_string_vec()?,
            child: r.read_string_vec()?,
            persistent: r.read_string_vec()?,
            persistent_recursive: r.read_string_vec()?,
        },
        _ => return Ok(None),
    }))
}

/// Appends a request frame (length prefix, header, record) as a client sends it: for tests
/// and for client-side tools. The header's type is `req.opcode()`.
pub fn encode_request(out: &mut BytesMut, xid: i32, req: &Request) {
    let at = begin_frame(out);
    jute::write_int(out, xid);
    jute::write_int(out, req.opcode().code());
    write_body(out, req);
    end_frame(out, at);
}

fn write_body(out: &mut BytesMut, req: &Request) {
    use jute::{write_acl_vec, write_bool, write_buffer, write_int, write_long, write_string, write_string_vec};
    match req {
        Request::Ping | Request::CloseSession | Request::WhoAmI => {}
        Request::Create { opcode, path, data, acl, flags, ttl_ms } => {
            write_string(out, path);
            write_buffer(out, data.as_deref());
            match acl {
                Some(acl) => write_acl_vec(out, acl),
                None => write_int(out, -1),
            }
            write_int(out, *flags);
            if *opcode == OpCode::CreateTtl {
                write_long(out, *ttl_ms);
            }
        }
        Request::Delete { path, version } | Request::Check { path, version } => {
            write_string(out, path);
            write_int(out, *version);
        }
        Request::Exists { path, watch }
        | Request::GetData { path, watch }
        | Request::GetChildren { path, watch }
        | Request::GetChildren2 { path, watch } => {
            write_string(out, path);
            write_bool(out, *watch);
        }
        Request::SetData { path, data, version } => {
            write_string(out, path);
            write_buffer(out, data.as_deref());
            write_int(out, *version);
        }
        Request::GetAcl { path } | Request::Sync { path } | Request::GetAllChildrenNumber { path } => {
            write_string(out, path)
        }
        Request::GetEphemerals { prefix } => write_string(out, prefix),
        Request::Sasl { token } => write_buffer(out, token.as_deref()),
        Request::Reconfig { joining, leaving, new_members, cur_config_id } => {
            for s in [joining, leaving, new_members] {
                match s {
                    Some(s) => write_string(out, s),
                    None => write_int(out, -1),
                }
            }
            write_long(out, *cur_config_id);
        }
        Request::SetAcl { path, acl, version } => {
            write_string(out, path);
            match acl {
                Some(acl) => write_acl_vec(out, acl),
                None => write_int(out, -1),
            }
            write_int(out, *version);
        }
        Request::Multi(ops) | Request::MultiRead(ops) => {
            for op in ops {
                MultiHeader::op(op.opcode().code()).write(out);
                write_body(out, op);
            }
            MultiHeader::END.write(out);
        }
        Request::Auth { auth_type, scheme, auth } => {
            write_int(out, *auth_type);
            write_string(out, scheme);
            write_buffer(out, Some(auth));
        }
        Request::SetWatches { relative_zxid, data, exist, child } => {
            write_long(out, *relative_zxid);
            write_string_vec(out, data);
            write_string_vec(out, exist);
            write_string_vec(out, child);
        }
        Request::SetWatches2 { relative_zxid, data, exist, child, persistent, persistent_recursive } => {
            write_long(out, *relative_zxid);
            write_string_vec(out, data);
            write_string_vec(out, exist);
            write_string_vec(out, child);
            write_string_vec(out, persistent);
            write_string_vec(out, persistent_recursive);
        }
        Request::AddWatch { path, mode } => {
            write_string(out, path);
            write_int(out, *mode);
        }
        Request::RemoveWatches { path, watcher_type } | Request::CheckWatches { path, watcher_type } => {
            write_string(out, path);
            write_int(out, *watcher_type);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Id;
    use proptest::prelude::*;

    fn open_acl() -> Vec<Acl> {
        vec![Acl { perms: 31, id: Id { scheme: "world".into(), id: "anyone".into() } }]
    }

    /// Frame payload of `req` as a client sends it.
    fn wire(xid: i32, req: &Request) -> Bytes {
        let mut out = BytesMut::new();
        encode_request(&mut out, xid, req);
        out.freeze().slice(4..)
    }

    fn raw(xid: i32, opcode: i32, body: &[u8]) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&xid.to_be_bytes());
        b.extend_from_slice(&opcode.to_be_bytes());
        b.extend_from_slice(body);
        Bytes::from(b)
    }

    #[test]
    fn golden_create_request() {
        // create("/a", "hi", OPEN_ACL_UNSAFE, PERSISTENT) with xid 1.
        let mut golden: Vec<u8> = vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, b'/', b'a', 0, 0, 0, 2, b'h', b'i'];
        golden.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 31, 0, 0, 0, 5]);
        golden.extend_from_slice(b"world");
        golden.extend_from_slice(&[0, 0, 0, 6]);
        golden.extend_from_slice(b"anyone");
        golden.extend_from_slice(&[0, 0, 0, 0]);
        let (hdr, req) = decode_request(Bytes::from(golden.clone())).unwrap();
        assert_eq!(hdr, RequestHeader { xid: 1, opcode: 1 });
        let want = Request::Create {
            opcode: OpCode::Create,
            path: "/a".into(),
            data: Some(Bytes::from_static(b"hi")),
            acl: Some(open_acl()),
            flags: 0,
            ttl_ms: -1,
        };
        assert_eq!(req, want);
        assert_eq!(&wire(1, &want)[..], &golden[..]);
    }

    #[test]
    fn golden_ping_and_close() {
        assert_eq!(decode_request(raw(-2, 11, &[])), Ok((RequestHeader { xid: -2, opcode: 11 }, Request::Ping)));
        assert_eq!(&wire(-2, &Request::Ping)[..], &[0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11]);
        assert_eq!(decode_request(raw(7, -11, &[])).unwrap().1, Request::CloseSession);
    }

    #[test]
    fn create_ttl_and_null_fields() {
        // kazoo-style: null data and a null ACL vector are accepted as such.
        let mut body = vec![0, 0, 0, 2, b'/', b't', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 5];
        body.extend_from_slice(&1000i64.to_be_bytes());
        let (_, req) = decode_request(raw(3, 21, &body)).unwrap();
        assert_eq!(
            req,
            Request::Create {
                opcode: OpCode::CreateTtl,
                path: "/t".into(),
                data: None,
                acl: None,
                flags: 5,
                ttl_ms: 1000
            }
        );
        // The same body under op 21 without the ttl is malformed.
        assert_eq!(
            decode_request(raw(3, 21, &body[..body.len() - 8])),
            Err(RequestError::Reply { xid: 3, err: ErrorCode::MarshallingError })
        );
    }

    #[test]
    fn every_op_round_trips() {
        let s = |x: &str| x.to_string();
        let reqs = vec![
            Request::Ping,
            Request::CloseSession,
            Request::WhoAmI,
            Request::Create {
                opcode: OpCode::Create2,
                path: s("/c"),
                data: Some(Bytes::new()),
                acl: Some(open_acl()),
                flags: 3,
                ttl_ms: -1,
            },
            Request::Create {
                opcode: OpCode::CreateContainer,
                path: s("/c"),
                data: None,
                acl: Some(vec![]),
                flags: 4,
                ttl_ms: -1,
            },
            Request::Create { opcode: OpCode::CreateTtl, path: s("/c"), data: None, acl: None, flags: 6, ttl_ms: 99 },
            Request::Delete { path: s("/d"), version: -1 },
            Request::Exists { path: s("/e"), watch: true },
            Request::GetData { path: s("/g"), watch: false },
            Request::SetData { path: s("/s"), data: Some(Bytes::from_static(b"x")), version: 3 },
            Request::GetAcl { path: s("/a") },
            Request::SetAcl { path: s("/a"), acl: Some(open_acl()), version: 0 },
            Request::GetChildren { path: s("/"), watch: true },
            Request::GetChildren2 { path: s("/"), watch: false },
            Request::Sync { path: s("/") },
            Request::Multi(vec![
                Request::Create {
                    opcode: OpCode::Create,
                    path: s("/m"),
                    data: None,
                    acl: Some(open_acl()),
                    flags: 0,
                    ttl_ms: -1,
                },
                Request::Create {
                    opcode: OpCode::CreateTtl,
                    path: s("/m2"),
                    data: None,
                    acl: Some(open_acl()),
                    flags: 5,
                    ttl_ms: 5,
                },
                Request::Check { path: s("/m"), version: 0 },
                Request::SetData { path: s("/m"), data: None, version: -1 },
                Request::Delete { path: s("/m"), version: -1 },
            ]),
            Request::Multi(vec![]),
            Request::MultiRead(vec![
                Request::GetData { path: s("/r"), watch: false },
                Request::GetChildren { path: s("/r"), watch: false },
            ]),
            Request::Auth { auth_type: 0, scheme: s("digest"), auth: Bytes::from_static(b"u:p") },
            Request::SetWatches { relative_zxid: 9, data: vec![s("/a")], exist: vec![], child: vec![s("/b"), s("/c")] },
            Request::SetWatches2 {
                relative_zxid: 9,
                data: vec![],
                exist: vec![s("/x")],
                child: vec![],
                persistent: vec![s("/p")],
                persistent_recursive: vec![s("/q")],
            },
            Request::AddWatch { path: s("/w"), mode: 1 },
            Request::RemoveWatches { path: s("/w"), watcher_type: 3 },
            Request::CheckWatches { path: s("/w"), watcher_type: 1 },
            Request::GetEphemerals { prefix: s("/") },
            Request::GetAllChildrenNumber { path: s("/") },
        ];
        for (i, req) in reqs.into_iter().enumerate() {
            let xid = i as i32 + 1;
            let got = decode_request(wire(xid, &req));
            assert_eq!(got, Ok((RequestHeader { xid, opcode: req.opcode().code() }, req)));
        }
    }

    #[test]
    fn multi_wire_layout() {
        let multi = Request::Multi(vec![Request::Check { path: "/".into(), version: 0 }]);
        let golden: &[u8] = &[
            0, 0, 0, 5, 0, 0, 0, 14, // header
            0, 0, 0, 13, 0, 0xff, 0xff, 0xff, 0xff, // {check, false, -1}
            0, 0, 0, 1, b'/', 0, 0, 0, 0, // CheckVersionRequest
            0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff, // end marker
        ];
        assert_eq!(&wire(5, &multi)[..], golden);
        // The end marker is recognised by done alone; bytes after it are ignored.
        let mut b = golden.to_vec();
        b.extend_from_slice(b"junk");
        assert_eq!(decode_request(Bytes::from(b)).unwrap().1, multi);
    }

    #[test]
    fn multi_read_ignores_watch_flags() {
        let mut body = Vec::new();
        body.extend_from_slice(&[0, 0, 0, 4, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, b'/', 1]);
        body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff]);
        let (_, req) = decode_request(raw(2, 22, &body)).unwrap();
        assert_eq!(req, Request::MultiRead(vec![Request::GetData { path: "/".into(), watch: false }]));
    }

    #[test]
    fn bad_multis_are_marshalling_errors() {
        let marshalling = |xid| Err(RequestError::Reply { xid, err: ErrorCode::MarshallingError });
        let read_in_multi = Request::MultiRead(vec![Request::GetData { path: "/".into(), watch: false }]);
        let mut b = wire(4, &read_in_multi).to_vec();
        b[7] = 14; // relabel the multiRead as a multi
        assert_eq!(decode_request(Bytes::from(b)), marshalling(4));
        let write_in_read = Request::Multi(vec![Request::Delete { path: "/".into(), version: 0 }]);
        let mut b = wire(4, &write_in_read).to_vec();
        b[7] = 22;
        assert_eq!(decode_request(Bytes::from(b)), marshalling(4));
        // Unknown sub-op type with done = false.
        let body = [0, 0, 0, 99, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(decode_request(raw(4, 14, &body)), marshalling(4));
        // No end marker.
        let w = wire(4, &write_in_read);
        assert_eq!(decode_request(w.slice(..w.len() - 9)), marshalling(4));
        // Nested multi.
        let body = [0, 0, 0, 14, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(decode_request(raw(4, 14, &body)), marshalling(4));
    }

    #[test]
    fn error_mapping() {
        let reply_close = |xid, err| Err(RequestError::ReplyAndClose { xid, err });
        assert_eq!(
            decode_request(Bytes::from_static(&[0, 0, 0, 1, 0, 0, 0])),
            Err(RequestError::Close { reason: "truncated request header" })
        );
        assert_eq!(decode_request(Bytes::new()), Err(RequestError::Close { reason: "truncated request header" }));
        for op in [0, 10, 23, 99, 108, -1, -12, i32::MAX, i32::MIN] {
            assert_eq!(decode_request(raw(8, op, &[])), reply_close(8, ErrorCode::Unimplemented), "opcode {op}");
        }
        // Top-level check: a read (answered by the core); reconfig: decoded; createSession.
        assert_eq!(
            decode_request(raw(8, 13, &[0, 0, 0, 1, b'/', 0, 0, 0, 0])),
            Ok((RequestHeader { xid: 8, opcode: 13 }, Request::Check { path: "/".into(), version: 0 }))
        );
        let marshalling = Err(RequestError::Reply { xid: 8, err: ErrorCode::MarshallingError });
        assert_eq!(decode_request(raw(8, 13, &[])), marshalling);
        assert_eq!(decode_request(raw(8, 16, &[])), marshalling);
        let reconfig = [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        // Empty joining and leaving, null newMembers, curConfigId -1.
        let reconfig_req = Request::Reconfig {
            joining: Some(String::new()),
            leaving: Some(String::new()),
            new_members: None,
            cur_config_id: -1,
        };
        assert_eq!(
            decode_request(raw(8, 16, &reconfig)),
            Ok((RequestHeader { xid: 8, opcode: 16 }, reconfig_req.clone()))
        );
        let mut framed = BytesMut::new();
        encode_request(&mut framed, 8, &reconfig_req);
        assert_eq!(
            decode_request(framed.freeze().slice(4..)),
            Ok((RequestHeader { xid: 8, opcode: 16 }, reconfig_req))
        );
        assert_eq!(decode_request(raw(8, -10, &[0, 0])), marshalling);
        assert!(matches!(decode_request(raw(8, -10, &[0, 0, 39, 16])), Err(RequestError::Close { .. })));
        // deleteContainer from a client: BadArguments, as Apache 3.8 answers it.
        assert_eq!(
            decode_request(raw(8, 20, &[0, 0, 0, 2, b'/', b'a'])),
            Err(RequestError::Reply { xid: 8, err: ErrorCode::BadArguments })
        );
        assert_eq!(
            decode_request(raw(8, 102, &[0, 0, 0, 0])),
            Ok((RequestHeader { xid: 8, opcode: 102 }, Request::Sasl { token: Some(Bytes::new()) }))
        );
        assert!(matches!(decode_request(raw(8, 102, &[0, 0])), Err(RequestError::Close { .. })));
        // Malformed bodies.
        assert_eq!(
            decode_request(raw(9, 4, &[0, 0, 0, 1, b'/'])),
            Err(RequestError::Reply { xid: 9, err: ErrorCode::MarshallingError })
        );
        // Bytes that are not UTF-8 decode as U+FFFD, as Java's reader does (paths with it are
        // then refused by validation, or simply not found by reads).
        assert_eq!(
            decode_request(raw(9, 3, &[0, 0, 0, 1, 0xff, 0])),
            Ok((RequestHeader { xid: 9, opcode: 3 }, Request::Exists { path: "\u{fffd}".into(), watch: false }))
        );
        assert_eq!(
            decode_request(raw(9, 8, &[0xff, 0xff, 0xff, 0xff, 0])),
            Err(RequestError::Reply { xid: 9, err: ErrorCode::MarshallingError })
        );
        assert_eq!(
            decode_request(raw(-8, 101, &[0; 8])),
            Err(RequestError::Reply { xid: -8, err: ErrorCode::MarshallingError })
        );
        assert_eq!(
            decode_request(raw(-4, 100, &[0, 0, 0, 0])),
            Err(RequestError::Close { reason: "malformed AuthPacket" })
        );
    }

    #[test]
    fn write_and_sync_classification() {
        assert!(Request::CloseSession.is_write());
        assert!(Request::Multi(vec![]).is_write());
        assert!(!Request::MultiRead(vec![]).is_write());
        assert!(!Request::Sync { path: "/".into() }.is_write());
        assert!(Request::Sync { path: "/".into() }.is_sync());
        assert!(!Request::GetData { path: "/".into(), watch: false }.is_write());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_request(Bytes::from(bytes));
        }

        #[test]
        fn arbitrary_bodies_of_known_ops_never_panic(
            op in prop::sample::select(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 17, 18, 19, 21, 22, 100, 101, 103, 104, 105, 106, 107, -11]),
            body in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xffu8), Just(1u8), any::<u8>()], 0..96),
        ) {
            let _ = decode_request(raw(1, op, &body));
        }

        #[test]
        fn set_data_round_trips(path in "/[a-z\u{e9}\u{4e2d}]{0,10}", data in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)), version in any::<i32>()) {
            let req = Request::SetData { path, data: data.map(Bytes::from), version };
            prop_assert_eq!(decode_request(wire(17, &req)), Ok((RequestHeader { xid: 17, opcode: 5 }, req)));
        }
    }
}
