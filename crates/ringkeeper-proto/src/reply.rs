//! Server replies: `ReplyHeader{xid, zxid, err}` plus the op's response record, and watch
//! notifications (xid -1). The server encodes them (`encode_reply`), the client decodes them
//! (`decode_response`, knowing the opcode of the request the reply answers).
//! Rules: a body is written only when the header err is 0 (Java clients never parse a body
//! otherwise); a multi always gets header err 0 and carries its errors in the body; every
//! frame is appended whole (length prefix first) to the connection's output buffer; data
//! buffers are copied at most once, into that buffer, or not at all when the caller sends a
//! GetData's data from where it lies (`encode_reply_sharing`); decoding never panics and
//! allocates no more than the frame justifies.

use bytes::{Bytes, BytesMut};

use super::frame::{begin_frame, end_frame};
use super::jute::{self, JuteError, JuteReader};
use super::opcode::{OpCode, XID_NOTIFICATION};
use super::records::{Acl, MultiHeader, Stat, WatcherEvent};

/// Size of a ReplyHeader.
pub const REPLY_HEADER_BYTES: usize = 16;
/// The zxid ZooKeeper up to 3.8 puts in every notification's header (3.9+ sends the
/// triggering txn's zxid, and still -1 for events raised by SetWatches).
pub const NOTIFICATION_ZXID: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// ReplyHeader, before every reply: `{int xid, long zxid, int err}`.
pub struct ReplyHeader {
    /// int: the xid of the request answered, or a special xid (`opcode::XID_*`).
    pub xid: i32,
    /// long: the last zxid the server had processed when it replied (`NOTIFICATION_ZXID` in a
    /// notification from ZooKeeper up to 3.8).
    pub zxid: i64,
    /// int: an `ErrorCode` (0 for success); a body follows only when it is 0.
    pub err: i32,
}

impl ReplyHeader {
    /// Reads a ReplyHeader.
    pub fn read(r: &mut JuteReader) -> Result<ReplyHeader, JuteError> {
        Ok(ReplyHeader { xid: r.read_int()?, zxid: r.read_long()?, err: r.read_int()? })
    }

    /// Appends the 16-byte ReplyHeader.
    pub fn write(&self, out: &mut BytesMut) {
        jute::write_int(out, self.xid);
        jute::write_long(out, self.zxid);
        jute::write_int(out, self.err);
    }
}

/// The body of a successful reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// No body: delete, ping, auth, setWatches, checkWatches, removeWatches, closeSession,
    /// and every error reply.
    None,
    /// CreateResponse (op 1).
    Create {
        /// ustring: the created path (with its sequence suffix, if any).
        path: String,
    },
    /// Create2Response (ops 15, 19, 21).
    Create2 {
        /// ustring: the created path.
        path: String,
        /// Stat: the new znode's Stat.
        stat: Stat,
    },
    /// exists, setData, setACL.
    Stat(Stat),
    /// GetDataResponse (op 4).
    GetData {
        /// buffer: the znode's data (`None` for a null buffer).
        data: Option<Bytes>,
        /// Stat: the znode's Stat.
        stat: Stat,
    },
    /// GetACLResponse (op 6).
    GetAcl {
        /// `vector<ACL>`: the znode's ACL.
        acl: Vec<Acl>,
        /// Stat: the znode's Stat.
        stat: Stat,
    },
    /// GetChildrenResponse (op 8): `vector<ustring>` of child names.
    Children(Vec<String>),
    /// GetChildren2Response (op 12).
    Children2 {
        /// `vector<ustring>`: the child names.
        children: Vec<String>,
        /// Stat: the parent znode's Stat.
        stat: Stat,
    },
    /// SyncResponse (op 9).
    Sync {
        /// ustring: the path that was synced.
        path: String,
    },
    /// The results of a multi (op 14), one per sub-op, then the end marker.
    Multi(Vec<MultiResult>),
    /// The results of a multiRead (op 22), one per sub-op, then the end marker.
    MultiRead(Vec<MultiReadResult>),
    /// GetEphemeralsResponse (op 103): `vector<ustring>` of the session's ephemeral paths.
    Ephemerals(Vec<String>),
    /// GetAllChildrenNumberResponse (op 104): int, the number of descendants.
    AllChildrenNumber(i32),
    /// (scheme, user) pairs: WhoAmIResponse's vector<ClientInfo{authScheme, user}>.
    WhoAmI(Vec<(String, String)>),
    /// ErrorResponse{int err}: the 4-byte body addWatch answers with (err 0) on success.
    ErrorResponse(i32),
    /// SetSASLResponse{buffer token}.
    Sasl(Option<Bytes>),
}

/// One result of a multi (op 14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    /// CreateResponse, for a create (op 1) sub-op.
    Create {
        /// ustring: the created path.
        path: String,
    },
    /// Create2Response, for a create2, createContainer or createTTL sub-op.
    Create2 {
        /// ustring: the created path.
        path: String,
        /// Stat: the new znode's Stat.
        stat: Stat,
    },
    /// A delete sub-op succeeded (no body).
    Delete,
    /// SetDataResponse, for a setData sub-op.
    SetData {
        /// Stat: the znode's new Stat.
        stat: Stat,
    },
    /// A check sub-op succeeded (no body).
    Check,
    /// A failed op (its real code), an op before the failing one (0) or after it (-2).
    Error(i32),
}

/// One result of a multiRead (op 22).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiReadResult {
    /// GetDataResponse, for a getData sub-op.
    GetData {
        /// buffer: the znode's data (`None` for a null buffer).
        data: Option<Bytes>,
        /// Stat: the znode's Stat.
        stat: Stat,
    },
    /// GetChildrenResponse, for a getChildren sub-op.
    GetChildren {
        /// `vector<ustring>`: the child names.
        children: Vec<String>,
    },
    /// ErrorResult{int err}: a sub-op that failed with this error code (each sub-op of a
    /// multiRead succeeds or fails on its own).
    Error(i32),
}

/// The ReplyHeader err ZooKeeper sends for a multi: always 0, also when a sub-op failed
/// (observed on 3.8.0; FinalRequestProcessor does not raise a multi's error). The failure is
/// reported inside the body, where every result is then an Error and the client raises the
/// first non-zero one. A non-zero header err would make clients skip the body entirely.
pub fn multi_header_err(_results: &[MultiResult]) -> i32 {
    0
}

/// Appends one reply frame: length prefix, header, then the body if `hdr.err == 0`.
pub fn encode_reply(out: &mut BytesMut, hdr: &ReplyHeader, body: &Response) {
    let at = begin_frame(out);
    hdr.write(out);
    // An error has no body, except a sasl refusal: ZooKeeper sends its SetSASLResponse (a
    // null token) behind AuthFailed / SessionClosedRequireSaslAuth.
    if hdr.err == 0 || matches!(body, Response::Sasl(_)) {
        write_response(out, body);
    }
    end_frame(out, at);
}

/// Appends one reply frame as `encode_reply` does, except that the data of a successful
/// GetData of at least `share_min` bytes is not copied into `out`: once `out` holds the frame
/// up to the data, `share(out, data)` is called, and the caller must send `data` between what
/// `out` held then and what is appended after (the Stat). The frame's length counts the data.
pub fn encode_reply_sharing(
    out: &mut BytesMut,
    hdr: &ReplyHeader,
    body: &Response,
    share_min: usize,
    share: impl FnOnce(&mut BytesMut, &Bytes),
) {
    let (data, stat) = match body {
        Response::GetData { data: Some(data), stat } if hdr.err == 0 && data.len() >= share_min => (data, stat),
        _ => return encode_reply(out, hdr, body),
    };
    let len = REPLY_HEADER_BYTES + 4 + data.len() + jute::STAT_BYTES;
    jute::write_int(out, jute::wire_len(len));
    hdr.write(out);
    jute::write_int(out, jute::wire_len(data.len()));
    share(out, data);
    jute::write_stat(out, stat);
}

fn write_response(out: &mut BytesMut, body: &Response) {
    use jute::{write_acl_vec, write_buffer, write_int, write_stat, write_string, write_string_vec};
    match body {
        Response::None => {}
        Response::Create { path } | Response::Sync { path } => write_string(out, path),
        Response::Create2 { path, stat } => {
            write_string(out, path);
            write_stat(out, stat);
        }
        Response::Stat(stat) => write_stat(out, stat),
        Response::GetData { data, stat } => {
            write_buffer(out, data.as_deref());
            write_stat(out, stat);
        }
        Response::GetAcl { acl, stat } => {
            write_acl_vec(out, acl);
            write_stat(out, stat);
        }
        Response::Children(children) | Response::Ephemerals(children) => write_string_vec(out, children),
        Response::Children2 { children, stat } => {
            write_string_vec(out, children);
            write_stat(out, stat);
        }
        Response::Multi(results) => {
            for r in results {
                write_multi_result(out, r);
            }
            MultiHeader::END.write(out);
        }
        Response::MultiRead(results) => {
            for r in results {
                write_multi_read_result(out, r);
            }
            MultiHeader::END.write(out);
        }
        Response::AllChildrenNumber(n) | Response::ErrorResponse(n) => write_int(out, *n),
        Response::Sasl(token) => write_buffer(out, token.as_deref()),
        Response::WhoAmI(infos) => {
            write_int(out, jute::wire_len(infos.len()));
            for (scheme, user) in infos {
                write_string(out, scheme);
                write_string(out, user);
            }
        }
    }
}

fn result_header(out: &mut BytesMut, op: OpCode) {
    MultiHeader { op_type: op.code(), done: false, err: 0 }.write(out);
}

fn error_result(out: &mut BytesMut, err: i32) {
    MultiHeader { op_type: OpCode::Error.code(), done: false, err }.write(out);
    jute::write_int(out, err);
}

fn write_multi_result(out: &mut BytesMut, r: &MultiResult) {
    match r {
        MultiResult::Create { path } => {
            result_header(out, OpCode::Create);
            jute::write_string(out, path);
        }
        MultiResult::Create2 { path, stat } => {
            result_header(out, OpCode::Create2);
            jute::write_string(out, path);
            jute::write_stat(out, stat);
        }
        MultiResult::Delete => result_header(out, OpCode::Delete),
        MultiResult::SetData { stat } => {
            result_header(out, OpCode::SetData);
            jute::write_stat(out, stat);
        }
        MultiResult::Check => result_header(out, OpCode::Check),
        MultiResult::Error(err) => error_result(out, *err),
    }
}

fn write_multi_read_result(out: &mut BytesMut, r: &MultiReadResult) {
    match r {
        MultiReadResult::GetData { data, stat } => {
            result_header(out, OpCode::GetData);
            jute::write_buffer(out, data.as_deref());
            jute::write_stat(out, stat);
        }
        MultiReadResult::GetChildren { children } => {
            result_header(out, OpCode::GetChildren);
            jute::write_string_vec(out, children);
        }
        MultiReadResult::Error(err) => error_result(out, *err),
    }
}

/// Appends a watch notification frame: `ReplyHeader{-1, -1, 0}` + `WatcherEvent`, as
/// ZooKeeper 3.8 sends it.
pub fn encode_notification(out: &mut BytesMut, event_type: i32, state: i32, path: &str) {
    encode_notification_with_zxid(out, NOTIFICATION_ZXID, event_type, state, path);
}

/// Like `encode_notification` but with the header zxid given (3.9+ sends the zxid of the txn
/// that fired the watch).
pub fn encode_notification_with_zxid(out: &mut BytesMut, zxid: i64, event_type: i32, state: i32, path: &str) {
    let at = begin_frame(out);
    ReplyHeader { xid: XID_NOTIFICATION, zxid, err: 0 }.write(out);
    jute::write_int(out, event_type);
    jute::write_int(out, state);
    jute::write_string(out, path);
    end_frame(out, at);
}

/// Reads a notification frame (without its prefix): client side and tests.
pub fn decode_notification(frame: Bytes) -> Result<(ReplyHeader, WatcherEvent), JuteError> {
    let mut r = JuteReader::new(frame);
    let hdr = ReplyHeader::read(&mut r)?;
    Ok((hdr, WatcherEvent::read(&mut r)?))
}

/// Decodes the body of a successful reply (header err 0, header already read) to a request
/// sent with `opcode`. Bytes after the record are ignored, as Java's deserializers ignore
/// them. Ops without a response record give `Response::None`; addWatch's 4-byte
/// ErrorResponse is read when present (a server that leaves it out is not an error).
pub fn decode_response(opcode: OpCode, body: Bytes) -> Result<Response, JuteError> {
    let mut r = JuteReader::new(body);
    Ok(match opcode {
        OpCode::Create => Response::Create { path: r.read_string()? },
        OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
            Response::Create2 { path: r.read_string()?, stat: r.read_stat()? }
        }
        OpCode::Exists | OpCode::SetData | OpCode::SetAcl => Response::Stat(r.read_stat()?),
        OpCode::GetData | OpCode::Reconfig => Response::GetData { data: r.read_buffer()?, stat: r.read_stat()? },
        OpCode::GetAcl => Response::GetAcl { acl: r.read_acl_vec()?.unwrap_or_default(), stat: r.read_stat()? },
        OpCode::GetChildren => Response::Children(r.read_string_vec()?),
        OpCode::GetChildren2 => Response::Children2 { children: r.read_string_vec()?, stat: r.read_stat()? },
        OpCode::Sync => Response::Sync { path: r.read_string()? },
        OpCode::Multi => Response::Multi(read_multi_results(&mut r, read_multi_result)?),
        OpCode::MultiRead => Response::MultiRead(read_multi_results(&mut r, read_multi_read_result)?),
        OpCode::GetEphemerals => Response::Ephemerals(r.read_string_vec()?),
        OpCode::GetAllChildrenNumber => Response::AllChildrenNumber(r.read_int()?),
        OpCode::WhoAmI => Response::WhoAmI(read_client_infos(&mut r)?),
        OpCode::AddWatch if r.remaining() > 0 => Response::ErrorResponse(r.read_int()?),
        // SetSASLResponse; a reply without a body (a server that has none) reads as null.
        OpCode::Sasl if r.remaining() > 0 => Response::Sasl(r.read_buffer()?),
        OpCode::AddWatch
        | OpCode::Delete
        | OpCode::Ping
        | OpCode::Auth
        | OpCode::SetWatches
        | OpCode::SetWatches2
        | OpCode::CheckWatches
        | OpCode::RemoveWatches
        | OpCode::CloseSession
        | OpCode::Check
        | OpCode::DeleteContainer
        | OpCode::Sasl
        | OpCode::Notification
        | OpCode::CreateSession
        | OpCode::Error => Response::None,
    })
}

/// WhoAmIResponse: vector<ClientInfo{authScheme, user}>; null reads as empty.
fn read_client_infos(r: &mut JuteReader) -> Result<Vec<(String, String)>, JuteError> {
    let count = r.read_int()?;
    if count < -1 {
        return Err(JuteError::NegativeLength(count));
    }
    // Each entry is at least two 4-byte string lengths.
    let count = usize::try_from(count).unwrap_or(0);
    if count > r.remaining() / 8 {
        return Err(JuteError::TooManyEntries(count as i32));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let scheme = r.read_opt_string()?.unwrap_or_default();
        let user = r.read_opt_string()?.unwrap_or_default();
        out.push((scheme, user));
    }
    Ok(out)
}

/// Reads `MultiHeader, result` pairs up to the end marker (done = true). Every entry consumes
/// at least 9 bytes, so the list is bounded by the frame.
fn read_multi_results<T>(
    r: &mut JuteReader,
    read_one: fn(&mut JuteReader, MultiHeader) -> Result<T, JuteError>,
) -> Result<Vec<T>, JuteError> {
    let mut out = Vec::new();
    loop {
        let h = MultiHeader::read(r)?;
        if h.done {
            return Ok(out);
        }
        out.push(read_one(r, h)?);
    }
}

fn read_multi_result(r: &mut JuteReader, h: MultiHeader) -> Result<MultiResult, JuteError> {
    Ok(match OpCode::from_code(h.op_type) {
        Some(OpCode::Create) => MultiResult::Create { path: r.read_string()? },
        Some(OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl) => {
            MultiResult::Create2 { path: r.read_string()?, stat: r.read_stat()? }
        }
        Some(OpCode::Delete) => MultiResult::Delete,
        Some(OpCode::SetData) => MultiResult::SetData { stat: r.read_stat()? },
        Some(OpCode::Check) => MultiResult::Check,
        Some(OpCode::Error) => MultiResult::Error(r.read_int()?),
        _ => return Err(JuteError::UnexpectedType(h.op_type)),
    })
}

fn read_multi_read_result(r: &mut JuteReader, h: MultiHeader) -> Result<MultiReadResult, JuteError> {
    Ok(match OpCode::from_code(h.op_type) {
        Some(OpCode::GetData) => MultiReadResult::GetData { data: r.read_buffer()?, stat: r.read_stat()? },
        Some(OpCode::GetChildren) => MultiReadResult::GetChildren { children: r.read_string_vec()? },
        Some(OpCode::Error) => MultiReadResult::Error(r.read_int()?),
        _ => return Err(JuteError::UnexpectedType(h.op_type)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Id;
    use proptest::prelude::*;

    fn stat(n: i64) -> Stat {
        Stat {
            czxid: n,
            mzxid: n,
            ctime: 1_700_000_000_000,
            mtime: 1_700_000_000_000,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 2,
            num_children: 0,
            pzxid: n,
        }
    }

    fn stat_bytes(s: &Stat) -> Vec<u8> {
        let mut out = BytesMut::new();
        jute::write_stat(&mut out, s);
        out.to_vec()
    }

    fn encode(hdr: ReplyHeader, body: &Response) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_reply(&mut out, &hdr, body);
        out.to_vec()
    }

    #[test]
    fn golden_get_data_reply() {
        let s = stat(5);
        let got = encode(
            ReplyHeader { xid: 3, zxid: 5, err: 0 },
            &Response::GetData { data: Some(Bytes::from_static(b"hi")), stat: s },
        );
        let mut golden = vec![0, 0, 0, 90, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 2, b'h', b'i'];
        golden.extend_from_slice(&stat_bytes(&s));
        assert_eq!(got, golden);
        // Null data comes back as length -1.
        let got = encode(ReplyHeader { xid: 3, zxid: 5, err: 0 }, &Response::GetData { data: None, stat: s });
        assert_eq!(&got[20..24], &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(got.len(), 4 + 16 + 4 + 68);
    }

    #[test]
    fn a_shared_get_data_reply_is_the_same_bytes() {
        let s = stat(9);
        let hdr = ReplyHeader { xid: 4, zxid: 9, err: 0 };
        let big = Bytes::from(vec![7u8; 300]);
        let cases = [
            (hdr, Response::GetData { data: Some(big.clone()), stat: s }, true),
            (hdr, Response::GetData { data: Some(Bytes::from_static(b"small")), stat: s }, false),
            (hdr, Response::GetData { data: None, stat: s }, false),
            (ReplyHeader { err: -101, ..hdr }, Response::GetData { data: Some(big.clone()), stat: s }, false),
            (hdr, Response::Stat(s), false),
        ];
        for (h, body, shares) in cases {
            let mut out = BytesMut::from(&b"before"[..]);
            let mut joined = Vec::new();
            let mut shared = false;
            encode_reply_sharing(&mut out, &h, &body, 256, |o, d| {
                joined.extend_from_slice(&o.split());
                joined.extend_from_slice(d);
                shared = true;
            });
            joined.extend_from_slice(&out);
            assert_eq!(shared, shares, "{body:?}");
            let mut whole = b"before".to_vec();
            whole.extend(encode(h, &body));
            assert_eq!(joined, whole, "{body:?}");
        }
    }

    #[test]
    fn errors_have_no_body() {
        let got = encode(ReplyHeader { xid: 3, zxid: 7, err: -101 }, &Response::Stat(stat(1)));
        assert_eq!(got, vec![0, 0, 0, 16, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x9b]);
    }

    #[test]
    fn golden_ping_reply() {
        let got = encode(ReplyHeader { xid: -2, zxid: 0x10, err: 0 }, &Response::None);
        assert_eq!(got, vec![0, 0, 0, 16, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0]);
    }

    #[test]
    fn golden_notification() {
        let mut out = BytesMut::new();
        encode_notification(&mut out, 3, 3, "/a");
        let golden = vec![
            0, 0, 0, 30, // length
            0xff, 0xff, 0xff, 0xff, // xid -1
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // zxid -1
            0, 0, 0, 0, // err
            0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 2, b'/', b'a',
        ];
        assert_eq!(out.to_vec(), golden);
        let (hdr, ev) = decode_notification(out.freeze().slice(4..)).unwrap();
        assert_eq!(hdr, ReplyHeader { xid: -1, zxid: -1, err: 0 });
        assert_eq!(ev, WatcherEvent { event_type: 3, state: 3, path: "/a".into() });
        let mut out = BytesMut::new();
        encode_notification_with_zxid(&mut out, 0x42, 4, 3, "/");
        assert_eq!(&out[8..16], &[0, 0, 0, 0, 0, 0, 0, 0x42]);
    }

    #[test]
    fn add_watch_reply_has_a_4_byte_body() {
        let got = encode(ReplyHeader { xid: 9, zxid: 1, err: 0 }, &Response::ErrorResponse(0));
        assert_eq!(got.len(), 4 + 16 + 4);
        assert_eq!(&got[20..], &[0, 0, 0, 0]);
    }

    #[test]
    fn golden_failed_multi() {
        // create /x ok-before-failure (0), delete fails NoNode, setData after it (-2).
        let results = vec![MultiResult::Error(0), MultiResult::Error(-101), MultiResult::Error(-2)];
        let err = multi_header_err(&results);
        assert_eq!(err, 0);
        let got = encode(ReplyHeader { xid: 4, zxid: 9, err }, &Response::Multi(results));
        let mut golden = vec![0, 0, 0, 16 + 3 * 13 + 9, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0];
        golden.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        golden.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0x9b, 0xff, 0xff, 0xff, 0x9b]);
        golden.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xfe]);
        golden.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(got, golden);
    }

    #[test]
    fn successful_multi_and_empty_multi() {
        let s = stat(3);
        let got = encode(
            ReplyHeader { xid: 4, zxid: 3, err: 0 },
            &Response::Multi(vec![
                MultiResult::Create { path: "/a".into() },
                MultiResult::Create2 { path: "/b".into(), stat: s },
                MultiResult::Delete,
                MultiResult::SetData { stat: s },
                MultiResult::Check,
            ]),
        );
        let mut r = JuteReader::new(Bytes::from(got).slice(4..));
        assert_eq!(ReplyHeader::read(&mut r), Ok(ReplyHeader { xid: 4, zxid: 3, err: 0 }));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 1, done: false, err: 0 }));
        assert_eq!(r.read_string().as_deref(), Ok("/a"));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 15, done: false, err: 0 }));
        assert_eq!(r.read_string().as_deref(), Ok("/b"));
        assert_eq!(r.read_stat(), Ok(s));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 2, done: false, err: 0 }));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 5, done: false, err: 0 }));
        assert_eq!(r.read_stat(), Ok(s));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 13, done: false, err: 0 }));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader::END));
        assert_eq!(r.remaining(), 0);

        let got = encode(ReplyHeader { xid: 4, zxid: 3, err: 0 }, &Response::Multi(vec![]));
        assert_eq!(&got[20..], &[0xff, 0xff, 0xff, 0xff, 1, 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn multi_read_results() {
        let s = stat(2);
        let got = encode(
            ReplyHeader { xid: 6, zxid: 2, err: 0 },
            &Response::MultiRead(vec![
                MultiReadResult::GetData { data: None, stat: s },
                MultiReadResult::GetChildren { children: vec!["c".into()] },
                MultiReadResult::Error(-101),
            ]),
        );
        let mut r = JuteReader::new(Bytes::from(got).slice(4 + REPLY_HEADER_BYTES..));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 4, done: false, err: 0 }));
        assert_eq!(r.read_buffer(), Ok(None));
        assert_eq!(r.read_stat(), Ok(s));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: 8, done: false, err: 0 }));
        assert_eq!(r.read_string_vec(), Ok(vec!["c".to_string()]));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader { op_type: -1, done: false, err: -101 }));
        assert_eq!(r.read_int(), Ok(-101));
        assert_eq!(MultiHeader::read(&mut r), Ok(MultiHeader::END));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn other_bodies() {
        let s = stat(1);
        let hdr = ReplyHeader { xid: 1, zxid: 1, err: 0 };
        let body_of = |b: &Response| Bytes::from(encode(hdr, b)).slice(4 + REPLY_HEADER_BYTES..);

        let mut r = JuteReader::new(body_of(&Response::Create { path: "/n0000000001".into() }));
        assert_eq!(r.read_string().as_deref(), Ok("/n0000000001"));
        assert_eq!(r.remaining(), 0);

        let acl = vec![Acl { perms: 1, id: Id { scheme: "world".into(), id: "anyone".into() } }];
        let mut r = JuteReader::new(body_of(&Response::GetAcl { acl: acl.clone(), stat: s }));
        assert_eq!(r.read_acl_vec(), Ok(Some(acl)));
        assert_eq!(r.read_stat(), Ok(s));

        let mut r = JuteReader::new(body_of(&Response::Children2 { children: vec!["a".into(), "b".into()], stat: s }));
        assert_eq!(r.read_string_vec(), Ok(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(r.read_stat(), Ok(s));

        assert_eq!(&body_of(&Response::AllChildrenNumber(3))[..], &[0, 0, 0, 3]);
        assert_eq!(&body_of(&Response::Stat(s))[..], &stat_bytes(&s)[..]);

        let mut r = JuteReader::new(body_of(&Response::WhoAmI(vec![("ip".into(), "127.0.0.1".into())])));
        assert_eq!(r.read_int(), Ok(1));
        assert_eq!(r.read_string().as_deref(), Ok("ip"));
        assert_eq!(r.read_string().as_deref(), Ok("127.0.0.1"));
        assert_eq!(r.remaining(), 0);
    }

    /// Encodes `body` as the server does and decodes it as a client does.
    fn round_trip(opcode: OpCode, body: &Response) -> Result<Response, JuteError> {
        let frame = Bytes::from(encode(ReplyHeader { xid: 1, zxid: 1, err: 0 }, body));
        decode_response(opcode, frame.slice(4 + REPLY_HEADER_BYTES..))
    }

    #[test]
    fn every_response_round_trips_through_decode_response() {
        let s = stat(7);
        let acl = vec![Acl { perms: 31, id: Id { scheme: "digest".into(), id: "u:h=".into() } }];
        let cases = vec![
            (OpCode::Create, Response::Create { path: "/a0000000001".into() }),
            (OpCode::Create2, Response::Create2 { path: "/b".into(), stat: s }),
            (OpCode::CreateContainer, Response::Create2 { path: "/c".into(), stat: s }),
            (OpCode::CreateTtl, Response::Create2 { path: "/t".into(), stat: s }),
            (OpCode::Delete, Response::None),
            (OpCode::Exists, Response::Stat(s)),
            (OpCode::SetData, Response::Stat(s)),
            (OpCode::SetAcl, Response::Stat(s)),
            (OpCode::GetData, Response::GetData { data: Some(Bytes::from_static(b"xy")), stat: s }),
            (OpCode::GetData, Response::GetData { data: None, stat: s }),
            (OpCode::GetAcl, Response::GetAcl { acl, stat: s }),
            (OpCode::GetChildren, Response::Children(vec!["a".into(), "b".into()])),
            (OpCode::GetChildren2, Response::Children2 { children: vec![], stat: s }),
            (OpCode::Sync, Response::Sync { path: "/".into() }),
            (OpCode::GetEphemerals, Response::Ephemerals(vec!["/e1".into()])),
            (OpCode::GetAllChildrenNumber, Response::AllChildrenNumber(3)),
            (OpCode::WhoAmI, Response::WhoAmI(vec![("ip".into(), "127.0.0.1".into()), ("super".into(), "".into())])),
            (OpCode::AddWatch, Response::ErrorResponse(0)),
            (OpCode::RemoveWatches, Response::None),
            (OpCode::CheckWatches, Response::None),
            (OpCode::SetWatches2, Response::None),
            (OpCode::CloseSession, Response::None),
            (
                OpCode::Multi,
                Response::Multi(vec![
                    MultiResult::Create { path: "/a".into() },
                    MultiResult::Create2 { path: "/b".into(), stat: s },
                    MultiResult::Delete,
                    MultiResult::SetData { stat: s },
                    MultiResult::Check,
                ]),
            ),
            (OpCode::Multi, Response::Multi(vec![MultiResult::Error(0), MultiResult::Error(-101)])),
            (OpCode::Multi, Response::Multi(vec![])),
            (
                OpCode::MultiRead,
                Response::MultiRead(vec![
                    MultiReadResult::GetData { data: None, stat: s },
                    MultiReadResult::GetChildren { children: vec!["c".into()] },
                    MultiReadResult::Error(-101),
                ]),
            ),
        ];
        for (op, body) in cases {
            assert_eq!(round_trip(op, &body), Ok(body.clone()), "{op:?}");
        }
    }

    #[test]
    fn add_watch_without_its_body_and_unknown_multi_types() {
        assert_eq!(decode_response(OpCode::AddWatch, Bytes::new()), Ok(Response::None));
        let mut out = BytesMut::new();
        MultiHeader { op_type: 4, done: false, err: 0 }.write(&mut out);
        assert_eq!(decode_response(OpCode::Multi, out.clone().freeze()), Err(JuteError::UnexpectedType(4)));
        let mut out2 = BytesMut::new();
        MultiHeader { op_type: 1, done: false, err: 0 }.write(&mut out2);
        assert_eq!(decode_response(OpCode::MultiRead, out2.freeze()), Err(JuteError::UnexpectedType(1)));
        // A multi body without its end marker is truncated, not an empty list.
        assert_eq!(decode_response(OpCode::Multi, Bytes::new()), Err(JuteError::Truncated));
        assert_eq!(decode_response(OpCode::GetData, Bytes::from_static(&[0, 0, 0, 1, 7])), Err(JuteError::Truncated));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn decode_response_never_panics(op in prop::sample::select(vec![
            OpCode::Create, OpCode::Create2, OpCode::GetData, OpCode::GetAcl, OpCode::GetChildren2,
            OpCode::Multi, OpCode::MultiRead, OpCode::WhoAmI, OpCode::GetEphemerals, OpCode::AddWatch,
        ]), bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = decode_response(op, Bytes::from(bytes));
        }
    }

    #[test]
    fn frames_append_after_existing_output() {
        let mut out = BytesMut::from(&b"prev"[..]);
        encode_reply(&mut out, &ReplyHeader { xid: 1, zxid: 0, err: 0 }, &Response::Sync { path: "/".into() });
        assert_eq!(&out[..8], b"prev\0\0\0\x15");
        assert_eq!(out.len(), 4 + 4 + 16 + 5);
    }
}
