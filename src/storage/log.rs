//! The txn log format: segment files of block-aligned batches (see docs/storage-format.md).
//! Rules: sans-IO (bytes in, bytes out); a batch starts on a `LOG_BLOCK_BYTES` boundary and is
//! never rewritten; zxids run without gaps inside and across batches; a damaged batch is a torn
//! write only at the tail of the last segment (nothing valid after it) — anywhere else it is
//! corruption, reported with the file and byte offset, never silently cut.

use crate::txn::codec::record_zxid;
use bytes::Bytes;
use std::fmt;

/// Alignment of every batch (and of every O_DIRECT write).
pub const LOG_BLOCK_BYTES: usize = 4096;
/// Batch header: magic, crc32c, body length, record count, first zxid, last zxid.
pub const BATCH_HEADER_BYTES: usize = 32;
pub const BATCH_MAGIC: [u8; 4] = *b"RKLB";
/// Length prefix of each record in a batch body.
pub const RECORD_PREFIX_BYTES: usize = 4;
/// Largest batch body the format allows (the body length is a u32; we stay well below it).
pub const BATCH_BODY_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// Shortest valid record: a txn record starts with its 8-byte zxid.
pub const RECORD_BYTES_MIN: usize = 8;
pub const SEGMENT_PREFIX: &str = "log.";
/// The next segment, zero-filled ahead of need; renamed to `log.<zxid>` when the log rolls.
/// Recovery ignores it (it holds no record) and the writer replaces it at start.
pub const SPARE_SEGMENT_NAME: &str = "log.spare";

/// True if a log may hold `next` right after `prev`: the next zxid, or the first txn of a
/// later epoch (a new leader's first proposal; the log starts a new segment there).
pub fn zxid_follows(prev: i64, next: i64) -> bool {
    let (prev_epoch, next_epoch) = ((prev as u64) >> 32, (next as u64) >> 32);
    next == prev.wrapping_add(1) || (next_epoch > prev_epoch && next as u32 == 1)
}

/// File name of the segment whose first record has `first_zxid`.
pub fn segment_name(first_zxid: i64) -> String {
    format!("{SEGMENT_PREFIX}{:016x}", first_zxid as u64)
}

/// The first zxid a segment file name stands for; None for any other name.
pub fn parse_segment_name(name: &str) -> Option<i64> {
    parse_hex_suffix(name, SEGMENT_PREFIX)
}

/// `<prefix><16 lowercase hex digits>` → the number; shared with snapshot names.
pub(crate) fn parse_hex_suffix(name: &str, prefix: &str) -> Option<i64> {
    let hex = name.strip_prefix(prefix)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(|v| v as i64)
}

/// Rounds up to the next block boundary.
pub fn align_up(n: usize) -> usize {
    n.div_ceil(LOG_BLOCK_BYTES) * LOG_BLOCK_BYTES
}

/// Collects the records of one batch. The crc of the body is computed as records are pushed,
/// so `finish` + `EncodedBatch::write_to` copy each byte exactly once, straight into the
/// caller's (DMA) buffer.
#[derive(Debug, Default)]
pub struct BatchEncoder {
    records: Vec<Bytes>,
    first_zxid: i64,
    body_len: usize,
    body_crc: u32,
}

impl BatchEncoder {
    pub fn new() -> BatchEncoder {
        BatchEncoder::default()
    }

    /// Adds a record (a txn::codec encoding). Panics if its zxid does not follow the previous
    /// record's by exactly 1, or if it has none: that is a bug in the writer, never disk data.
    pub fn push(&mut self, record: Bytes) {
        let zxid = record_zxid(&record).expect("log record shorter than its zxid");
        if self.records.is_empty() {
            self.first_zxid = zxid;
        } else {
            let expected = self.first_zxid + self.records.len() as i64;
            assert_eq!(zxid, expected, "log batch zxids are not contiguous: {zxid:#x} after {:#x}", expected - 1);
        }
        let len = record.len() as u32;
        self.body_crc = crc32c::crc32c_append(self.body_crc, &len.to_be_bytes());
        self.body_crc = crc32c::crc32c_append(self.body_crc, &record);
        self.body_len += RECORD_PREFIX_BYTES + record.len();
        assert!(self.body_len <= BATCH_BODY_BYTES_MAX, "log batch body over {BATCH_BODY_BYTES_MAX} bytes");
        self.records.push(record);
    }

    /// True if a record of `record_len` bytes keeps the body within `body_bytes_max` (the
    /// writer's cap, at most `BATCH_BODY_BYTES_MAX`): the writer closes the batch otherwise, so
    /// `push`'s assert never fires.
    pub fn has_room(&self, record_len: usize, body_bytes_max: usize) -> bool {
        self.body_len + RECORD_PREFIX_BYTES + record_len <= body_bytes_max.min(BATCH_BODY_BYTES_MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Zxid of the first record, if any.
    pub fn first_zxid(&self) -> Option<i64> {
        (!self.records.is_empty()).then_some(self.first_zxid)
    }

    /// Zxid of the last record, if any.
    pub fn last_zxid(&self) -> Option<i64> {
        (!self.records.is_empty()).then(|| self.first_zxid + self.records.len() as i64 - 1)
    }

    /// Bytes the batch takes on disk, padding included (a multiple of `LOG_BLOCK_BYTES`).
    pub fn encoded_len(&self) -> usize {
        align_up(BATCH_HEADER_BYTES + self.body_len)
    }

    /// Seals the batch: computes the header. Panics on an empty batch (a writer bug).
    pub fn finish(self) -> EncodedBatch {
        assert!(!self.records.is_empty(), "empty log batch");
        let last = self.first_zxid + self.records.len() as i64 - 1;
        let mut header = [0u8; BATCH_HEADER_BYTES];
        header[0..4].copy_from_slice(&BATCH_MAGIC);
        header[8..12].copy_from_slice(&(self.body_len as u32).to_be_bytes());
        header[12..16].copy_from_slice(&(self.records.len() as u32).to_be_bytes());
        header[16..24].copy_from_slice(&self.first_zxid.to_be_bytes());
        header[24..32].copy_from_slice(&last.to_be_bytes());
        let crc = crc32c::crc32c_combine(crc32c::crc32c(&header[8..]), self.body_crc, self.body_len);
        header[4..8].copy_from_slice(&crc.to_be_bytes());
        EncodedBatch {
            header,
            len: align_up(BATCH_HEADER_BYTES + self.body_len),
            first_zxid: self.first_zxid,
            last_zxid: last,
            records: self.records,
        }
    }
}

/// A sealed batch: its header plus the records, laid out on demand by `write_to`.
#[derive(Debug)]
pub struct EncodedBatch {
    header: [u8; BATCH_HEADER_BYTES],
    records: Vec<Bytes>,
    len: usize,
    first_zxid: i64,
    last_zxid: i64,
}

impl EncodedBatch {
    /// Bytes on disk (a multiple of `LOG_BLOCK_BYTES`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a batch holds at least one record.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn first_zxid(&self) -> i64 {
        self.first_zxid
    }

    pub fn last_zxid(&self) -> i64 {
        self.last_zxid
    }

    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Fills `out` with bytes `[offset, offset + out.len())` of the on-disk batch (padding is
    /// zeroes), so a large batch can be written through several bounded buffers.
    pub fn write_to(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.len, "write_to past the end of the batch");
        let end = offset + out.len();
        let mut filled = 0usize; // bytes of `out` written so far
        let mut pos = 0usize; // batch position of the current piece
        let mut copy = |piece: &[u8], pos: &mut usize, filled: &mut usize| {
            let (start, stop) = (*pos, *pos + piece.len());
            *pos = stop;
            if stop <= offset || start >= end {
                return;
            }
            let from = offset.max(start);
            let to = end.min(stop);
            out[from - offset..to - offset].copy_from_slice(&piece[from - start..to - start]);
            *filled += to - from;
        };
        copy(&self.header, &mut pos, &mut filled);
        for r in &self.records {
            if pos >= end {
                break;
            }
            copy(&(r.len() as u32).to_be_bytes(), &mut pos, &mut filled);
            copy(r, &mut pos, &mut filled);
        }
        // Whatever is left of the window is padding.
        let pad_from = pos.max(offset).min(end);
        out[pad_from - offset..].fill(0);
    }

    /// The whole batch as one buffer (tests and tools; the writer uses `write_to`).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.write_to(0, &mut v);
        v
    }
}

/// Encodes one batch of records into a new buffer (tests and tools).
pub fn encode_batch(records: &[Bytes]) -> Vec<u8> {
    let mut enc = BatchEncoder::new();
    for r in records {
        enc.push(r.clone());
    }
    enc.finish().to_vec()
}

/// What is wrong with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadBatch {
    BadMagic,
    BodyPastEnd {
        body_len: u64,
    },
    ChecksumMismatch,
    RecordFraming,
    HeaderMismatch,
    ZxidsNotSequential,
    /// Bytes after a zero header (end of data) that are not zero.
    DataAfterEnd,
    /// A zero header, then a valid batch further on.
    HoleBeforeData,
    /// The first record of a segment is not the zxid its name says.
    FirstZxidMismatch {
        expected: i64,
        found: i64,
    },
}

impl fmt::Display for BadBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadBatch::BadMagic => write!(f, "bad batch magic"),
            BadBatch::BodyPastEnd { body_len } => {
                write!(f, "batch body of {body_len} bytes runs past the end of the file")
            }
            BadBatch::ChecksumMismatch => write!(f, "batch checksum mismatch"),
            BadBatch::RecordFraming => write!(f, "records do not fill the batch body exactly"),
            BadBatch::HeaderMismatch => write!(f, "batch header does not match its records"),
            BadBatch::ZxidsNotSequential => {
                write!(f, "record zxids do not follow the batch header")
            }
            BadBatch::DataAfterEnd => write!(f, "non-zero bytes after the end of the log data"),
            BadBatch::HoleBeforeData => {
                write!(f, "a block of zeroes where a batch should be, followed by more batches")
            }
            BadBatch::FirstZxidMismatch { expected, found } => {
                write!(f, "zxid gap: expected zxid {expected:#x}, found {found:#x}")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogError {
    /// Damage that is not a torn tail: the server must not start.
    Corrupt { file: String, offset: u64, reason: BadBatch },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Corrupt { file, offset, reason } => write!(
                f,
                "txn log {file} is corrupt at byte {offset}: {reason}. Committed data may be damaged, so the server \
                 will not start; restore the file from a replica or backup, or move it and every later segment \
                 away to start from the newest snapshot (losing the txns they held)"
            ),
        }
    }
}

impl std::error::Error for LogError {}

/// A damaged batch cut off the tail of the last segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Where the damaged batch starts (= `SegmentScan::end_offset`).
    pub offset: u64,
    pub reason: BadBatch,
    /// End of the last non-zero block after `offset`: `[offset, garbage_end)` should be zeroed.
    pub garbage_end: u64,
}

/// What a segment holds.
#[derive(Debug)]
pub struct SegmentScan {
    /// Every record of every valid batch, in order (slices of the scanned bytes).
    pub records: Vec<Bytes>,
    /// Where valid data ends (block aligned): the next batch goes here.
    pub end_offset: u64,
    /// Set when a damaged batch at the tail was cut off.
    pub torn: Option<TornTail>,
}

enum Batch {
    /// A valid batch: its records and its length on disk.
    Valid(Vec<Bytes>, usize),
    /// A zero header (or too few bytes left for one): end of written data.
    End,
    Bad(BadBatch),
}

fn be32(s: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&s[..4]);
    u32::from_be_bytes(b)
}

fn be64(s: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[..8]);
    i64::from_be_bytes(b)
}

fn read_batch(data: &Bytes, off: usize) -> Batch {
    if off + BATCH_HEADER_BYTES > data.len() {
        return Batch::End;
    }
    let h = &data[off..off + BATCH_HEADER_BYTES];
    if h.iter().all(|b| *b == 0) {
        return Batch::End;
    }
    if h[0..4] != BATCH_MAGIC {
        return Batch::Bad(BadBatch::BadMagic);
    }
    let crc = be32(&h[4..8]);
    let body_len = be32(&h[8..12]) as usize;
    let count = be32(&h[12..16]) as usize;
    let (first, last) = (be64(&h[16..24]), be64(&h[24..32]));
    let end = off + BATCH_HEADER_BYTES + body_len;
    if end > data.len() {
        return Batch::Bad(BadBatch::BodyPastEnd { body_len: body_len as u64 });
    }
    if crc32c::crc32c(&data[off + 8..end]) != crc {
        return Batch::Bad(BadBatch::ChecksumMismatch);
    }
    // From here on the checksum matched: any inconsistency is a writer bug or corruption.
    let mut records = Vec::with_capacity(count.min(body_len / (RECORD_PREFIX_BYTES + RECORD_BYTES_MIN) + 1));
    let mut pos = off + BATCH_HEADER_BYTES;
    while pos < end {
        if pos + RECORD_PREFIX_BYTES > end {
            return Batch::Bad(BadBatch::RecordFraming);
        }
        let len = be32(&data[pos..]) as usize;
        let start = pos + RECORD_PREFIX_BYTES;
        if len < RECORD_BYTES_MIN || len > end - start {
            return Batch::Bad(BadBatch::RecordFraming);
        }
        records.push(data.slice(start..start + len));
        pos = start + len;
    }
    if count == 0 || records.len() != count || last.wrapping_sub(first).wrapping_add(1) != count as i64 {
        return Batch::Bad(BadBatch::HeaderMismatch);
    }
    for (i, r) in records.iter().enumerate() {
        if record_zxid(r) != Some(first.wrapping_add(i as i64)) {
            return Batch::Bad(BadBatch::ZxidsNotSequential);
        }
    }
    Batch::Valid(records, align_up(BATCH_HEADER_BYTES + body_len))
}

/// True if some block at or after `from` starts a valid batch.
fn valid_batch_after(data: &Bytes, from: usize) -> bool {
    let mut off = from;
    while off + BATCH_HEADER_BYTES <= data.len() {
        if data[off..off + 4] == BATCH_MAGIC && matches!(read_batch(data, off), Batch::Valid(..)) {
            return true;
        }
        off += LOG_BLOCK_BYTES;
    }
    false
}

/// End of the last block at or after `from` holding a non-zero byte (`from` if none).
fn nonzero_end(data: &[u8], from: usize) -> usize {
    if from >= data.len() {
        return from;
    }
    match data[from..].iter().rposition(|b| *b != 0) {
        Some(i) => align_up(from + i + 1).min(align_up(data.len())),
        None => from,
    }
}

/// Reads a segment from its bytes (copied once into a shared buffer). Errors name no file;
/// recovery uses `scan_segment_file`.
pub fn scan_segment(bytes: &[u8], is_last_segment: bool) -> Result<SegmentScan, LogError> {
    scan_segment_file("", Bytes::copy_from_slice(bytes), is_last_segment, None)
}

/// Reads a segment. `expected_first_zxid` is the zxid its first record must have (the one in
/// its name); records are slices of `data`. See the module comment for the torn-tail rule.
pub fn scan_segment_file(
    file: &str,
    data: Bytes,
    is_last_segment: bool,
    expected_first_zxid: Option<i64>,
) -> Result<SegmentScan, LogError> {
    let mut off = 0usize;
    let mut records: Vec<Bytes> = Vec::new();
    let mut next = expected_first_zxid;
    let corrupt =
        |offset: usize, reason: BadBatch| LogError::Corrupt { file: file.to_string(), offset: offset as u64, reason };
    loop {
        let (reason, after) = match read_batch(&data, off) {
            Batch::Valid(batch, len) => {
                let first = record_zxid(&batch[0]).unwrap_or(-1);
                if let Some(n) = next {
                    if first != n {
                        return Err(corrupt(off, BadBatch::FirstZxidMismatch { expected: n, found: first }));
                    }
                }
                next = Some(first.wrapping_add(batch.len() as i64));
                records.extend(batch);
                off += len;
                continue;
            }
            Batch::End => {
                if valid_batch_after(&data, off + LOG_BLOCK_BYTES) {
                    return Err(corrupt(off, BadBatch::HoleBeforeData));
                }
                if nonzero_end(&data, off) == off {
                    return Ok(SegmentScan { records, end_offset: off as u64, torn: None });
                }
                (BadBatch::DataAfterEnd, off)
            }
            Batch::Bad(reason) => {
                if valid_batch_after(&data, off + LOG_BLOCK_BYTES) {
                    return Err(corrupt(off, reason));
                }
                (reason, off)
            }
        };
        if !is_last_segment {
            return Err(corrupt(after, reason));
        }
        let garbage_end = nonzero_end(&data, off) as u64;
        return Ok(SegmentScan {
            records,
            end_offset: off as u64,
            torn: Some(TornTail { offset: off as u64, reason, garbage_end }),
        });
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::txn::{codec, Txn, TxnHeader, TxnOp};
    use bytes::BytesMut;

    fn rec_sized(zxid: i64, data_len: usize) -> Bytes {
        let mut b = BytesMut::new();
        let txn = Txn {
            header: TxnHeader { zxid, session_id: 1, cxid: 1, time_ms: 1 },
            op: TxnOp::SetData { path: "/a".into(), data: Some(Bytes::from(vec![7u8; data_len])) },
        };
        codec::encode(&txn, &mut b);
        b.freeze()
    }

    fn rec(zxid: i64) -> Bytes {
        rec_sized(zxid, 100)
    }

    fn segment(batches: &[std::ops::Range<i64>], tail_zeroes: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for b in batches {
            let recs: Vec<Bytes> = b.clone().map(rec).collect();
            out.extend(encode_batch(&recs));
        }
        out.extend(vec![0u8; tail_zeroes]);
        out
    }

    fn scan(seg: &[u8], last: bool) -> Result<SegmentScan, LogError> {
        scan_segment_file("log.test", Bytes::copy_from_slice(seg), last, Some(1))
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(0x1_0000_0005), "log.0000000100000005");
        assert_eq!(parse_segment_name("log.0000000100000005"), Some(0x1_0000_0005));
        assert_eq!(parse_segment_name("log.000000010000000"), None);
        assert_eq!(parse_segment_name("log.000000010000000G"), None);
        assert_eq!(parse_segment_name("log.00000001000000AB"), None);
        assert_eq!(parse_segment_name("snapshot.0000000100000005"), None);
    }

    #[test]
    fn batches_round_trip_and_end_at_zeroes() {
        let seg = segment(&[1..4, 4..5, 5..40], 3 * LOG_BLOCK_BYTES);
        assert_eq!(seg.len() % LOG_BLOCK_BYTES, 0);
        let s = scan(&seg, true).unwrap();
        assert_eq!(s.records.len(), 39);
        assert_eq!(s.torn, None);
        assert_eq!(s.end_offset as usize, seg.len() - 3 * LOG_BLOCK_BYTES);
        for (i, r) in s.records.iter().enumerate() {
            assert_eq!(codec::decode(r.clone()).unwrap().header.zxid, i as i64 + 1);
        }
        let plain = scan_segment(&seg, false).unwrap();
        assert_eq!(plain.records.len(), 39);
        assert_eq!(scan_segment(&[], true).unwrap().end_offset, 0);
    }

    #[test]
    fn chunked_write_to_matches_whole_batch() {
        let recs: Vec<Bytes> = (10..30).map(|z| rec_sized(z, 977 * (z as usize % 5))).collect();
        let mut enc = BatchEncoder::new();
        for r in &recs {
            enc.push(r.clone());
        }
        assert_eq!((enc.first_zxid(), enc.last_zxid(), enc.record_count()), (Some(10), Some(29), 20));
        let expected_len = enc.encoded_len();
        let batch = enc.finish();
        assert_eq!(batch.len(), expected_len);
        assert_eq!(batch.len() % LOG_BLOCK_BYTES, 0);
        let whole = batch.to_vec();
        // crc from combine equals a direct computation.
        let body_len = be32(&whole[8..12]) as usize;
        assert_eq!(crc32c::crc32c(&whole[8..BATCH_HEADER_BYTES + body_len]), be32(&whole[4..8]));
        for chunk in [1usize, 7, 4096, 5000] {
            let mut pieces = Vec::new();
            let mut off = 0;
            while off < batch.len() {
                let n = chunk.min(batch.len() - off);
                let mut buf = vec![0xAAu8; n];
                batch.write_to(off, &mut buf);
                pieces.extend(buf);
                off += n;
            }
            assert_eq!(pieces, whole, "chunk {chunk}");
        }
        let s = scan(&whole, true);
        assert!(matches!(
            s,
            Err(LogError::Corrupt { reason: BadBatch::FirstZxidMismatch { expected: 1, found: 10 }, .. })
        ));
        let s = scan_segment(&whole, true).unwrap();
        assert_eq!(s.records, recs);
    }

    #[test]
    #[should_panic(expected = "not contiguous")]
    fn encoder_rejects_a_gap() {
        let mut enc = BatchEncoder::new();
        enc.push(rec(1));
        enc.push(rec(3));
    }

    #[test]
    fn a_torn_last_batch_is_cut_at_every_byte() {
        let full = segment(&[1..3, 3..60], 0);
        let first_len = encode_batch(&[rec(1), rec(2)]).len();
        // Bytes after the body are padding: cutting there loses nothing.
        let body_end = first_len + BATCH_HEADER_BYTES + be32(&full[first_len + 8..]) as usize;
        for cut in first_len..full.len() {
            if cut >= body_end {
                let mut padded = full[..cut].to_vec();
                padded.resize(full.len(), 0);
                assert_eq!(scan(&padded, true).unwrap().records.len(), 59);
                continue;
            }
            let mut torn = full[..cut].to_vec();
            torn.resize(full.len() + LOG_BLOCK_BYTES, 0);
            let s = scan(&torn, true).unwrap();
            assert_eq!(s.records.len(), 2, "cut at {cut}");
            assert_eq!(s.end_offset as usize, first_len);
            if cut > first_len {
                let t = s.torn.as_ref().expect("torn tail reported");
                assert_eq!(t.offset as usize, first_len);
                assert!(t.garbage_end as usize >= cut && (t.garbage_end as usize).is_multiple_of(LOG_BLOCK_BYTES));
            } else {
                assert_eq!(s.torn, None);
            }
            // The same bytes in an older segment are corruption.
            if cut > first_len {
                assert!(scan(&torn, false).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_lost_header_block_with_body_blocks_written_is_a_torn_tail() {
        let mut seg = segment(&[1..3, 3..200], LOG_BLOCK_BYTES);
        let first_len = encode_batch(&[rec(1), rec(2)]).len();
        seg[first_len..first_len + LOG_BLOCK_BYTES].fill(0);
        let s = scan(&seg, true).unwrap();
        assert_eq!(s.records.len(), 2);
        assert_eq!(s.torn.unwrap().reason, BadBatch::DataAfterEnd);
    }

    #[test]
    fn damage_before_a_valid_batch_or_in_an_older_segment_is_corruption() {
        let mut seg = segment(&[1..3, 3..5, 5..6], 0);
        let second = encode_batch(&[rec(1), rec(2)]).len();
        seg[second + 40] ^= 0xff;
        match scan(&seg, true) {
            Err(LogError::Corrupt { offset, reason, .. }) => {
                assert_eq!(offset as usize, second);
                assert_eq!(reason, BadBatch::ChecksumMismatch);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        let msg = scan(&seg, true).unwrap_err().to_string();
        assert!(msg.contains("log.test") && msg.contains(&format!("byte {second}")), "{msg}");
        let mut last_only = segment(&[1..3, 3..5], 0);
        last_only[second + 40] ^= 0xff;
        assert!(scan(&last_only, true).unwrap().torn.is_some());
        assert!(matches!(scan(&last_only, false), Err(LogError::Corrupt { .. })));
    }

    #[test]
    fn a_hole_before_more_batches_is_corruption() {
        let mut seg = segment(&[1..3], LOG_BLOCK_BYTES);
        seg.extend(segment(&[3..5], 0));
        assert!(matches!(scan(&seg, true), Err(LogError::Corrupt { reason: BadBatch::HoleBeforeData, .. })));
    }

    #[test]
    fn a_zxid_gap_is_corruption() {
        let seg = segment(&[1..3, 4..6], 0);
        assert!(matches!(
            scan(&seg, true),
            Err(LogError::Corrupt { reason: BadBatch::FirstZxidMismatch { expected: 3, found: 4 }, .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn scanning_random_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9000), last in proptest::prelude::any::<bool>()) {
            let _ = scan_segment(&bytes, last);
        }

        #[test]
        fn a_flipped_byte_is_never_accepted_silently(pos in 0usize..20_000, bit in 0u8..8) {
            let seg = segment(&[1..3, 3..40, 40..41], LOG_BLOCK_BYTES);
            let data_end = seg.len() - LOG_BLOCK_BYTES;
            let pos = pos % seg.len();
            let mut bad = seg.clone();
            bad[pos] ^= 1 << bit;
            match scan(&bad, true) {
                // Accepted: either the flip hit padding (all records intact) or the tail was cut.
                Ok(s) => {
                    let n = s.records.len();
                    // Only padding and the zero tail are outside the checksums.
                    proptest::prop_assert!(n == 40 || s.torn.is_some() || pos >= data_end);
                    let good = scan(&seg, true).unwrap();
                    proptest::prop_assert_eq!(&good.records[..n], &s.records[..]);
                }
                Err(LogError::Corrupt { .. }) => {}
            }
        }
    }
}
