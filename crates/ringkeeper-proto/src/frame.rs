//! Framing: every message is a 4-byte big-endian length followed by that many payload bytes;
//! the first 4 bytes of a connection may instead be a four-letter word.
//! Rules: a length below 0 or above the configured jute.maxbuffer is an error as soon as the
//! 4 prefix bytes are in (ZooKeeper logs "Len error" and closes without replying); the decoder
//! never reserves memory for a frame it has not fully received; frames come out as zero-copy
//! `Bytes` without their prefix.

use bytes::{BufMut, Bytes, BytesMut};

/// Size of the length prefix of every frame.
pub const LENGTH_PREFIX_BYTES: usize = 4;
/// Default `jute.maxbuffer`: the largest frame payload a server accepts (0xfffff, just under
/// 1 MiB). It also caps znode data, since the data travels inside one frame.
pub const JUTE_MAX_BUFFER_DEFAULT_BYTES: usize = 0xfffff;
/// Default `zookeeper.jute.maxbuffer.extrasize`: the slack jute's reader allows a single
/// string or buffer on top of jute.maxbuffer (its default equals jute.maxbuffer). It never
/// raises the frame limit; a field is always bounded by the frame that carries it as well.
pub const PACKET_EXTRA_BYTES: usize = JUTE_MAX_BUFFER_DEFAULT_BYTES;
/// The int a telnet client sends for "interrupt process" (IAC IP IAC DO). ZooKeeper closes
/// the connection on it; as a frame length it is negative, so `FrameDecoder` rejects it too.
pub const TELNET_CLOSE_CODE: u32 = 0xfff4_fffd;

/// Why the byte stream of a connection cannot be framed. Either way the connection is closed
/// without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix is negative (such as a telnet interrupt, `TELNET_CLOSE_CODE`).
    NegativeLength(i32),
    /// The length prefix exceeds jute.maxbuffer.
    TooLarge {
        /// The announced payload length.
        len: usize,
        /// The limit it exceeds.
        max: usize,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::NegativeLength(n) => write!(f, "negative frame length {n}"),
            FrameError::TooLarge { len, max } => {
                write!(f, "frame length {len} exceeds jute.maxbuffer {max}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Splits length-prefixed frames off the front of a connection's read buffer.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    len_max: usize,
}

impl FrameDecoder {
    /// `len_max` is jute.maxbuffer: the largest payload (prefix not counted) accepted.
    pub fn new(len_max: usize) -> FrameDecoder {
        FrameDecoder { len_max }
    }

    /// The largest payload accepted (jute.maxbuffer).
    pub fn len_max(&self) -> usize {
        self.len_max
    }

    /// The next complete frame's payload, split off `buf`; `Ok(None)` while more bytes are
    /// needed (nothing is consumed then). A bad length is reported as soon as its 4 bytes are
    /// in, whatever follows.
    pub fn next_frame(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if buf.len() < LENGTH_PREFIX_BYTES {
            return Ok(None);
        }
        let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if len < 0 {
            return Err(FrameError::NegativeLength(len));
        }
        let len = len as usize;
        if len > self.len_max {
            return Err(FrameError::TooLarge { len, max: self.len_max });
        }
        if buf.len() - LENGTH_PREFIX_BYTES < len {
            return Ok(None);
        }
        let mut frame = buf.split_to(LENGTH_PREFIX_BYTES + len);
        let _ = frame.split_to(LENGTH_PREFIX_BYTES);
        Ok(Some(frame.freeze()))
    }
}

/// Starts a frame in `out`: writes a placeholder length and returns where it is, for
/// `end_frame` to fill in once the payload is appended.
pub fn begin_frame(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_i32(0);
    at
}

/// Fills in the length of the frame started at `at` by `begin_frame`.
pub fn end_frame(out: &mut BytesMut, at: usize) {
    let len = out.len() - at - LENGTH_PREFIX_BYTES;
    let len = super::jute::wire_len(len);
    out[at..at + LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
}

/// The four-letter words ZooKeeper recognises in place of a first frame.
const FOUR_LETTER_WORDS: [&str; 18] = [
    "ruok", "srvr", "stat", "conf", "cons", "crst", "dump", "envi", "gtmk", "stmk", "srst", "wchc", "wchp", "wchs",
    "mntr", "isro", "hash", "dirs",
];

/// The command if the first 4 bytes of a connection are a four-letter word (checked only
/// before the ConnectRequest). None of them is a plausible frame length (all exceed any sane
/// jute.maxbuffer). Telnet's close code is not a word: it is a negative length, so framing
/// rejects it and the connection closes, as ZooKeeper does.
pub fn four_letter_word(first4: &[u8]) -> Option<&'static str> {
    let head = first4.get(..4)?;
    FOUR_LETTER_WORDS.iter().copied().find(|w| w.as_bytes() == head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_frames_and_waits_for_more() {
        let mut d = FrameDecoder::new(100);
        let mut buf = BytesMut::new();
        assert_eq!(d.next_frame(&mut buf), Ok(None));
        buf.extend_from_slice(&[0, 0, 0]);
        assert_eq!(d.next_frame(&mut buf), Ok(None));
        buf.extend_from_slice(&[3, b'a', b'b']);
        assert_eq!(d.next_frame(&mut buf), Ok(None));
        assert_eq!(buf.len(), 6, "nothing is consumed while incomplete");
        buf.extend_from_slice(&[b'c', 0, 0, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(&mut buf), Ok(Some(Bytes::from_static(b"abc"))));
        assert_eq!(d.next_frame(&mut buf), Ok(Some(Bytes::new())));
        assert_eq!(d.next_frame(&mut buf), Ok(None));
        assert_eq!(&buf[..], &[0, 0]);
    }

    #[test]
    fn lengths_over_max_or_negative_fail_on_the_prefix_alone() {
        let mut d = FrameDecoder::new(JUTE_MAX_BUFFER_DEFAULT_BYTES);
        let mut buf = BytesMut::from(&[0x00, 0x10, 0x00, 0x00][..]);
        assert_eq!(d.next_frame(&mut buf), Err(FrameError::TooLarge { len: 0x100000, max: 0xfffff }));
        let mut buf = BytesMut::from(&[0x00, 0x0f, 0xff, 0xff][..]);
        assert_eq!(d.next_frame(&mut buf), Ok(None), "exactly jute.maxbuffer is allowed");
        let mut buf = BytesMut::from(&TELNET_CLOSE_CODE.to_be_bytes()[..]);
        assert_eq!(d.next_frame(&mut buf), Err(FrameError::NegativeLength(TELNET_CLOSE_CODE as i32)));
    }

    #[test]
    fn http_and_four_letter_words_are_not_frames() {
        let mut d = FrameDecoder::new(JUTE_MAX_BUFFER_DEFAULT_BYTES);
        let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
        assert!(matches!(d.next_frame(&mut buf), Err(FrameError::TooLarge { .. })));
        for w in FOUR_LETTER_WORDS {
            assert_eq!(four_letter_word(w.as_bytes()), Some(w));
            let mut buf = BytesMut::from(w.as_bytes());
            assert!(d.next_frame(&mut buf).is_err(), "{w} must not pass as a length");
        }
        assert_eq!(four_letter_word(b"ruokxyz"), Some("ruok"));
        assert_eq!(four_letter_word(b"ruo"), None);
        assert_eq!(four_letter_word(&[0, 0, 0, 45]), None);
        assert_eq!(four_letter_word(b"RUOK"), None);
        assert_eq!(four_letter_word(&TELNET_CLOSE_CODE.to_be_bytes()), None);
    }

    #[test]
    fn begin_end_frame_patches_the_length() {
        let mut out = BytesMut::from(&b"xx"[..]);
        let at = begin_frame(&mut out);
        out.extend_from_slice(b"hello");
        end_frame(&mut out, at);
        assert_eq!(&out[..], b"xx\0\0\0\x05hello");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_in_arbitrary_chunks_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            cuts in proptest::collection::vec(1usize..16, 0..32),
            max in 0usize..64,
        ) {
            let mut d = FrameDecoder::new(max);
            let mut buf = BytesMut::new();
            let mut pos = 0;
            let mut cuts = cuts.into_iter();
            'feed: while pos < bytes.len() {
                let n = cuts.next().unwrap_or(bytes.len() - pos).min(bytes.len() - pos);
                buf.extend_from_slice(&bytes[pos..pos + n]);
                pos += n;
                loop {
                    match d.next_frame(&mut buf) {
                        Ok(Some(f)) => prop_assert!(f.len() <= max),
                        Ok(None) => break,
                        Err(_) => break 'feed,
                    }
                }
            }
        }

        #[test]
        fn frames_survive_any_chunking(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6),
            chunk in 1usize..9,
        ) {
            let mut wire = BytesMut::new();
            for p in &payloads {
                let at = begin_frame(&mut wire);
                wire.extend_from_slice(p);
                end_frame(&mut wire, at);
            }
            let mut d = FrameDecoder::new(40);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            for c in wire.chunks(chunk) {
                buf.extend_from_slice(c);
                while let Some(f) = d.next_frame(&mut buf).unwrap() {
                    got.push(f.to_vec());
                }
            }
            prop_assert_eq!(got, payloads);
            prop_assert!(buf.is_empty());
        }

        #[test]
        fn over_max_errors_before_buffering(len in 65u32..=i32::MAX as u32) {
            let mut d = FrameDecoder::new(64);
            let mut buf = BytesMut::from(&len.to_be_bytes()[..]);
            prop_assert_eq!(d.next_frame(&mut buf), Err(FrameError::TooLarge { len: len as usize, max: 64 }));
        }
    }
}
