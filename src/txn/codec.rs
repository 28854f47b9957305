//! Binary record format of a txn (ours, documented in docs/storage-format.md):
//! `zxid i64, session i64, cxid i32, time i64, op` with big-endian integers; an op is a tag
//! byte and its fields; strings and buffers are an i32 length then bytes (-1 = null).
//! Rules: encode is total; decode checks every length against the bytes left and never panics.

use super::{Txn, TxnHeader, TxnOp};
use crate::proto::{Acl, Id};
use bytes::{BufMut, Bytes, BytesMut};

/// Most sub-ops a multi record may carry (a bound for decoding untrusted bytes).
pub const MULTI_OPS_MAX: usize = 1 << 16;
/// Most entries an ACL in a record may carry.
pub const ACL_ENTRIES_MAX: usize = 1 << 12;

const TAG_CREATE_SESSION: u8 = 1;
const TAG_CLOSE_SESSION: u8 = 2;
const TAG_CREATE: u8 = 3;
const TAG_DELETE: u8 = 4;
const TAG_SET_DATA: u8 = 5;
const TAG_SET_ACL: u8 = 6;
const TAG_CHECK: u8 = 7;
const TAG_ERROR: u8 = 8;
const TAG_MULTI: u8 = 9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnDecodeError {
    Truncated,
    BadLength,
    BadTag(u8),
    BadUtf8,
    NestedMulti,
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
    fn acl(&mut self) -> Result<Vec<Acl>, TxnDecodeError> {
        let n = usize::try_from(self.i32()?).map_err(|_| TxnDecodeError::BadLength)?;
        if n > ACL_ENTRIES_MAX {
            return Err(TxnDecodeError::BadLength);
        }
        let mut v = Vec::with_capacity(n.min(16));
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
        TAG_MULTI => {
            if !top {
                return Err(TxnDecodeError::NestedMulti);
            }
            let n = usize::try_from(r.i32()?).map_err(|_| TxnDecodeError::BadLength)?;
            if n > MULTI_OPS_MAX {
                return Err(TxnDecodeError::BadLength);
            }
            let mut ops = Vec::with_capacity(n.min(64));
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

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(Bytes::from(bytes));
        }
    }
}
