//! The handshake records: ConnectRequest (the first frame of a connection, with no
//! RequestHeader) and ConnectResponse (the first frame back, with no ReplyHeader).
//! Rules: accept both the 44-byte form (3.3-era clients, no readOnly) and the 45-byte form;
//! answer in the same form the client used (ZooKeeper 3.8 / 3.9.3+ behaviour); the password
//! sent back is always 16 bytes, because the C client reads a fixed 41-byte frame.

use bytes::{Bytes, BytesMut};

use super::frame::{begin_frame, end_frame};
use super::jute::{self, JuteError, JuteReader};

/// Length of a session password on the wire.
pub const SESSION_PASSWD_LEN: usize = 16;
/// Body size of a ConnectRequest with a 16-byte password and no readOnly byte.
pub const CONNECT_REQUEST_OLD_BYTES: usize = 44;
/// Body size of a ConnectRequest with a 16-byte password and the readOnly byte.
pub const CONNECT_REQUEST_BYTES: usize = 45;

/// ConnectRequest, the first frame a client sends: `{int protocolVersion, long lastZxidSeen,
/// int timeOut, long sessionId, buffer passwd, boolean readOnly}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Always 0 from real clients; ignored.
    pub protocol_version: i32,
    /// The last zxid the client has seen; a server that is behind it refuses the connection.
    pub last_zxid_seen: i64,
    /// The session timeout the client asks for, in milliseconds (the server negotiates it).
    pub timeout_ms: i32,
    /// 0 asks for a new session.
    pub session_id: i64,
    /// The password of the session to resume (16 zero bytes for a new session). A null
    /// buffer reads as empty; any length is accepted here and checked by the session layer.
    pub passwd: Bytes,
    /// `None` when the client sent the old 44-byte form; the response then omits readOnly.
    pub read_only: Option<bool>,
}

/// Decodes a ConnectRequest frame (without its length prefix). Bytes after the readOnly
/// flag are ignored, as Java does.
pub fn decode_connect_request(frame: Bytes) -> Result<ConnectRequest, JuteError> {
    let mut r = JuteReader::new(frame);
    let protocol_version = r.read_int()?;
    let last_zxid_seen = r.read_long()?;
    let timeout_ms = r.read_int()?;
    let session_id = r.read_long()?;
    let passwd = r.read_buffer()?.unwrap_or_default();
    let read_only = if r.remaining() > 0 { Some(r.read_bool()?) } else { None };
    Ok(ConnectRequest { protocol_version, last_zxid_seen, timeout_ms, session_id, passwd, read_only })
}

/// Encodes a ConnectRequest frame, length prefix included (client side and tests).
pub fn encode_connect_request(out: &mut BytesMut, r: &ConnectRequest) {
    let at = begin_frame(out);
    jute::write_int(out, r.protocol_version);
    jute::write_long(out, r.last_zxid_seen);
    jute::write_int(out, r.timeout_ms);
    jute::write_long(out, r.session_id);
    jute::write_buffer(out, Some(&r.passwd));
    if let Some(ro) = r.read_only {
        jute::write_bool(out, ro);
    }
    end_frame(out, at);
}

/// ConnectResponse, the first frame back: `{int protocolVersion, int timeOut, long sessionId,
/// buffer passwd, boolean readOnly}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectResponse {
    /// Always 0 from a server.
    pub protocol_version: i32,
    /// Negotiated timeout; 0 tells the client its session is invalid or expired.
    pub timeout_ms: i32,
    /// The session id: new, or the resumed one.
    pub session_id: i64,
    /// The session password the client must present to resume the session.
    pub passwd: [u8; SESSION_PASSWD_LEN],
    /// The server's read-only flag; `None` leaves the byte out (for a 44-byte request).
    pub read_only: Option<bool>,
}

impl ConnectResponse {
    /// The answer to a resume of an expired, unknown or wrongly authenticated session:
    /// timeout 0, session 0, a zero password. The server closes the socket after sending it.
    pub fn expired(protocol_version: i32, read_only: Option<bool>) -> ConnectResponse {
        ConnectResponse { protocol_version, timeout_ms: 0, session_id: 0, passwd: [0; SESSION_PASSWD_LEN], read_only }
    }
}

/// Appends a ConnectResponse frame: length prefix, then 37 bytes (36 without readOnly).
pub fn encode_connect_response(out: &mut BytesMut, r: &ConnectResponse) {
    let at = begin_frame(out);
    jute::write_int(out, r.protocol_version);
    jute::write_int(out, r.timeout_ms);
    jute::write_long(out, r.session_id);
    jute::write_buffer(out, Some(&r.passwd));
    if let Some(ro) = r.read_only {
        jute::write_bool(out, ro);
    }
    end_frame(out, at);
}

/// Decodes a ConnectResponse frame (without its prefix): client side and tests. A password of
/// another length than 16 is `Truncated` if short; extra bytes are ignored.
pub fn decode_connect_response(frame: Bytes) -> Result<ConnectResponse, JuteError> {
    let mut r = JuteReader::new(frame);
    let protocol_version = r.read_int()?;
    let timeout_ms = r.read_int()?;
    let session_id = r.read_long()?;
    let pw = r.read_buffer()?.unwrap_or_default();
    let mut passwd = [0u8; SESSION_PASSWD_LEN];
    let n = pw.len().min(SESSION_PASSWD_LEN);
    passwd[..n].copy_from_slice(&pw[..n]);
    if pw.len() < SESSION_PASSWD_LEN {
        return Err(JuteError::Truncated);
    }
    let read_only = if r.remaining() > 0 { Some(r.read_bool()?) } else { None };
    Ok(ConnectResponse { protocol_version, timeout_ms, session_id, passwd, read_only })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Java client resuming session 0x0100001dbf600000 after seeing zxid 5, timeout 30000,
    /// password 0x01..0x10, readOnly false: 45 bytes.
    const GOLDEN_45: [u8; 45] = [
        0, 0, 0, 0, // protocolVersion
        0, 0, 0, 0, 0, 0, 0, 5, // lastZxidSeen
        0, 0, 0x75, 0x30, // timeOut 30000
        0x01, 0x00, 0x00, 0x1d, 0xbf, 0x60, 0x00, 0x00, // sessionId
        0, 0, 0, 16, // passwd length
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, // passwd
        0,  // readOnly
    ];

    fn golden_request(read_only: Option<bool>) -> ConnectRequest {
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 5,
            timeout_ms: 30000,
            session_id: 0x0100_001d_bf60_0000,
            passwd: Bytes::from_static(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]),
            read_only,
        }
    }

    #[test]
    fn golden_45_byte_request() {
        let req = decode_connect_request(Bytes::from_static(&GOLDEN_45)).unwrap();
        assert_eq!(req, golden_request(Some(false)));
        let mut out = BytesMut::new();
        encode_connect_request(&mut out, &req);
        assert_eq!(&out[..4], &[0, 0, 0, 45]);
        assert_eq!(&out[4..], &GOLDEN_45[..]);
    }

    #[test]
    fn golden_44_byte_request_has_no_read_only() {
        let req = decode_connect_request(Bytes::copy_from_slice(&GOLDEN_45[..CONNECT_REQUEST_OLD_BYTES])).unwrap();
        assert_eq!(req, golden_request(None));
        let mut out = BytesMut::new();
        encode_connect_request(&mut out, &req);
        assert_eq!(out.len(), 4 + CONNECT_REQUEST_OLD_BYTES);
    }

    #[test]
    fn read_only_true_and_trailing_bytes() {
        let mut b = GOLDEN_45.to_vec();
        b[44] = 1;
        b.push(0xee);
        assert_eq!(decode_connect_request(Bytes::from(b)).unwrap().read_only, Some(true));
    }

    #[test]
    fn short_requests_are_errors() {
        for n in 0..CONNECT_REQUEST_OLD_BYTES {
            assert_eq!(
                decode_connect_request(Bytes::copy_from_slice(&GOLDEN_45[..n])),
                Err(JuteError::Truncated),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn response_forms() {
        let resp = ConnectResponse {
            protocol_version: 0,
            timeout_ms: 4000,
            session_id: 0x0100_001d_bf60_0001,
            passwd: [0xab; 16],
            read_only: Some(false),
        };
        let mut out = BytesMut::new();
        encode_connect_response(&mut out, &resp);
        let mut golden = vec![
            0, 0, 0, 37, 0, 0, 0, 0, 0, 0, 0x0f, 0xa0, 0x01, 0x00, 0x00, 0x1d, 0xbf, 0x60, 0x00, 0x01, 0, 0, 0, 16,
        ];
        golden.extend_from_slice(&[0xab; 16]);
        golden.push(0);
        assert_eq!(&out[..], &golden[..]);
        assert_eq!(decode_connect_response(out.freeze().slice(4..)), Ok(resp));

        let mut out = BytesMut::new();
        encode_connect_response(&mut out, &ConnectResponse { read_only: None, ..resp });
        assert_eq!(out.len(), 4 + 36);
        assert_eq!(&out[..4], &[0, 0, 0, 36]);
    }

    #[test]
    fn expired_response_is_all_zero() {
        let mut out = BytesMut::new();
        encode_connect_response(&mut out, &ConnectResponse::expired(0, Some(true)));
        let mut golden = vec![0, 0, 0, 37, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16];
        golden.extend_from_slice(&[0; 16]);
        golden.push(1);
        assert_eq!(&out[..], &golden[..]);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_connect_request(Bytes::from(bytes));
        }

        #[test]
        fn request_round_trips(zxid in any::<i64>(), to in any::<i32>(), sid in any::<i64>(),
                               pw in proptest::collection::vec(any::<u8>(), 0..20), ro in any::<Option<bool>>()) {
            let req = ConnectRequest { protocol_version: 0, last_zxid_seen: zxid, timeout_ms: to, session_id: sid, passwd: Bytes::from(pw), read_only: ro };
            let mut out = BytesMut::new();
            encode_connect_request(&mut out, &req);
            prop_assert_eq!(decode_connect_request(out.freeze().slice(4..)), Ok(req));
        }
    }
}
