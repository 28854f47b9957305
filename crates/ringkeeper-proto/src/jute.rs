//! Jute, the binary encoding of ZooKeeper records: a bounded, zero-copy reader over one frame
//! and writer functions that append to a `BytesMut`.
//! Rules: big-endian everywhere; a reader never panics and never allocates more than the bytes
//! left in its frame justify (every length and count is checked against `remaining()` before
//! anything is reserved); buffers come back as slices of the frame, not copies; writers emit
//! exactly the bytes Java's `BinaryOutputArchive` emits (booleans as 0/1, null as length -1).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::frame::{JUTE_MAX_BUFFER_DEFAULT_BYTES, PACKET_EXTRA_BYTES};
use super::records::{Acl, Id, Stat};

/// Longest string or buffer Java's reader accepts ("Unreasonable length" above it):
/// jute.maxbuffer plus zookeeper.jute.maxbuffer.extrasize, both at their defaults. A length
/// past the end of the frame is `TooLong` above this and `Truncated` below it.
pub const FIELD_LEN_MAX_BYTES: usize = JUTE_MAX_BUFFER_DEFAULT_BYTES + PACKET_EXTRA_BYTES;
/// Smallest encoding of a ustring (its length word alone: empty or null).
pub const STRING_MIN_BYTES: usize = 4;
/// Smallest encoding of an ACL entry: perms, then two empty/null strings.
pub const ACL_MIN_BYTES: usize = 12;
/// Encoded size of a Stat.
pub const STAT_BYTES: usize = 68;

/// Why a record could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JuteError {
    /// The frame ended inside a field.
    Truncated,
    /// A length or count below -1.
    NegativeLength(i32),
    /// A string or buffer length beyond both the frame and `FIELD_LEN_MAX_BYTES`.
    TooLong(usize),
    /// A ustring encoded as null (-1) where a value is required.
    NullString,
    /// A vector count that the bytes left cannot possibly hold.
    TooManyEntries(i32),
    /// A record tagged with a type this position does not allow (a multi result's op type).
    UnexpectedType(i32),
}

impl std::fmt::Display for JuteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JuteError::Truncated => write!(f, "record truncated"),
            JuteError::NegativeLength(n) => write!(f, "negative length {n}"),
            JuteError::TooLong(n) => write!(f, "unreasonable length {n}"),
            JuteError::NullString => write!(f, "null string where one is required"),
            JuteError::TooManyEntries(n) => write!(f, "vector count {n} exceeds the bytes left"),
            JuteError::UnexpectedType(t) => write!(f, "unexpected record type {t}"),
        }
    }
}

impl std::error::Error for JuteError {}

/// Reads jute fields from one frame, front to back.
#[derive(Debug, Clone)]
pub struct JuteReader {
    buf: Bytes,
}

impl JuteReader {
    /// A reader over `buf` (one frame's payload, or part of one).
    pub fn new(buf: Bytes) -> JuteReader {
        JuteReader { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The unread bytes, consuming the reader.
    pub fn into_rest(self) -> Bytes {
        self.buf
    }

    fn need(&self, n: usize) -> Result<(), JuteError> {
        if self.buf.len() < n {
            Err(JuteError::Truncated)
        } else {
            Ok(())
        }
    }

    /// An `int`: 4 bytes, big-endian.
    pub fn read_int(&mut self) -> Result<i32, JuteError> {
        self.need(4)?;
        Ok(self.buf.get_i32())
    }

    /// A `long`: 8 bytes, big-endian.
    pub fn read_long(&mut self) -> Result<i64, JuteError> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    /// A `byte`.
    pub fn read_byte(&mut self) -> Result<u8, JuteError> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    /// Any non-zero byte is true, as in Java's reader.
    pub fn read_bool(&mut self) -> Result<bool, JuteError> {
        self.need(1)?;
        Ok(self.buf.get_u8() != 0)
    }

    /// A `buffer`: `None` for length -1; otherwise a zero-copy slice of the frame.
    pub fn read_buffer(&mut self) -> Result<Option<Bytes>, JuteError> {
        let len = self.read_int()?;
        if len == -1 {
            return Ok(None);
        }
        if len < -1 {
            return Err(JuteError::NegativeLength(len));
        }
        let len = len as usize;
        if len > self.remaining() {
            // Java calls a length over jute.maxbuffer + extrasize "unreasonable"; anything that
            // fits in the frame is accepted (the frame already passed the configured limit,
            // which may be raised above the default).
            return Err(if len > FIELD_LEN_MAX_BYTES { JuteError::TooLong(len) } else { JuteError::Truncated });
        }
        Ok(Some(self.buf.split_to(len)))
    }

    /// A `ustring` that may be null (-1). Decoded as Java's reader does: a byte sequence that
    /// is not UTF-8 becomes U+FFFD, which path validation then refuses (BadArguments).
    pub fn read_opt_string(&mut self) -> Result<Option<String>, JuteError> {
        Ok(self.read_buffer()?.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// A `ustring` that must be present: null is `NullString`.
    pub fn read_string(&mut self) -> Result<String, JuteError> {
        self.read_opt_string()?.ok_or(JuteError::NullString)
    }

    /// Reads a vector count and checks it against the bytes left; -1 (null) comes back as 0.
    fn read_count(&mut self, entry_min_bytes: usize) -> Result<usize, JuteError> {
        let count = self.read_int()?;
        if count == -1 {
            return Ok(0);
        }
        if count < -1 {
            return Err(JuteError::NegativeLength(count));
        }
        if count as usize > self.remaining() / entry_min_bytes {
            return Err(JuteError::TooManyEntries(count));
        }
        Ok(count as usize)
    }

    /// A `vector<ustring>`: null reads as empty. A null element reads as "" (kazoo sends empty
    /// strings as -1).
    pub fn read_string_vec(&mut self) -> Result<Vec<String>, JuteError> {
        let count = self.read_count(STRING_MIN_BYTES)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(self.read_opt_string()?.unwrap_or_default());
        }
        Ok(out)
    }

    /// A `vector<ACL>`: `None` for null. Null scheme or id strings read as "" (kazoo sends
    /// `auth:""` with the id as -1).
    pub fn read_acl_vec(&mut self) -> Result<Option<Vec<Acl>>, JuteError> {
        // Peek so that a null vector is told apart from an empty one.
        self.need(4)?;
        if self.buf[..4] == (-1i32).to_be_bytes() {
            self.buf.advance(4);
            return Ok(None);
        }
        let count = self.read_count(ACL_MIN_BYTES)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(self.read_acl()?);
        }
        Ok(Some(out))
    }

    /// An ACL record: `{int perms, Id{ustring scheme, ustring id}}`; a null string reads as empty.
    pub fn read_acl(&mut self) -> Result<Acl, JuteError> {
        let perms = self.read_int()?;
        let scheme = self.read_opt_string()?.unwrap_or_default();
        let id = self.read_opt_string()?.unwrap_or_default();
        Ok(Acl { perms, id: Id { scheme, id } })
    }

    /// A Stat record: 68 bytes, fields in `Stat`'s order.
    pub fn read_stat(&mut self) -> Result<Stat, JuteError> {
        self.need(STAT_BYTES)?;
        Ok(Stat {
            czxid: self.buf.get_i64(),
            mzxid: self.buf.get_i64(),
            ctime: self.buf.get_i64(),
            mtime: self.buf.get_i64(),
            version: self.buf.get_i32(),
            cversion: self.buf.get_i32(),
            aversion: self.buf.get_i32(),
            ephemeral_owner: self.buf.get_i64(),
            data_length: self.buf.get_i32(),
            num_children: self.buf.get_i32(),
            pzxid: self.buf.get_i64(),
        })
    }
}

/// A length as the i32 jute puts on the wire. Everything the server encodes is bounded far
/// below 2 GiB (frames are capped by jute.maxbuffer); a larger value is clamped, never wrapped.
pub(crate) fn wire_len(n: usize) -> i32 {
    debug_assert!(n <= i32::MAX as usize, "jute length {n} does not fit an int");
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// An `int`: 4 bytes, big-endian.
pub fn write_int(out: &mut BytesMut, v: i32) {
    out.put_i32(v);
}

/// A `long`: 8 bytes, big-endian.
pub fn write_long(out: &mut BytesMut, v: i64) {
    out.put_i64(v);
}

/// A `boolean`: one byte, 1 or 0.
pub fn write_bool(out: &mut BytesMut, v: bool) {
    out.put_u8(u8::from(v));
}

/// A `buffer`; `None` is written as length -1.
pub fn write_buffer(out: &mut BytesMut, v: Option<&[u8]>) {
    match v {
        None => out.put_i32(-1),
        Some(b) => {
            out.put_i32(wire_len(b.len()));
            out.extend_from_slice(b);
        }
    }
}

/// A `ustring`, as standard UTF-8 (Java's reader decodes it).
pub fn write_string(out: &mut BytesMut, s: &str) {
    write_buffer(out, Some(s.as_bytes()));
}

/// A `vector<ustring>`: an int count, then the strings.
pub fn write_string_vec<S: AsRef<str>>(out: &mut BytesMut, v: &[S]) {
    out.put_i32(wire_len(v.len()));
    for s in v {
        write_string(out, s.as_ref());
    }
}

/// An ACL record: `{int perms, Id{ustring scheme, ustring id}}`.
pub fn write_acl(out: &mut BytesMut, a: &Acl) {
    out.put_i32(a.perms);
    write_string(out, &a.id.scheme);
    write_string(out, &a.id.id);
}

/// A `vector<ACL>`: an int count, then the ACLs.
pub fn write_acl_vec(out: &mut BytesMut, v: &[Acl]) {
    out.put_i32(wire_len(v.len()));
    for a in v {
        write_acl(out, a);
    }
}

/// A Stat record: 68 bytes, fields in `Stat`'s order.
pub fn write_stat(out: &mut BytesMut, s: &Stat) {
    out.put_i64(s.czxid);
    out.put_i64(s.mzxid);
    out.put_i64(s.ctime);
    out.put_i64(s.mtime);
    out.put_i32(s.version);
    out.put_i32(s.cversion);
    out.put_i32(s.aversion);
    out.put_i64(s.ephemeral_owner);
    out.put_i32(s.data_length);
    out.put_i32(s.num_children);
    out.put_i64(s.pzxid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reader(b: &[u8]) -> JuteReader {
        JuteReader::new(Bytes::copy_from_slice(b))
    }

    #[test]
    fn scalars_round_trip() {
        let mut out = BytesMut::new();
        write_int(&mut out, -7);
        write_long(&mut out, 0x0102_0304_0506_0708);
        write_bool(&mut out, true);
        write_bool(&mut out, false);
        assert_eq!(&out[..], &[0xff, 0xff, 0xff, 0xf9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0]);
        let mut r = JuteReader::new(out.freeze());
        assert_eq!(r.read_int(), Ok(-7));
        assert_eq!(r.read_long(), Ok(0x0102_0304_0506_0708));
        assert_eq!(r.read_bool(), Ok(true));
        assert_eq!(r.read_bool(), Ok(false));
        assert_eq!(r.read_int(), Err(JuteError::Truncated));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn any_nonzero_byte_is_true() {
        assert_eq!(reader(&[0x7f]).read_bool(), Ok(true));
    }

    #[test]
    fn buffers_null_empty_and_zero_copy() {
        let mut out = BytesMut::new();
        write_buffer(&mut out, None);
        write_buffer(&mut out, Some(b""));
        write_buffer(&mut out, Some(b"abc"));
        assert_eq!(&out[..], &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c']);
        let frame = out.freeze();
        let mut r = JuteReader::new(frame.clone());
        assert_eq!(r.read_buffer(), Ok(None));
        assert_eq!(r.read_buffer(), Ok(Some(Bytes::new())));
        let b = r.read_buffer().unwrap().unwrap();
        assert_eq!(&b[..], b"abc");
        // Same memory as the frame: a slice, not a copy.
        assert_eq!(b.as_ptr(), frame[12..].as_ptr());
    }

    #[test]
    fn bad_lengths_are_rejected_before_allocating() {
        assert_eq!(reader(&[0xff, 0xff, 0xff, 0xfe]).read_buffer(), Err(JuteError::NegativeLength(-2)));
        assert_eq!(reader(&[0, 0, 0, 5, 1, 2]).read_buffer(), Err(JuteError::Truncated));
        assert_eq!(reader(&[0x7f, 0xff, 0xff, 0xff]).read_buffer(), Err(JuteError::TooLong(i32::MAX as usize)));
        assert_eq!(reader(&[0x7f, 0xff, 0xff, 0xff]).read_string_vec(), Err(JuteError::TooManyEntries(i32::MAX)));
        assert_eq!(reader(&[0, 0, 0, 2, 0, 0, 0, 0]).read_string_vec(), Err(JuteError::TooManyEntries(2)));
        assert_eq!(reader(&[0, 0, 0, 1, 0, 0, 0, 0]).read_acl_vec(), Err(JuteError::TooManyEntries(1)));
        assert_eq!(reader(&[0x80, 0, 0, 0]).read_acl_vec(), Err(JuteError::NegativeLength(i32::MIN)));
    }

    #[test]
    fn a_field_that_fits_its_frame_is_never_too_long() {
        // A server may raise jute.maxbuffer; the frame limit governs then, not the default.
        let n = FIELD_LEN_MAX_BYTES + 1;
        let mut b = Vec::with_capacity(n + 4);
        b.extend_from_slice(&(n as i32).to_be_bytes());
        b.resize(n + 4, 7);
        assert_eq!(JuteReader::new(Bytes::from(b)).read_buffer().map(|b| b.map(|b| b.len())), Ok(Some(n)));
        let mut r = reader(&((FIELD_LEN_MAX_BYTES + 1) as i32).to_be_bytes());
        assert_eq!(r.read_buffer(), Err(JuteError::TooLong(FIELD_LEN_MAX_BYTES + 1)));
    }

    #[test]
    fn strings() {
        assert_eq!(reader(&[0xff, 0xff, 0xff, 0xff]).read_string(), Err(JuteError::NullString));
        assert_eq!(reader(&[0, 0, 0, 2, 0xc3, 0x28]).read_string().as_deref(), Ok("\u{fffd}("));
        let mut out = BytesMut::new();
        write_string(&mut out, "/zk/é");
        assert_eq!(JuteReader::new(out.freeze()).read_string().as_deref(), Ok("/zk/é"));
    }

    #[test]
    fn string_vectors() {
        assert_eq!(reader(&[0xff, 0xff, 0xff, 0xff]).read_string_vec(), Ok(vec![]));
        // A null element (kazoo's empty string) reads as "".
        assert_eq!(reader(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]).read_string_vec(), Ok(vec![String::new()]));
        let mut out = BytesMut::new();
        write_string_vec(&mut out, &["a", "bc"]);
        assert_eq!(&out[..], &[0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 2, b'b', b'c']);
        assert_eq!(JuteReader::new(out.freeze()).read_string_vec(), Ok(vec!["a".to_string(), "bc".to_string()]));
    }

    #[test]
    fn acl_vectors() {
        assert_eq!(reader(&[0xff, 0xff, 0xff, 0xff]).read_acl_vec(), Ok(None));
        assert_eq!(reader(&[0, 0, 0, 0]).read_acl_vec(), Ok(Some(vec![])));
        let acl = vec![Acl { perms: 31, id: Id { scheme: "world".into(), id: "anyone".into() } }];
        let mut out = BytesMut::new();
        write_acl_vec(&mut out, &acl);
        let mut golden = vec![0, 0, 0, 1, 0, 0, 0, 31, 0, 0, 0, 5];
        golden.extend_from_slice(b"world");
        golden.extend_from_slice(&[0, 0, 0, 6]);
        golden.extend_from_slice(b"anyone");
        assert_eq!(&out[..], &golden[..]);
        assert_eq!(JuteReader::new(out.freeze()).read_acl_vec(), Ok(Some(acl)));
        // kazoo's CREATOR_ALL_ACL: auth with the id sent as null.
        let mut kazoo = vec![0, 0, 0, 1, 0, 0, 0, 31, 0, 0, 0, 4];
        kazoo.extend_from_slice(b"auth");
        kazoo.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        let got = reader(&kazoo).read_acl_vec().unwrap().unwrap();
        assert_eq!(got[0].id, Id { scheme: "auth".into(), id: String::new() });
    }

    #[test]
    fn stat_is_68_bytes_in_wire_order() {
        let s = Stat {
            czxid: 1,
            mzxid: 2,
            ctime: 3,
            mtime: 4,
            version: 5,
            cversion: 6,
            aversion: 7,
            ephemeral_owner: 8,
            data_length: 9,
            num_children: 10,
            pzxid: 11,
        };
        let mut out = BytesMut::new();
        write_stat(&mut out, &s);
        assert_eq!(out.len(), STAT_BYTES);
        assert_eq!(&out[32..36], &[0, 0, 0, 5]);
        assert_eq!(&out[60..68], &[0, 0, 0, 0, 0, 0, 0, 11]);
        let mut r = JuteReader::new(out.freeze());
        assert_eq!(r.read_stat(), Ok(s));
        assert_eq!(reader(&[0; 67]).read_stat(), Err(JuteError::Truncated));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), ops in proptest::collection::vec(0u8..8, 0..12)) {
            let mut r = JuteReader::new(Bytes::from(bytes));
            for op in ops {
                let before = r.remaining();
                let ok = match op {
                    0 => r.read_int().is_ok(),
                    1 => r.read_long().is_ok(),
                    2 => r.read_bool().is_ok(),
                    3 => r.read_buffer().is_ok(),
                    4 => r.read_string().is_ok(),
                    5 => r.read_string_vec().is_ok(),
                    6 => r.read_acl_vec().is_ok(),
                    _ => r.read_stat().is_ok(),
                };
                prop_assert!(r.remaining() <= before);
                if !ok { break; }
            }
        }

        #[test]
        fn strings_round_trip(v in proptest::collection::vec(".{0,12}", 0..6)) {
            let mut out = BytesMut::new();
            write_string_vec(&mut out, &v);
            let mut r = JuteReader::new(out.freeze());
            prop_assert_eq!(r.read_string_vec().unwrap(), v);
            prop_assert_eq!(r.remaining(), 0);
        }
    }
}
