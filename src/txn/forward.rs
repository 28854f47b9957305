//! What a follower's (or observer's) pipeline forwards to the leader's pipeline, and the
//! leader's answers: the payloads ZAB carries opaquely in `FollowerMsg::Request` and
//! `LeaderMsg::Reply`. Format: a tag byte, then jute-encoded fields (big-endian ints,
//! length-prefixed strings and buffers, -1 for null); documented in docs/peer-protocol.md.
//! Rules: encode is total; decode checks every length and count against the bytes left (no
//! count caps: what a follower's client cores accept, the leader reads), never panics, and
//! refuses trailing bytes; a multi nests one level only.

use super::WriteOp;
use crate::proto::jute::{self, JuteError, JuteReader};
use crate::proto::{Acl, Id};
use bytes::{BufMut, Bytes, BytesMut};

/// Most session ids one touch carries (a follower sends more as several touches).
pub const TOUCH_SESSIONS_MAX: usize = 1 << 20;
/// Smallest encoding of an auth id: two string lengths.
const AUTH_ID_BYTES_MIN: usize = 8;
/// Smallest encoding of a write op: its tag (closeSession).
const OP_BYTES_MIN: usize = 1;
/// Encoding of a session id in a touch.
const SESSION_ID_BYTES: usize = 8;

/// A follower's request to the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forward {
    /// A client write of `session_id` (request `cxid`), with the connection's ids when sent;
    /// `request` names it on the follower (the leader's Proposed answer carries it back).
    Write { request: u64, session_id: i64, cxid: i32, auth: Vec<Id>, op: WriteOp },
    /// A new session the follower named (its server id is in the id's top byte).
    CreateSession { session_id: i64, timeout_ms: i32 },
    /// A client resumes `session_id` on the follower: is it alive? It is owned there now.
    Revalidate { token: u64, session_id: i64, timeout_ms: i32 },
    /// Sessions that sent something since the last touch.
    Touch { sessions: Vec<i64> },
    /// A client's sync: the leader answers with the zxid it has proposed up to.
    Sync { token: u64 },
}

/// The leader's answer to one forwarded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderReply {
    /// The follower's write `request` became the txn at `zxid` (sent right after its proposal,
    /// before its commit): the follower answers its client when it delivers `zxid`.
    Proposed {
        request: u64,
        zxid: i64,
    },
    Revalidated {
        token: u64,
        alive: bool,
    },
    SyncedTo {
        token: u64,
        zxid: i64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardDecodeError {
    Jute(JuteError),
    BadTag(u8),
    TooMany(usize),
    NestedMulti,
    TrailingBytes(usize),
}

impl From<JuteError> for ForwardDecodeError {
    fn from(e: JuteError) -> Self {
        ForwardDecodeError::Jute(e)
    }
}

impl std::fmt::Display for ForwardDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed forwarded request: {self:?}")
    }
}

const F_WRITE: u8 = 1;
const F_CREATE_SESSION: u8 = 2;
const F_REVALIDATE: u8 = 3;
const F_TOUCH: u8 = 4;
const F_SYNC: u8 = 5;
const R_REVALIDATED: u8 = 1;
const R_SYNCED_TO: u8 = 2;
const R_PROPOSED: u8 = 3;

const OP_CREATE: u8 = 1;
const OP_DELETE: u8 = 2;
const OP_SET_DATA: u8 = 3;
const OP_SET_ACL: u8 = 4;
const OP_CHECK: u8 = 5;
const OP_MULTI: u8 = 6;
const OP_CREATE_SESSION: u8 = 7;
const OP_CLOSE_SESSION: u8 = 8;
const OP_DELETE_CONTAINER: u8 = 9;
const OP_RECONFIG: u8 = 10;

pub fn encode_forward(f: &Forward) -> Bytes {
    let mut out = BytesMut::new();
    match f {
        Forward::Write { request, session_id, cxid, auth, op } => {
            out.put_u8(F_WRITE);
            out.put_u64(*request);
            out.put_i64(*session_id);
            out.put_i32(*cxid);
            out.put_u32(auth.len() as u32);
            for id in auth {
                jute::write_string(&mut out, &id.scheme);
                jute::write_string(&mut out, &id.id);
            }
            encode_op(op, &mut out);
        }
        Forward::CreateSession { session_id, timeout_ms } => {
            out.put_u8(F_CREATE_SESSION);
            out.put_i64(*session_id);
            out.put_i32(*timeout_ms);
        }
        Forward::Revalidate { token, session_id, timeout_ms } => {
            out.put_u8(F_REVALIDATE);
            out.put_u64(*token);
            out.put_i64(*session_id);
            out.put_i32(*timeout_ms);
        }
        Forward::Touch { sessions } => {
            out.put_u8(F_TOUCH);
            out.put_u32(sessions.len() as u32);
            for s in sessions {
                out.put_i64(*s);
            }
        }
        Forward::Sync { token } => {
            out.put_u8(F_SYNC);
            out.put_u64(*token);
        }
    }
    out.freeze()
}

fn put_acl(acl: &Option<Vec<Acl>>, out: &mut BytesMut) {
    match acl {
        Some(a) => jute::write_acl_vec(out, a),
        None => out.put_i32(-1),
    }
}

fn encode_op(op: &WriteOp, out: &mut BytesMut) {
    match op {
        WriteOp::Create { opcode, path, data, acl, flags, ttl_ms } => {
            out.put_u8(OP_CREATE);
            out.put_i32(*opcode);
            jute::write_string(out, path);
            jute::write_buffer(out, data.as_deref());
            put_acl(acl, out);
            out.put_i32(*flags);
            out.put_i64(*ttl_ms);
        }
        WriteOp::Delete { path, version } => {
            out.put_u8(OP_DELETE);
            jute::write_string(out, path);
            out.put_i32(*version);
        }
        WriteOp::SetData { path, data, version } => {
            out.put_u8(OP_SET_DATA);
            jute::write_string(out, path);
            jute::write_buffer(out, data.as_deref());
            out.put_i32(*version);
        }
        WriteOp::SetAcl { path, acl, version } => {
            out.put_u8(OP_SET_ACL);
            jute::write_string(out, path);
            put_acl(acl, out);
            out.put_i32(*version);
        }
        WriteOp::Check { path, version } => {
            out.put_u8(OP_CHECK);
            jute::write_string(out, path);
            out.put_i32(*version);
        }
        WriteOp::Multi(ops) => {
            out.put_u8(OP_MULTI);
            out.put_u32(ops.len() as u32);
            for o in ops {
                encode_op(o, out);
            }
        }
        WriteOp::CreateSession { timeout_ms } => {
            out.put_u8(OP_CREATE_SESSION);
            out.put_i32(*timeout_ms);
        }
        WriteOp::CloseSession => out.put_u8(OP_CLOSE_SESSION),
        WriteOp::DeleteContainer { path } => {
            out.put_u8(OP_DELETE_CONTAINER);
            jute::write_string(out, path);
        }
        WriteOp::Reconfig { joining, leaving, new_members, cur_config_id } => {
            out.put_u8(OP_RECONFIG);
            for s in [joining, leaving, new_members] {
                match s {
                    Some(s) => jute::write_string(out, s),
                    None => out.put_i32(-1),
                }
            }
            out.put_i64(*cur_config_id);
        }
    }
}

/// A count of entries of at least `entry_min_bytes` each, checked against the bytes left.
fn read_count(r: &mut JuteReader, entry_min_bytes: usize) -> Result<usize, ForwardDecodeError> {
    let n = r.read_int()? as u32 as usize;
    if n > r.remaining() / entry_min_bytes {
        return Err(ForwardDecodeError::TooMany(n));
    }
    Ok(n)
}

fn decode_op(r: &mut JuteReader, nested: bool) -> Result<WriteOp, ForwardDecodeError> {
    Ok(match r.read_byte()? {
        OP_CREATE => WriteOp::Create {
            opcode: r.read_int()?,
            path: r.read_string()?,
            data: r.read_buffer()?,
            acl: r.read_acl_vec()?,
            flags: r.read_int()?,
            ttl_ms: r.read_long()?,
        },
        OP_DELETE => WriteOp::Delete { path: r.read_string()?, version: r.read_int()? },
        OP_SET_DATA => WriteOp::SetData { path: r.read_string()?, data: r.read_buffer()?, version: r.read_int()? },
        OP_SET_ACL => WriteOp::SetAcl { path: r.read_string()?, acl: r.read_acl_vec()?, version: r.read_int()? },
        OP_CHECK => WriteOp::Check { path: r.read_string()?, version: r.read_int()? },
        OP_MULTI => {
            if nested {
                return Err(ForwardDecodeError::NestedMulti);
            }
            let n = read_count(r, OP_BYTES_MIN)?;
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                ops.push(decode_op(r, true)?);
            }
            WriteOp::Multi(ops)
        }
        OP_CREATE_SESSION => WriteOp::CreateSession { timeout_ms: r.read_int()? },
        OP_CLOSE_SESSION => WriteOp::CloseSession,
        OP_DELETE_CONTAINER => WriteOp::DeleteContainer { path: r.read_string()? },
        OP_RECONFIG if !nested => WriteOp::Reconfig {
            joining: r.read_opt_string()?,
            leaving: r.read_opt_string()?,
            new_members: r.read_opt_string()?,
            cur_config_id: r.read_long()?,
        },
        tag => return Err(ForwardDecodeError::BadTag(tag)),
    })
}

fn finish<T>(r: JuteReader, v: T) -> Result<T, ForwardDecodeError> {
    match r.remaining() {
        0 => Ok(v),
        n => Err(ForwardDecodeError::TrailingBytes(n)),
    }
}

pub fn decode_forward(buf: Bytes) -> Result<Forward, ForwardDecodeError> {
    let mut r = JuteReader::new(buf);
    let f = match r.read_byte()? {
        F_WRITE => {
            let request = r.read_long()? as u64;
            let session_id = r.read_long()?;
            let cxid = r.read_int()?;
            let n = read_count(&mut r, AUTH_ID_BYTES_MIN)?;
            let mut auth = Vec::with_capacity(n);
            for _ in 0..n {
                auth.push(Id { scheme: r.read_string()?, id: r.read_string()? });
            }
            let op = decode_op(&mut r, false)?;
            Forward::Write { request, session_id, cxid, auth, op }
        }
        F_CREATE_SESSION => Forward::CreateSession { session_id: r.read_long()?, timeout_ms: r.read_int()? },
        F_REVALIDATE => {
            Forward::Revalidate { token: r.read_long()? as u64, session_id: r.read_long()?, timeout_ms: r.read_int()? }
        }
        F_TOUCH => {
            let n = read_count(&mut r, SESSION_ID_BYTES)?;
            if n > TOUCH_SESSIONS_MAX {
                return Err(ForwardDecodeError::TooMany(n));
            }
            let mut sessions = Vec::with_capacity(n);
            for _ in 0..n {
                sessions.push(r.read_long()?);
            }
            Forward::Touch { sessions }
        }
        F_SYNC => Forward::Sync { token: r.read_long()? as u64 },
        tag => return Err(ForwardDecodeError::BadTag(tag)),
    };
    finish(r, f)
}

pub fn encode_reply(reply: &LeaderReply) -> Bytes {
    let mut out = BytesMut::new();
    match reply {
        LeaderReply::Revalidated { token, alive } => {
            out.put_u8(R_REVALIDATED);
            out.put_u64(*token);
            jute::write_bool(&mut out, *alive);
        }
        LeaderReply::SyncedTo { token, zxid } => {
            out.put_u8(R_SYNCED_TO);
            out.put_u64(*token);
            out.put_i64(*zxid);
        }
        LeaderReply::Proposed { request, zxid } => {
            out.put_u8(R_PROPOSED);
            out.put_u64(*request);
            out.put_i64(*zxid);
        }
    }
    out.freeze()
}

pub fn decode_reply(buf: Bytes) -> Result<LeaderReply, ForwardDecodeError> {
    let mut r = JuteReader::new(buf);
    let reply = match r.read_byte()? {
        R_REVALIDATED => LeaderReply::Revalidated { token: r.read_long()? as u64, alive: r.read_bool()? },
        R_SYNCED_TO => LeaderReply::SyncedTo { token: r.read_long()? as u64, zxid: r.read_long()? },
        R_PROPOSED => LeaderReply::Proposed { request: r.read_long()? as u64, zxid: r.read_long()? },
        tag => return Err(ForwardDecodeError::BadTag(tag)),
    };
    finish(r, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Forward> {
        let acl = Some(crate::tree::acl::open_acl_unsafe());
        let create = WriteOp::Create {
            opcode: 15,
            path: "/a/b".into(),
            data: Some(Bytes::from_static(b"xyz")),
            acl: acl.clone(),
            flags: 3,
            ttl_ms: -1,
        };
        vec![
            Forward::Write {
                request: 1,
                session_id: 0x0100_0000_0000_0001,
                cxid: 7,
                auth: vec![Id { scheme: "ip".into(), id: "127.0.0.1".into() }],
                op: create.clone(),
            },
            Forward::Write {
                request: 2,
                session_id: 5,
                cxid: -2,
                auth: vec![],
                op: WriteOp::Multi(vec![
                    create,
                    WriteOp::Delete { path: "/x".into(), version: -1 },
                    WriteOp::SetData { path: "/y".into(), data: None, version: 3 },
                    WriteOp::Check { path: "/z".into(), version: 0 },
                ]),
            },
            Forward::Write {
                request: u64::MAX,
                session_id: 5,
                cxid: 9,
                auth: vec![],
                op: WriteOp::SetAcl { path: "/q".into(), acl: None, version: 1 },
            },
            Forward::Write { request: 4, session_id: 5, cxid: 10, auth: vec![], op: WriteOp::CloseSession },
            Forward::CreateSession { session_id: 0x0200_0000_0000_0003, timeout_ms: 30_000 },
            Forward::Revalidate { token: 99, session_id: 4, timeout_ms: 10_000 },
            Forward::Touch { sessions: vec![1, 2, 3] },
            Forward::Touch { sessions: vec![] },
            Forward::Sync { token: u64::MAX },
        ]
    }

    #[test]
    fn every_forward_and_reply_round_trips() {
        for f in samples() {
            assert_eq!(decode_forward(encode_forward(&f)).unwrap(), f);
        }
        for r in [
            LeaderReply::Revalidated { token: 1, alive: true },
            LeaderReply::SyncedTo { token: 2, zxid: 1 << 33 },
            LeaderReply::Proposed { request: 3, zxid: (1 << 32) | 7 },
        ] {
            assert_eq!(decode_reply(encode_reply(&r)).unwrap(), r);
        }
    }

    /// What a follower's client cores accept, the leader reads: no count caps (before, more
    /// than 1,024 auth ids or 65,536 multi ops made the forward unreadable and the write was
    /// dropped by the leader).
    #[test]
    fn hardening_1_forwards_past_the_old_count_caps_decode() {
        let auth = (0..2000).map(|i| Id { scheme: "digest".into(), id: format!("u{i}:h") }).collect();
        let op = WriteOp::Multi(vec![WriteOp::Check { path: "/".into(), version: -1 }; 70_000]);
        let f = Forward::Write { request: 1, session_id: 2, cxid: 3, auth, op };
        assert_eq!(decode_forward(encode_forward(&f)).unwrap(), f);
    }

    /// A peer's bytes are untrusted: every truncation, and trailing garbage, is an error.
    #[test]
    fn truncated_or_padded_input_is_an_error_never_a_panic() {
        for f in samples() {
            let bytes = encode_forward(&f);
            for cut in 0..bytes.len() {
                assert!(decode_forward(bytes.slice(..cut)).is_err(), "{f:?} cut at {cut}");
            }
            let mut padded = BytesMut::from(&bytes[..]);
            padded.put_u8(0);
            assert_eq!(decode_forward(padded.freeze()), Err(ForwardDecodeError::TrailingBytes(1)));
        }
        assert_eq!(decode_forward(Bytes::from_static(&[42])), Err(ForwardDecodeError::BadTag(42)));
        let huge = [&[F_TOUCH][..], &u32::MAX.to_be_bytes()].concat();
        assert!(matches!(decode_forward(Bytes::from(huge)), Err(ForwardDecodeError::TooMany(_))));
    }
}
