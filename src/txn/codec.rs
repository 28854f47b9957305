//! Binary record format of a txn (ours, documented in docs/storage-format.md):
//! `zxid i64, session i64, cxid i32, time i64, op` with big-endian integers; an op is a tag
//! byte and its fields; strings and buffers are an i32 length then bytes (-1 = null).
//! Rules: encode is total; decode checks every length and count against the bytes left (each
//! entry has a minimum encoded size) and never panics. There is no count cap: whatever encode
//! wrote, decode reads back, whatever the configuration was then or is now (a record's size is
//! bounded where txns are made: prep refuses a txn over `txn_record_bytes_max`).

use super::{Txn, TxnHeader, TxnOp};
use crate::proto::{Acl, Id};
use crate::session::SESSION_SECRET_BYTES;
use bytes::{BufMut, Bytes, BytesMut};

/// Fixed part of every record: zxid, session, cxid, time.
pub const TXN_HEADER_BYTES: usize = 8 + 8 + 4 + 8;
/// Smallest encoding of an ACL entry in a record: perms and two string lengths.
pub const ACL_ENTRY_BYTES_MIN: usize = 12;
/// Smallest encoding of an op (a multi's sub-op): its tag alone (closeSession).
pub const OP_BYTES_MIN: usize = 1;
/// What a record may add to the request frame it was made from, beyond `TXN_RECORD_RATIO`
/// times the frame: the header, tag, ephemeral owner and response type (see below).
pub const TXN_RECORD_SLACK_BYTES: usize = 4096;
/// The largest txn record prep lets through is `TXN_RECORD_RATIO` × jute.maxbuffer plus
/// `TXN_RECORD_SLACK_BYTES` (as ZooKeeper reads a log record of up to jute.maxbuffer plus its
/// extrasize, by default the same again). A request's record is never larger than 1.25 × its
/// frame plus 64 bytes (the worst case is a multi of sequential creates: each sub-op of at
/// least 42 bytes gains 10, its name suffix, tag, owner and response type less its sub-op
/// header and flags), unless an `auth` ACL entry expands into one entry per id of the session:
/// that is what the limit catches (prep answers InvalidACL).
pub const TXN_RECORD_RATIO: usize = 2;

/// The largest txn record prep lets through on a server with `jute_max_buffer_bytes`.
pub const fn txn_record_bytes_max(jute_max_buffer_bytes: usize) -> usize {
    TXN_RECORD_RATIO * jute_max_buffer_bytes + TXN_RECORD_SLACK_BYTES
}

/// The largest txn record any configuration lets through: what the log's batches and the peer
/// protocol's frames must be able to carry.
pub const TXN_RECORD_BYTES_LIMIT: usize = txn_record_bytes_max(crate::config::JUTE_MAX_BUFFER_BYTES_MAX);

const TAG_CREATE_SESSION: u8 = 1;
const TAG_CLOSE_SESSION: u8 = 2;
const TAG_CREATE: u8 = 3;
const TAG_DELETE: u8 = 4;
const TAG_SET_DATA: u8 = 5;
const TAG_SET_ACL: u8 = 6;
const TAG_CHECK: u8 = 7;
const TAG_ERROR: u8 = 8;
const TAG_MULTI: u8 = 9;
const TAG_SESSION_SECRET: u8 = 10;
const TAG_RESTORE: u8 = 11;
const TAG_RECONFIG: u8 = 12;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnDecodeError {
    Truncated,
    BadLength,
    BadTag(u8),
    BadUtf8,
    NestedMulti,
    /// A session-secret txn inside a multi (only a top-level txn may carry one).
    SecretInMulti,
    TrailingBytes,
}

impl std::fmt::Display for TxnDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed txn record: {self:?}")
    }
}

impl std::error::Error for TxnDecodeError {}

pub fn encode(txn: &Txn, out: &mut BytesMut) {
    let h = &txn.header;
    out.put_i64(h.zxid);
    out.put_i64(h.session_id);
    out.put_i32(h.cxid);
    out.put_i64(h.time_ms);
    encode_op(&txn.op, out);
}

fn put_str(s: &str, out: &mut BytesMut) {
    out.put_i32(s.len() as i32);
    out.put_slice(s.as_bytes());
}

fn put_opt_bytes(b: &Option<Bytes>, out: &mut BytesMut) {
    match b {
        Some(b) => {
            out.put_i32(b.len() as i32);
            out.put_slice(b);
        }
        None => out.put_i32(-1),
    }
}

fn put_acl(acl: &[Acl], out: &mut BytesMut) {
    out.put_i32(acl.len() as i32);
    for a in acl {
        out.put_i32(a.perms);
        put_str(&a.id.scheme, out);
        put_str(&a.id.id, out);
    }
}

fn encode_op(op: &TxnOp, out: &mut BytesMut) {
    match op {
        TxnOp::CreateSession { timeout_ms } => {
            out.put_u8(TAG_CREATE_SESSION);
            out.put_i32(*timeout_ms);
        }
        TxnOp::CloseSession => out.put_u8(TAG_CLOSE_SESSION),
        TxnOp::Restore => out.put_u8(TAG_RESTORE),
        TxnOp::SessionSecret { secret } => {
            out.put_u8(TAG_SESSION_SECRET);
            out.put_slice(secret);
        }
        TxnOp::Create { path, data, acl, ephemeral_owner, response_type } => {
            out.put_u8(TAG_CREATE);
            put_str(path, out);
            put_opt_bytes(data, out);
            put_acl(acl, out);
            out.put_i64(*ephemeral_owner);
            out.put_i32(*response_type);
        }
        TxnOp::Delete { path } => {
            out.put_u8(TAG_DELETE);
            put_str(path, out);
        }
        TxnOp::SetData { path, data } => {
            out.put_u8(TAG_SET_DATA);
            put_str(path, out);
            put_opt_bytes(data, out);
        }
        TxnOp::SetAcl { path, acl } => {
            out.put_u8(TAG_SET_ACL);
            put_str(path, out);
            put_acl(acl, out);
        }
        TxnOp::Reconfig { data } => {
            out.put_u8(TAG_RECONFIG);
            out.put_i32(data.len() as i32);
            out.put_slice(data);
        }
        TxnOp::Check { path } => {
            out.put_u8(TAG_CHECK);
            put_str(path, out);
        }
        TxnOp::Error { err } => {
            out.put_u8(TAG_ERROR);
            out.put_i32(*err);
        }
        TxnOp::Multi(ops) => {
            out.put_u8(TAG_MULTI);
            out.put_i32(ops.len() as i32);
            for o in ops {
                encode_op(o, out);
            }
        }
    }
}

/// The bytes `encode` writes for an ACL entry.
pub fn acl_entry_encoded_len(a: &Acl) -> usize {
    ACL_ENTRY_BYTES_MIN + a.id.scheme.len() + a.id.id.len()
}

fn acl_encoded_len(acl: &[Acl]) -> usize {
    4 + acl.iter().map(acl_entry_encoded_len).sum::<usize>()
}

fn opt_bytes_encoded_len(b: &Option<Bytes>) -> usize {
    4 + b.as_ref().map_or(0, |b| b.len())
}

/// The bytes `encode` writes for `op` (the record is `TXN_HEADER_BYTES` more).
pub fn op_encoded_len(op: &TxnOp) -> usize {
    1 + match op {
        TxnOp::CreateSession { .. } | TxnOp::Error { .. } => 4,
        TxnOp::CloseSession | TxnOp::Restore => 0,
        TxnOp::SessionSecret { .. } => SESSION_SECRET_BYTES,
        TxnOp::Create { path, data, acl, .. } => {
            4 + path.len() + opt_bytes_encoded_len(data) + acl_encoded_len(acl) + 12
        }
        TxnOp::Delete { path } | TxnOp::Check { path } => 4 + path.len(),
        TxnOp::SetData { path, data } => 4 + path.len() + opt_bytes_encoded_len(data),
        TxnOp::SetAcl { path, acl } => 4 + path.len() + acl_encoded_len(acl),
        TxnOp::Reconfig { data } => 4 + data.len(),
        TxnOp::Multi(ops) => 4 + ops.iter().map(op_encoded_len).sum::<usize>(),
    }
}

/// A checked big-endian reader over a shared buffer; data fields are zero-copy slices.
struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    fn take(&mut self, n: usize) -> Result<&[u8], TxnDecodeError> {
        let end = self.pos.checked_add(n).ok_or(TxnDecodeError::BadLength)?;
        if end > self.buf.len() {
            return Err(TxnDecodeError::Truncated);
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, TxnDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn i32(&mut self) -> Result<i32, TxnDecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i64(&mut self) -> Result<i64, TxnDecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }
    fn len(&mut self) -> Result<usize, TxnDecodeError> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| TxnDecodeError::BadLength)?;
        if n > self.buf.len() - self.pos {
            return Err(TxnDecodeError::Truncated);
        }
        Ok(n)
    }
    fn string(&mut self) -> Result<String, TxnDecodeError> {
        let n = self.len()?;
        let s = self.take(n)?;
        std::str::from_utf8(s).map(str::to_string).map_err(|_| TxnDecodeError::BadUtf8)
    }
    fn opt_bytes(&mut self) -> Result<Option<Bytes>, TxnDecodeError> {
        let n = self.i32()?;
        if n == -1 {
            return Ok(None);
        }
        let n = usize::try_from(n).map_err(|_| TxnDecodeError::BadLength)?;
        let end = self.pos.checked_add(n).ok_or(TxnDecodeError::BadLength)?;
        if end > self.buf.len() {
            return Err(TxnDecodeError::Truncated);
        }
        let b = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(Some(b))
    }
    /// A count of entries of at least `entry_bytes_min` bytes each, checked against the bytes
    /// left (so that what is allocated for them is bounded by the record).
    fn count(&mut self, entry_bytes_min: usize) -> Result<usize, TxnDecodeError> {
        let n = usize::try_from(self.i32()?).map_err(|_| TxnDecodeError::BadLength)?;
        if n > (self.buf.len() - self.pos) / entry_bytes_min {
            return Err(TxnDecodeError::BadLength);
        }
        Ok(n)
    }
    fn acl(&mut self) -> Result<Vec<Acl>, TxnDecodeError> {
        let n = self.count(ACL_ENTRY_BYTES_MIN)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let perms = self.i32()?;
            let scheme = self.string()?;
            let id = self.string()?;
            v.push(Acl { perms, id: Id { scheme, id } });
        }
        Ok(v)
    }
}

pub fn decode(buf: Bytes) -> Result<Txn, TxnDecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let header = TxnHeader { zxid: r.i64()?, session_id: r.i64()?, cxid: r.i32()?, time_ms: r.i64()? };
    let op = decode_op(&mut r, true)?;
    if r.pos != r.buf.len() {
        return Err(TxnDecodeError::TrailingBytes);
    }
    Ok(Txn { header, op })
}

/// The zxid of an encoded record (its first 8 bytes).
pub fn record_zxid(record: &[u8]) -> Option<i64> {
    let b: [u8; 8] = record.get(..8)?.try_into().ok()?;
    Some(i64::from_be_bytes(b))
}

/// The new configuration's text a reconfiguration record carries, None for any other record
/// (read without decoding the record: ZAB asks this of every txn it logs).
pub fn reconfig_text(record: &[u8]) -> Option<&[u8]> {
    if record.get(TXN_HEADER_BYTES) != Some(&TAG_RECONFIG) {
        return None;
    }
    let at = TXN_HEADER_BYTES + 1;
    let n: [u8; 4] = record.get(at..at + 4)?.try_into().ok()?;
    let n = usize::try_from(i32::from_be_bytes(n)).ok()?;
    record.get(at + 4..at + 4 + n)
}

fn decode_op(r: &mut Reader, top: bool) -> Result<TxnOp, TxnDecodeError> {
    Ok(match r.u8()? {
        TAG_CREATE_SESSION => TxnOp::CreateSession { timeout_ms: r.i32()? },
        TAG_CLOSE_SESSION => TxnOp::CloseSession,
        TAG_CREATE => TxnOp::Create {
            path: r.string()?,
            data: r.opt_bytes()?,
            acl: r.acl()?,
            ephemeral_owner: r.i64()?,
            response_type: r.i32()?,
        },
        TAG_DELETE => TxnOp::Delete { path: r.string()? },
        TAG_SET_DATA => TxnOp::SetData { path: r.string()?, data: r.opt_bytes()? },
        TAG_SET_ACL => TxnOp::SetAcl { path: r.string()?, acl: r.acl()? },
        TAG_CHECK => TxnOp::Check { path: r.string()? },
        TAG_ERROR => TxnOp::Error { err: r.i32()? },
        TAG_RESTORE if top => TxnOp::Restore,
        TAG_RECONFIG if top => {
            let n = r.len()?;
            let at = r.pos;
            r.take(n)?;
            TxnOp::Reconfig { data: r.buf.slice(at..at + n) }
        }
        TAG_SESSION_SECRET => {
            if !top {
                return Err(TxnDecodeError::SecretInMulti);
            }
            let mut secret = [0u8; SESSION_SECRET_BYTES];
            secret.copy_from_slice(r.take(SESSION_SECRET_BYTES)?);
            TxnOp::SessionSecret { secret }
        }
        TAG_MULTI => {
            if !top {
                return Err(TxnDecodeError::NestedMulti);
            }
            let n = r.count(OP_BYTES_MIN)?;
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                ops.push(decode_op(r, false)?);
            }
            TxnOp::Multi(ops)
        }
        t => return Err(TxnDecodeError::BadTag(t)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_record() -> Bytes {
        let mut out = BytesMut::new();
        encode(&sample(), &mut out);
        out.freeze()
    }

    fn sample() -> Txn {
        Txn {
            header: TxnHeader { zxid: 0x1_0000_0005, session_id: 77, cxid: 3, time_ms: 1_700_000_000_000 },
            op: TxnOp::Multi(vec![
                TxnOp::Create {
                    path: "/a".into(),
                    data: Some(Bytes::from_static(b"xyz")),
                    acl: crate::tree::acl::open_acl_unsafe(),
                    ephemeral_owner: 77,
                    response_type: 15,
                },
                TxnOp::SetData { path: "/a".into(), data: None },
                TxnOp::Error { err: -101 },
                TxnOp::Delete { path: "/b".into() },
                TxnOp::Check { path: "/c".into() },
                TxnOp::SetAcl { path: "/a".into(), acl: vec![] },
            ]),
        }
    }

    #[test]
    fn a_reconfiguration_round_trips_and_its_text_is_read_in_place() {
        let data = Bytes::from_static(b"server.1=h:1:2:participant;h:3\nversion=100000002");
        let txn = Txn {
            header: TxnHeader { zxid: 0x1_0000_0002, session_id: 9, cxid: 4, time_ms: 5 },
            op: TxnOp::Reconfig { data: data.clone() },
        };
        let mut out = BytesMut::new();
        encode(&txn, &mut out);
        assert_eq!(out.len(), TXN_HEADER_BYTES + op_encoded_len(&txn.op));
        let record = out.freeze();
        assert_eq!(reconfig_text(&record), Some(&data[..]));
        assert_eq!(decode(record.clone()).unwrap(), txn);
        // Cut anywhere: no text, no panic; other records carry none.
        for n in 0..record.len() {
            assert_eq!(reconfig_text(&record[..n]), None, "cut at {n}");
        }
        assert_eq!(reconfig_text(&sample_record()), None);
    }

    #[test]
    fn round_trip_and_zxid_prefix() {
        let t = sample();
        let mut b = BytesMut::new();
        encode(&t, &mut b);
        assert_eq!(record_zxid(&b), Some(0x1_0000_0005));
        assert_eq!(decode(b.freeze()).unwrap(), t);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut b = BytesMut::new();
        encode(&sample(), &mut b);
        let full = b.freeze();
        for n in 0..full.len() {
            assert!(decode(full.slice(..n)).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn a_session_key_txn_round_trips_and_is_refused_inside_a_multi() {
        let mut secret = [0u8; SESSION_SECRET_BYTES];
        secret[0] = 1;
        secret[31] = 0xff;
        let t = Txn {
            header: TxnHeader { zxid: 0x2_0000_0001, session_id: 0, cxid: 0, time_ms: 5 },
            op: TxnOp::SessionSecret { secret },
        };
        let mut b = BytesMut::new();
        encode(&t, &mut b);
        assert_eq!(b.len(), TXN_HEADER_BYTES + op_encoded_len(&t.op));
        let full = b.freeze();
        assert_eq!(decode(full.clone()).unwrap(), t);
        for n in 0..full.len() {
            assert!(decode(full.slice(..n)).is_err(), "prefix {n}");
        }
        // The same op as the one sub-op of a multi.
        let mut m = BytesMut::new();
        m.extend_from_slice(&full[..TXN_HEADER_BYTES]);
        m.put_u8(TAG_MULTI);
        m.put_i32(1);
        m.extend_from_slice(&full[TXN_HEADER_BYTES..]);
        assert_eq!(decode(m.freeze()), Err(TxnDecodeError::SecretInMulti));
    }

    #[test]
    fn a_restore_marker_round_trips_and_is_not_an_op_of_a_multi() {
        let t = Txn { header: TxnHeader { zxid: 9, session_id: 0, cxid: 0, time_ms: 5 }, op: TxnOp::Restore };
        let mut b = BytesMut::new();
        encode(&t, &mut b);
        assert_eq!(b.len(), TXN_HEADER_BYTES + op_encoded_len(&t.op));
        let full = b.freeze();
        assert_eq!(decode(full.clone()).unwrap(), t);
        let mut m = BytesMut::new();
        m.extend_from_slice(&full[..TXN_HEADER_BYTES]);
        m.put_u8(TAG_MULTI);
        m.put_i32(1);
        m.extend_from_slice(&full[TXN_HEADER_BYTES..]);
        assert!(decode(m.freeze()).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(Bytes::from(bytes));
        }
    }
}
