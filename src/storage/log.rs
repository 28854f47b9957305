//! The txn log format, version 2 (see docs/storage-format.md): a segment file is a sequence of
//! 512-byte sectors, each 508 payload bytes + a CRC-32C over (the sector's file offset, u64 BE)
//! ++ payload; the payloads, concatenated, form the logical stream, which holds batches (a
//! header, then records) packed one after the other at 8-byte alignment.
//! Rules: sans-IO (bytes in, bytes out); zxids run without gaps inside and across batches.
//! The sector rule, which tells a torn write from corruption: a sector that was never written
//! is all zeroes (log space is zero-filled ahead of use) and one that was written has a valid
//! crc, because a sector write is atomic; so ANY non-zero sector whose crc fails, anywhere, is
//! corruption (`LogError::Corrupt` naming the file and byte; the caller never rewrites the file).
//! A torn write is only this: at the tail of the last segment, every sector valid or zero, the
//! last batch incomplete or inconsistent, no valid batch after it; it was never acknowledged
//! and is cut. Any other bad batch is corruption too.
//! Packing: the writer rewrites the partly filled tail block (O_DIRECT writes whole 4 KiB
//! blocks) with the same bytes for what is already there plus the new batch; a torn rewrite
//! leaves each sector its old version (same acknowledged bytes, zeroes after them) or its new
//! one, so acknowledged batches always read back (`AppendPoint`).

use crate::txn::codec::record_zxid;
use bytes::Bytes;
use std::fmt;

/// The unit we assume the disk writes atomically; the unit of the crc.
pub const SECTOR_BYTES: usize = 512;
/// The crc at the end of each written sector.
pub const SECTOR_CRC_BYTES: usize = 4;
/// Logical-stream bytes per sector.
pub const SECTOR_PAYLOAD_BYTES: usize = SECTOR_BYTES - SECTOR_CRC_BYTES;
/// Alignment of every O_DIRECT write (offset and length).
pub const LOG_BLOCK_BYTES: usize = 4096;
/// Sectors per write block.
pub const SECTORS_PER_BLOCK: usize = LOG_BLOCK_BYTES / SECTOR_BYTES;
/// Alignment of a batch in the logical stream.
pub const BATCH_ALIGN_BYTES: usize = 8;
/// The format this code writes and reads (in every batch header).
pub const LOG_FORMAT_VERSION: u32 = 2;
/// Batch header: magic, version, crc32c, body length, record count, reserved, first zxid,
/// last zxid.
pub const BATCH_HEADER_BYTES: usize = 40;
/// First header byte the batch crc covers (everything after magic, version and the crc).
const BATCH_CRC_FROM: usize = 12;
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

const _: () = assert!(LOG_BLOCK_BYTES.is_multiple_of(SECTOR_BYTES));

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

/// File offset of logical-stream offset `logical`.
pub fn file_offset_of(logical: u64) -> u64 {
    let p = SECTOR_PAYLOAD_BYTES as u64;
    (logical / p) * SECTOR_BYTES as u64 + logical % p
}

/// File bytes a segment needs to hold `logical` bytes of stream (whole sectors).
pub fn file_len_for(logical: u64) -> u64 {
    logical.div_ceil(SECTOR_PAYLOAD_BYTES as u64) * SECTOR_BYTES as u64
}

/// The crc of sector `index` with `payload` (`SECTOR_PAYLOAD_BYTES`).
fn sector_crc(index: u64, payload: &[u8]) -> u32 {
    super::sector_crc::sector_crc(index * SECTOR_BYTES as u64, payload)
}

/// Sector `index` holding `payload` (at most `SECTOR_PAYLOAD_BYTES`; zero-padded), crc sealed.
pub fn seal_sector(index: u64, payload: &[u8], out: &mut [u8]) {
    out[..payload.len()].copy_from_slice(payload);
    out[payload.len()..SECTOR_PAYLOAD_BYTES].fill(0);
    let crc = sector_crc(index, &out[..SECTOR_PAYLOAD_BYTES]);
    out[SECTOR_PAYLOAD_BYTES..SECTOR_BYTES].copy_from_slice(&crc.to_be_bytes());
}

/// A logical stream laid out in sectors from file offset 0, padded with zero sectors to a
/// whole block (what a rewritten segment holds; tests and tools).
pub fn sectorize(logical: &[u8]) -> Vec<u8> {
    let sectors = logical.len().div_ceil(SECTOR_PAYLOAD_BYTES);
    let mut out = vec![0u8; align_up(sectors * SECTOR_BYTES)];
    for (i, chunk) in logical.chunks(SECTOR_PAYLOAD_BYTES).enumerate() {
        seal_sector(i as u64, chunk, &mut out[i * SECTOR_BYTES..(i + 1) * SECTOR_BYTES]);
    }
    out
}

/// Collects the records of one batch. `finish` computes the batch crc in one pass over the
/// records (no crc combine), and `EncodedBatch::write_to` copies each byte once, straight into
/// the caller's (DMA) buffer, finding its first record by binary search (a write fills one
/// sector at a time: a scan from the first record each time was quadratic in the batch).
#[derive(Debug, Default)]
pub struct BatchEncoder {
    records: Vec<Bytes>,
    first_zxid: i64,
    body_len: usize,
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

    /// Logical-stream bytes the batch takes, alignment padding included.
    pub fn encoded_len(&self) -> usize {
        (BATCH_HEADER_BYTES + self.body_len).next_multiple_of(BATCH_ALIGN_BYTES)
    }

    /// Seals the batch: computes the header and its crc (header fields, then each record's
    /// length prefix and bytes, in stream order). Panics on an empty batch (a writer bug).
    pub fn finish(self) -> EncodedBatch {
        assert!(!self.records.is_empty(), "empty log batch");
        let last = self.first_zxid + self.records.len() as i64 - 1;
        let mut header = [0u8; BATCH_HEADER_BYTES];
        header[0..4].copy_from_slice(&BATCH_MAGIC);
        header[4..8].copy_from_slice(&LOG_FORMAT_VERSION.to_be_bytes());
        header[12..16].copy_from_slice(&(self.body_len as u32).to_be_bytes());
        header[16..20].copy_from_slice(&(self.records.len() as u32).to_be_bytes());
        header[24..32].copy_from_slice(&self.first_zxid.to_be_bytes());
        header[32..40].copy_from_slice(&last.to_be_bytes());
        let mut crc = crc32c::crc32c(&header[BATCH_CRC_FROM..]);
        let mut starts = Vec::with_capacity(self.records.len());
        let mut pos = BATCH_HEADER_BYTES;
        for r in &self.records {
            starts.push(pos);
            pos += RECORD_PREFIX_BYTES + r.len();
            crc = crc32c::crc32c_append(crc, &(r.len() as u32).to_be_bytes());
            crc = crc32c::crc32c_append(crc, r);
        }
        header[8..12].copy_from_slice(&crc.to_be_bytes());
        EncodedBatch {
            len: self.encoded_len(),
            header,
            first_zxid: self.first_zxid,
            last_zxid: last,
            records: self.records,
            starts,
        }
    }
}

/// A sealed batch: its header plus the records, laid out on demand by `write_to`.
#[derive(Debug)]
pub struct EncodedBatch {
    header: [u8; BATCH_HEADER_BYTES],
    records: Vec<Bytes>,
    /// Batch position of each record's length prefix (ascending).
    starts: Vec<usize>,
    len: usize,
    first_zxid: i64,
    last_zxid: i64,
}

impl EncodedBatch {
    /// Bytes in the logical stream (a multiple of `BATCH_ALIGN_BYTES`).
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

    /// Fills `out` with bytes `[offset, offset + out.len())` of the batch in the logical
    /// stream (padding is zeroes), so a large batch can be written through bounded buffers.
    /// Costs O(log records + out.len()): it starts at the record holding `offset`.
    pub fn write_to(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.len, "write_to past the end of the batch");
        let end = offset + out.len();
        let copy = |piece: &[u8], start: usize, out: &mut [u8]| {
            let stop = start + piece.len();
            if stop <= offset || start >= end {
                return;
            }
            let from = offset.max(start);
            let to = end.min(stop);
            out[from - offset..to - offset].copy_from_slice(&piece[from - start..to - start]);
        };
        copy(&self.header, 0, out);
        // The last record starting at or before `offset` (the first one if the window starts
        // in the header).
        let first = self.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut pos = self.starts.get(first).copied().unwrap_or(BATCH_HEADER_BYTES);
        for r in &self.records[first..] {
            if pos >= end {
                break;
            }
            copy(&(r.len() as u32).to_be_bytes(), pos, out);
            copy(r, pos + RECORD_PREFIX_BYTES, out);
            pos += RECORD_PREFIX_BYTES + r.len();
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

/// Encodes one batch of records into a new buffer of logical-stream bytes (tests and tools).
pub fn encode_batch(records: &[Bytes]) -> Vec<u8> {
    let mut enc = BatchEncoder::new();
    for r in records {
        enc.push(r.clone());
    }
    enc.finish().to_vec()
}

/// Where the writer puts the next batch, and the logical bytes already in the block it starts
/// in. A write begins at that block (O_DIRECT writes whole blocks), so those bytes are written
/// again, unchanged, in front of the new batch; sectors past the end of the data in the last
/// block are written as zeroes (never-written space).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendPoint {
    next: u64,
    /// Logical bytes from the start of the block holding `next` up to `next`.
    head: Vec<u8>,
}

impl AppendPoint {
    /// The start of an empty segment.
    pub fn start() -> AppendPoint {
        AppendPoint::default()
    }

    /// File offset of the block a write at logical offset `next` starts at.
    pub fn block_offset_for(next: u64) -> u64 {
        file_offset_of(next) / LOG_BLOCK_BYTES as u64 * LOG_BLOCK_BYTES as u64
    }

    /// The append point at logical offset `next`, given the block the file holds at
    /// `block_offset_for(next)` (shorter if the file ends inside it). Fails when a sector
    /// holding bytes before `next` does not verify.
    pub fn from_block(next: u64, block: &[u8]) -> Result<AppendPoint, BadBatch> {
        let block_off = Self::block_offset_for(next);
        let first_sector = block_off / SECTOR_BYTES as u64;
        let start_logical = first_sector * SECTOR_PAYLOAD_BYTES as u64;
        let want = (next - start_logical) as usize;
        let mut head = Vec::with_capacity(want);
        let mut s = 0usize;
        while head.len() < want {
            let raw = block.get(s * SECTOR_BYTES..(s + 1) * SECTOR_BYTES).ok_or(BadBatch::UnwrittenSector)?;
            if raw.iter().all(|b| *b == 0) {
                return Err(BadBatch::UnwrittenSector);
            }
            let stored = be32(&raw[SECTOR_PAYLOAD_BYTES..]);
            if sector_crc(first_sector + s as u64, &raw[..SECTOR_PAYLOAD_BYTES]) != stored {
                return Err(BadBatch::SectorChecksum);
            }
            let n = (want - head.len()).min(SECTOR_PAYLOAD_BYTES);
            head.extend_from_slice(&raw[..n]);
            s += 1;
        }
        Ok(AppendPoint { next, head })
    }

    /// Logical offset of the next batch.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// File offset where the write of the next batch starts (block aligned).
    pub fn write_offset(&self) -> u64 {
        Self::block_offset_for(self.next)
    }

    /// File offset just past the data once a batch of `batch_len` logical bytes is written.
    pub fn data_end_after(&self, batch_len: usize) -> u64 {
        file_len_for(self.next + batch_len as u64)
    }

    /// Bytes of the write of a batch of `batch_len` logical bytes: from `write_offset()` to the
    /// end of the block holding its last byte.
    pub fn write_len(&self, batch_len: usize) -> usize {
        align_up((self.data_end_after(batch_len) - self.write_offset()) as usize)
    }

    /// Logical byte at `pos` of the stream once `batch` is appended here (zero past its end;
    /// with no batch, zero past the data).
    fn logical_into(&self, batch: Option<&EncodedBatch>, from: u64, out: &mut [u8]) {
        let head_start = self.next - self.head.len() as u64;
        let end = from + out.len() as u64;
        let batch_end = self.next + batch.map_or(0, |b| b.len()) as u64;
        // Head bytes.
        let (h0, h1) = (from.max(head_start), end.min(self.next));
        if h0 < h1 {
            out[(h0 - from) as usize..(h1 - from) as usize]
                .copy_from_slice(&self.head[(h0 - head_start) as usize..(h1 - head_start) as usize]);
        }
        let (b0, b1) = (from.max(self.next), end.min(batch_end));
        if let Some(batch) = batch.filter(|_| b0 < b1) {
            batch.write_to((b0 - self.next) as usize, &mut out[(b0 - from) as usize..(b1 - from) as usize]);
        }
        let z0 = from.max(batch_end).min(end);
        out[(z0 - from) as usize..].fill(0);
    }

    /// Fills `out` with bytes `[done, done + out.len())` of the write of `batch` (from
    /// `write_offset()`); `done` and `out.len()` are multiples of `SECTOR_BYTES`. Sectors that
    /// hold no byte of the stream are zeroes; the others are sealed with their crc.
    pub fn fill(&self, batch: &EncodedBatch, done: usize, out: &mut [u8]) {
        self.fill_sectors(Some(batch), done, out)
    }

    /// Fills `out` as `fill` would with no batch: the bytes already written in the block the
    /// data ends in, zeroes after. Written over what a failed write left past the data, it
    /// clears that write's sectors (the segment then ends cleanly at `next`).
    pub fn fill_cleared(&self, done: usize, out: &mut [u8]) {
        self.fill_sectors(None, done, out)
    }

    fn fill_sectors(&self, batch: Option<&EncodedBatch>, done: usize, out: &mut [u8]) {
        debug_assert!(done.is_multiple_of(SECTOR_BYTES) && out.len().is_multiple_of(SECTOR_BYTES));
        let data_end = self.next + batch.map_or(0, |b| b.len()) as u64;
        let first_sector = (self.write_offset() + done as u64) / SECTOR_BYTES as u64;
        for (k, sector) in out.chunks_mut(SECTOR_BYTES).enumerate() {
            let index = first_sector + k as u64;
            let from = index * SECTOR_PAYLOAD_BYTES as u64;
            if from >= data_end {
                sector.fill(0);
                continue;
            }
            self.logical_into(batch, from, &mut sector[..SECTOR_PAYLOAD_BYTES]);
            let crc = sector_crc(index, &sector[..SECTOR_PAYLOAD_BYTES]);
            sector[SECTOR_PAYLOAD_BYTES..].copy_from_slice(&crc.to_be_bytes());
        }
    }

    /// The append point after `batch` was written here.
    pub fn after(&self, batch: &EncodedBatch) -> AppendPoint {
        let next = self.next + batch.len() as u64;
        let head_start = Self::block_offset_for(next) / SECTOR_BYTES as u64 * SECTOR_PAYLOAD_BYTES as u64;
        let mut head = vec![0u8; (next - head_start) as usize];
        self.logical_into(Some(batch), head_start, &mut head);
        AppendPoint { next, head }
    }
}

/// What is wrong with a batch (or a sector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadBatch {
    /// A non-zero sector whose crc does not match: damage, never a torn write.
    SectorChecksum,
    /// The file ends inside a sector that is not all zeroes.
    PartialSector,
    /// The batch covers a sector that was never written (all zeroes).
    UnwrittenSector,
    BadMagic,
    /// A batch of another format version.
    Version(u32),
    BodyPastEnd {
        body_len: u64,
    },
    ChecksumMismatch,
    RecordFraming,
    HeaderMismatch,
    ZxidsNotSequential,
    /// Bytes after the end of the data (a zero header) that are not zero.
    DataAfterEnd,
    /// The end of the data (a zero header), followed by a valid batch further on.
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
            BadBatch::SectorChecksum => write!(
                f,
                "a {SECTOR_BYTES}-byte sector's checksum does not match (damage to written data, not an \
                 unfinished write)"
            ),
            BadBatch::PartialSector => write!(f, "the file ends inside a sector that holds data"),
            BadBatch::UnwrittenSector => write!(f, "the batch covers a sector that was never written"),
            BadBatch::BadMagic => write!(f, "bad batch magic"),
            BadBatch::Version(v) => {
                write!(f, "a batch of log format version {v}; this ringkeeper reads version {LOG_FORMAT_VERSION} only")
            }
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
                write!(f, "zeroes where a batch should be, followed by more batches")
            }
            BadBatch::FirstZxidMismatch { expected, found } => {
                write!(f, "zxid gap: expected zxid {expected:#x}, found {found:#x}")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogError {
    /// Damage that is not a torn tail: the server must not start. `file` is the segment's
    /// path as given to the scan, `offset` the byte of the file where the damage starts (a
    /// sector's start for a sector checksum, else the damaged batch's start).
    Corrupt { file: String, offset: u64, reason: BadBatch },
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Corrupt { file, offset, reason } => {
                let path = std::path::Path::new(file);
                let dir = path.parent().map(|p| p.display().to_string()).filter(|d| !d.is_empty());
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                write!(
                    f,
                    "txn log {file} is corrupt at byte {offset}: {reason}. Acknowledged txns may be damaged, so \
                     the server will not start, and it has not changed the file. Restore the file from a replica \
                     or backup, or cut the log before the damage (losing every txn from there on) with: \
                     ringkeeper log-truncate --log-dir {} --file {name} --offset {offset} --yes \
                     (it keeps a copy of the file and moves later segments aside)",
                    dir.as_deref().unwrap_or(".")
                )
            }
        }
    }
}

impl std::error::Error for LogError {}

/// A damaged batch cut off the tail of the last segment (a write that never completed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Logical offset where the torn batch starts (= `SegmentScan::end_offset`).
    pub offset: u64,
    /// Its file offset.
    pub file_offset: u64,
    pub reason: BadBatch,
    /// End of the last non-zero sector of the file: `[file_offset, garbage_end)` should be
    /// cleared (`clear_torn_tail` says how).
    pub garbage_end: u64,
}

impl TornTail {
    /// How to clear the torn bytes: the sector holding the cut rewritten with only the bytes
    /// before the cut (`Some((file offset, sector))`, when the cut is inside a sector), then
    /// zeroes over `[zero_from, garbage_end)`. `kept` is the logical bytes of that sector
    /// before the cut.
    pub fn clearing(&self, kept: &[u8]) -> (Option<(u64, [u8; SECTOR_BYTES])>, u64) {
        let index = self.offset / SECTOR_PAYLOAD_BYTES as u64;
        let within = (self.offset % SECTOR_PAYLOAD_BYTES as u64) as usize;
        if within == 0 {
            return (None, index * SECTOR_BYTES as u64);
        }
        let mut sector = [0u8; SECTOR_BYTES];
        seal_sector(index, &kept[..within.min(kept.len())], &mut sector);
        (Some((index * SECTOR_BYTES as u64, sector)), (index + 1) * SECTOR_BYTES as u64)
    }
}

/// One valid batch of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    /// Logical offset and length (padding included).
    pub offset: u64,
    pub len: u64,
    pub first_zxid: i64,
    pub last_zxid: i64,
}

impl BatchSpan {
    /// File offset of the batch's first byte.
    pub fn file_offset(&self) -> u64 {
        file_offset_of(self.offset)
    }

    /// File offset just past the batch's last byte.
    pub fn file_end(&self) -> u64 {
        file_offset_of(self.offset + self.len)
    }
}

/// What a segment holds.
#[derive(Debug)]
pub struct SegmentScan {
    /// Every record of every valid batch, in order (slices of the logical stream).
    pub records: Vec<Bytes>,
    /// Every valid batch, in order.
    pub batches: Vec<BatchSpan>,
    /// Logical offset where valid data ends: the next batch goes here.
    pub end_offset: u64,
    /// Set when a damaged batch at the tail was cut off.
    pub torn: Option<TornTail>,
    /// The logical bytes of the sector holding `end_offset`, up to it (to clear a torn tail).
    pub end_sector_head: Vec<u8>,
}

/// A sector as found on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sector {
    /// All zeroes: never written.
    Zero,
    Written,
    /// Non-zero with a bad crc (its file offset).
    Bad(u64),
    /// Non-zero and cut short by the end of the file (its file offset).
    Partial(u64),
}

/// A segment's sectors checked and their payloads laid end to end.
struct Stream {
    logical: Bytes,
    sectors: Vec<Sector>,
}

impl Stream {
    /// Reads the sectors of `data` up to its last non-zero one.
    fn new(data: &[u8]) -> Stream {
        let used = data.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let count = used.div_ceil(SECTOR_BYTES);
        let mut logical = Vec::with_capacity(count * SECTOR_PAYLOAD_BYTES);
        let mut sectors = Vec::with_capacity(count);
        for i in 0..count {
            let raw = &data[i * SECTOR_BYTES..((i + 1) * SECTOR_BYTES).min(data.len())];
            let state = if raw.iter().all(|b| *b == 0) {
                Sector::Zero
            } else if raw.len() < SECTOR_BYTES {
                Sector::Partial((i * SECTOR_BYTES) as u64)
            } else if be32(&raw[SECTOR_PAYLOAD_BYTES..]) != sector_crc(i as u64, &raw[..SECTOR_PAYLOAD_BYTES]) {
                Sector::Bad((i * SECTOR_BYTES) as u64)
            } else {
                Sector::Written
            };
            let payload = &raw[..raw.len().min(SECTOR_PAYLOAD_BYTES)];
            logical.extend_from_slice(payload);
            logical.resize((i + 1) * SECTOR_PAYLOAD_BYTES, 0);
            sectors.push(state);
        }
        Stream { logical: Bytes::from(logical), sectors }
    }

    fn first_bad(&self) -> Option<(u64, BadBatch)> {
        self.sectors.iter().find_map(|s| match s {
            Sector::Bad(off) => Some((*off, BadBatch::SectorChecksum)),
            Sector::Partial(off) => Some((*off, BadBatch::PartialSector)),
            _ => None,
        })
    }

    /// Checks every sector covering logical `[from, to)`.
    fn covered(&self, from: usize, to: usize) -> Result<(), BadBatch> {
        let p = SECTOR_PAYLOAD_BYTES;
        for s in from / p..to.div_ceil(p).min(self.sectors.len()) {
            match self.sectors[s] {
                Sector::Written => {}
                Sector::Zero => return Err(BadBatch::UnwrittenSector),
                Sector::Bad(_) => return Err(BadBatch::SectorChecksum),
                Sector::Partial(_) => return Err(BadBatch::PartialSector),
            }
        }
        Ok(())
    }
}

enum Batch {
    /// A valid batch: its records and its length in the stream.
    Valid(Vec<Bytes>, usize),
    /// A zero header (or only zeroes left): end of written data.
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

fn read_batch(st: &Stream, off: usize) -> Batch {
    let data = &st.logical;
    let header_end = (off + BATCH_HEADER_BYTES).min(data.len());
    if off >= data.len() || data[off..header_end].iter().all(|b| *b == 0) {
        return Batch::End;
    }
    if header_end < off + BATCH_HEADER_BYTES {
        return Batch::Bad(BadBatch::BodyPastEnd { body_len: 0 });
    }
    if let Err(e) = st.covered(off, header_end) {
        return Batch::Bad(e);
    }
    let h = &data[off..header_end];
    if h[0..4] != BATCH_MAGIC {
        return Batch::Bad(BadBatch::BadMagic);
    }
    let version = be32(&h[4..8]);
    if version != LOG_FORMAT_VERSION {
        return Batch::Bad(BadBatch::Version(version));
    }
    let crc = be32(&h[8..12]);
    let body_len = be32(&h[12..16]) as usize;
    let count = be32(&h[16..20]) as usize;
    let (first, last) = (be64(&h[24..32]), be64(&h[32..40]));
    let end = off + BATCH_HEADER_BYTES + body_len;
    if end > data.len() {
        return Batch::Bad(BadBatch::BodyPastEnd { body_len: body_len as u64 });
    }
    if let Err(e) = st.covered(off, end) {
        return Batch::Bad(e);
    }
    if crc32c::crc32c(&data[off + BATCH_CRC_FROM..end]) != crc {
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
    Batch::Valid(records, (end - off).next_multiple_of(BATCH_ALIGN_BYTES))
}

/// True if a valid batch starts at some aligned logical offset at or after `from`.
fn valid_batch_after(st: &Stream, from: usize) -> bool {
    let data = &st.logical;
    let mut off = from.next_multiple_of(BATCH_ALIGN_BYTES);
    while off + BATCH_HEADER_BYTES <= data.len() {
        if data[off..off + 4] == BATCH_MAGIC && matches!(read_batch(st, off), Batch::Valid(..)) {
            return true;
        }
        off += BATCH_ALIGN_BYTES;
    }
    false
}

/// Reads a segment from its bytes. Errors name no file; recovery uses `scan_segment_file`.
pub fn scan_segment(bytes: &[u8], is_last_segment: bool) -> Result<SegmentScan, LogError> {
    scan_segment_file("", bytes, is_last_segment, None)
}

/// The valid batches at the start of a segment, whatever follows them (never an error): what
/// the operator's `log-truncate` keeps, and what tools can still show of a damaged file.
/// Returns the scan (no torn tail) and where and why reading stopped, if not at a clean end.
pub fn scan_valid_prefix(data: &[u8], expected_first_zxid: Option<i64>) -> (SegmentScan, Option<(u64, BadBatch)>) {
    let st = Stream::new(data);
    let (scan, stop) = walk(&st, expected_first_zxid);
    let stop = stop.map(|(off, reason)| {
        let file_off = match reason {
            BadBatch::SectorChecksum | BadBatch::PartialSector => st.first_bad().map_or(off, |b| b.0),
            _ => off,
        };
        (file_off, reason)
    });
    (scan, stop)
}

/// Walks the valid batches from the start; stops at the end of the data or at the first bad
/// batch, returning its file offset and what is wrong.
fn walk(st: &Stream, expected_first_zxid: Option<i64>) -> (SegmentScan, Option<(u64, BadBatch)>) {
    let mut off = 0usize;
    let mut records: Vec<Bytes> = Vec::new();
    let mut batches = Vec::new();
    let mut next = expected_first_zxid;
    let stop = loop {
        match read_batch(st, off) {
            Batch::Valid(batch, len) => {
                let first = record_zxid(&batch[0]).unwrap_or(-1);
                if let Some(n) = next {
                    if first != n {
                        break Some((off, BadBatch::FirstZxidMismatch { expected: n, found: first }));
                    }
                }
                next = Some(first.wrapping_add(batch.len() as i64));
                batches.push(BatchSpan {
                    offset: off as u64,
                    len: len as u64,
                    first_zxid: first,
                    last_zxid: first.wrapping_add(batch.len() as i64 - 1),
                });
                records.extend(batch);
                off += len;
            }
            Batch::End => break None,
            Batch::Bad(reason) => break Some((off, reason)),
        }
    };
    let within = off % SECTOR_PAYLOAD_BYTES;
    let head = st.logical.get(off - within..off).map(|s| s.to_vec()).unwrap_or_default();
    let scan = SegmentScan { records, batches, end_offset: off as u64, torn: None, end_sector_head: head };
    (scan, stop.map(|(o, r)| (file_offset_of(o as u64), r)))
}

/// Reads a segment (its whole file, `data`). `expected_first_zxid` is the zxid its first
/// record must have (the one in its name). See the module comment for the sector rule and the
/// torn-tail rule.
pub fn scan_segment_file(
    file: &str,
    data: &[u8],
    is_last_segment: bool,
    expected_first_zxid: Option<i64>,
) -> Result<SegmentScan, LogError> {
    let corrupt = |offset: u64, reason: BadBatch| LogError::Corrupt { file: file.to_string(), offset, reason };
    let st = Stream::new(data);
    if let Some((offset, reason)) = st.first_bad() {
        // A version-1 segment (block-aligned batches, no sectors: an older build's) starts
        // with the magic, its batch crc and body length: say so rather than "damaged".
        let v1_body_end = (data.len() >= 32).then(|| 32 + be32(&data[8..12]) as usize);
        let v1 = offset == 0
            && data[..4.min(data.len())] == BATCH_MAGIC
            && v1_body_end.is_some_and(|e| e <= data.len() && crc32c::crc32c(&data[8..e]) == be32(&data[4..8]));
        return Err(corrupt(offset, if v1 { BadBatch::Version(1) } else { reason }));
    }
    let (mut scan, stop) = walk(&st, expected_first_zxid);
    let off = scan.end_offset as usize;
    let reason = match stop {
        None => {
            // A zero header: the end, if nothing but zeroes follows.
            if valid_batch_after(&st, off + BATCH_ALIGN_BYTES) {
                return Err(corrupt(file_offset_of(off as u64), BadBatch::HoleBeforeData));
            }
            if st.logical.get(off..).is_none_or(|rest| rest.iter().all(|b| *b == 0)) {
                return Ok(scan);
            }
            BadBatch::DataAfterEnd
        }
        Some((file_off, reason @ BadBatch::FirstZxidMismatch { .. })) => return Err(corrupt(file_off, reason)),
        Some((file_off, reason)) => {
            if valid_batch_after(&st, off + BATCH_ALIGN_BYTES) {
                return Err(corrupt(file_off, reason));
            }
            reason
        }
    };
    let file_offset = file_offset_of(off as u64);
    if !is_last_segment {
        return Err(corrupt(file_offset, reason));
    }
    let garbage_end = st.sectors.iter().rposition(|s| *s != Sector::Zero).map_or(0, |i| (i + 1) * SECTOR_BYTES);
    scan.torn = Some(TornTail { offset: off as u64, file_offset, reason, garbage_end: garbage_end as u64 });
    Ok(scan)
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

    fn batch_of(range: std::ops::Range<i64>, size: usize) -> EncodedBatch {
        let mut enc = BatchEncoder::new();
        for z in range {
            enc.push(rec_sized(z, size));
        }
        enc.finish()
    }

    /// A file as the writer leaves it after appending `batches` one at a time, `file_len`
    /// bytes long (zero-filled), and the append point after them.
    fn written(batches: &[EncodedBatch], file_len: usize) -> (Vec<u8>, AppendPoint) {
        let mut file = vec![0u8; file_len];
        let mut at = AppendPoint::start();
        for b in batches {
            write_at(&mut file, &at, b);
            at = at.after(b);
        }
        (file, at)
    }

    /// What one append writes, applied whole to `file`.
    fn write_at(file: &mut Vec<u8>, at: &AppendPoint, b: &EncodedBatch) {
        let (off, len) = (at.write_offset() as usize, at.write_len(b.len()));
        if file.len() < off + len {
            file.resize(off + len, 0);
        }
        at.fill(b, 0, &mut file[off..off + len]);
    }

    fn segment(batches: &[std::ops::Range<i64>], tail_zeroes: usize) -> Vec<u8> {
        let encoded: Vec<EncodedBatch> = batches.iter().map(|b| batch_of(b.clone(), 100)).collect();
        let (mut file, at) = written(&encoded, 0);
        file.truncate(align_up(file_len_for(at.next_offset()) as usize));
        file.extend(vec![0u8; tail_zeroes]);
        file
    }

    fn scan(seg: &[u8], last: bool) -> Result<SegmentScan, LogError> {
        scan_segment_file("log.test", seg, last, Some(1))
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
    fn batches_round_trip_pack_and_end_at_zeroes() {
        let seg = segment(&[1..4, 4..5, 5..40], 3 * LOG_BLOCK_BYTES);
        assert_eq!(seg.len() % LOG_BLOCK_BYTES, 0);
        let s = scan(&seg, true).unwrap();
        assert_eq!(s.records.len(), 39);
        assert_eq!(s.torn, None);
        // Packed: each batch starts right after the previous one.
        let lens: Vec<u64> = s.batches.iter().map(|b| b.len).collect();
        assert_eq!(s.batches.iter().map(|b| b.offset).collect::<Vec<_>>(), vec![0, lens[0], lens[0] + lens[1]]);
        assert_eq!(s.end_offset, lens.iter().sum::<u64>());
        for (i, r) in s.records.iter().enumerate() {
            assert_eq!(codec::decode(r.clone()).unwrap().header.zxid, i as i64 + 1);
        }
        // The writer's layout is the plain sector layout of the stream.
        let mut stream = Vec::new();
        for b in [1..4, 4..5, 5..40] {
            stream.extend(batch_of(b, 100).to_vec());
        }
        assert_eq!(&seg[..align_up(file_len_for(stream.len() as u64) as usize)], &sectorize(&stream)[..]);
        let plain = scan_segment(&seg, false).unwrap();
        assert_eq!(plain.records.len(), 39);
        assert_eq!(scan_segment(&[], true).unwrap().end_offset, 0);
    }

    #[test]
    fn an_append_point_reads_back_from_its_block() {
        let batches: Vec<EncodedBatch> = (0..30).map(|i| batch_of(i + 1..i + 2, 37 * i as usize)).collect();
        let mut file = Vec::new();
        let mut at = AppendPoint::start();
        for b in &batches {
            write_at(&mut file, &at, b);
            at = at.after(b);
            let off = at.write_offset() as usize;
            let block = &file[off.min(file.len())..(off + LOG_BLOCK_BYTES).min(file.len())];
            assert_eq!(AppendPoint::from_block(at.next_offset(), block).unwrap(), at);
        }
        let s = scan(&file, true).unwrap();
        assert_eq!((s.records.len(), s.end_offset), (30, at.next_offset()));
        // A damaged sector before the append point is refused.
        let off = at.write_offset() as usize;
        let mut block = file[off..off + LOG_BLOCK_BYTES].to_vec();
        block[3] ^= 1;
        assert!(at.next_offset() > off as u64 / 512 * 508, "the tail block holds data");
        assert_eq!(AppendPoint::from_block(at.next_offset(), &block), Err(BadBatch::SectorChecksum));
    }

    /// A write that failed on a full disk after its first block leaves a batch header whose
    /// body is missing. At the log's end that is a torn write, cut at start-up; in a segment
    /// closed after it (a roll), damage. Clearing the failed write's range with `fill_cleared`
    /// leaves the segment ending cleanly at the acknowledged data, wherever it is.
    #[test]
    fn clearing_a_failed_write_leaves_only_the_acknowledged_batches() {
        for (before, failed_size) in [(vec![1..4], 30_000), (vec![1..2, 2..9], 5_000), (vec![1..2], 2_000)] {
            let done: Vec<EncodedBatch> = before.iter().map(|r| batch_of(r.clone(), 300)).collect();
            let (mut file, at) = written(&done, 0);
            let next = done.last().map_or(1, |b| b.last_zxid() + 1);
            let failed = batch_of(next..next + 3, failed_size);
            let (off, len) = (at.write_offset() as usize, at.write_len(failed.len()));
            assert!(len > LOG_BLOCK_BYTES, "the failed write spans blocks");
            let mut torn = vec![0u8; len];
            at.fill(&failed, 0, &mut torn);
            // Only the first block made it (a short write), and the file grew to hold it.
            file.resize(off + LOG_BLOCK_BYTES, 0);
            file[off..off + LOG_BLOCK_BYTES].copy_from_slice(&torn[..LOG_BLOCK_BYTES]);
            let last = scan(&file, true).unwrap();
            assert!(last.torn.is_some(), "a torn write at the log's end");
            assert!(matches!(scan(&file, false), Err(LogError::Corrupt { .. })), "damage in a closed segment");

            let end = file.len();
            at.fill_cleared(0, &mut file[off..end]);
            for is_last in [true, false] {
                let s = scan(&file, is_last).unwrap();
                assert_eq!(s.torn, None);
                assert_eq!(s.end_offset, at.next_offset());
                assert_eq!(s.records.len(), done.iter().map(|b| b.record_count()).sum::<usize>());
            }
            // The next append goes on from the same point.
            write_at(&mut file, &at, &failed);
            assert_eq!(scan(&file, false).unwrap().records.len(), last.records.len() + 3);
        }
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
        assert_eq!(batch.len() % BATCH_ALIGN_BYTES, 0);
        let whole = batch.to_vec();
        // The batch crc equals a direct computation over the contiguous bytes.
        let body_len = be32(&whole[12..16]) as usize;
        assert_eq!(crc32c::crc32c(&whole[BATCH_CRC_FROM..BATCH_HEADER_BYTES + body_len]), be32(&whole[8..12]));
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
        // Filling the write in pieces gives the same bytes as in one go.
        let at = AppendPoint::start();
        let len = at.write_len(batch.len());
        let mut one = vec![0u8; len];
        at.fill(&batch, 0, &mut one);
        let mut pieces = vec![0u8; len];
        for (i, c) in pieces.chunks_mut(3 * SECTOR_BYTES).enumerate() {
            at.fill(&batch, i * 3 * SECTOR_BYTES, c);
        }
        assert_eq!(one, pieces);
        let s = scan(&one, true);
        assert!(matches!(
            s,
            Err(LogError::Corrupt { reason: BadBatch::FirstZxidMismatch { expected: 1, found: 10 }, .. })
        ));
        let s = scan_segment(&one, true).unwrap();
        assert_eq!(s.records, recs);
    }

    #[test]
    #[should_panic(expected = "not contiguous")]
    fn encoder_rejects_a_gap() {
        let mut enc = BatchEncoder::new();
        enc.push(rec(1));
        enc.push(rec(3));
    }

    /// Every single-bit flip anywhere in a segment (its batches, the crcs, the packed tail
    /// sector, the zero-filled space after the data) is corruption at the flipped sector: never
    /// a torn write, never cut (the old format took damage to the last batch for a torn write).
    #[test]
    fn hardening_3_every_single_bit_flip_is_corruption_at_its_sector() {
        let seg = segment(&[1..3, 3..6, 6..7], LOG_BLOCK_BYTES);
        let good = scan(&seg, true).unwrap();
        assert_eq!(good.records.len(), 6);
        for byte in 0..seg.len() {
            for bit in 0..8 {
                let mut bad = seg.clone();
                bad[byte] ^= 1 << bit;
                match scan(&bad, true) {
                    Err(LogError::Corrupt { file, offset, reason }) => {
                        assert_eq!(file, "log.test");
                        assert_eq!(offset as usize, byte / SECTOR_BYTES * SECTOR_BYTES, "byte {byte} bit {bit}");
                        assert_eq!(reason, BadBatch::SectorChecksum, "byte {byte} bit {bit}");
                    }
                    Ok(s) => panic!("byte {byte} bit {bit}: accepted ({} records, torn {:?})", s.records.len(), s.torn),
                }
            }
        }
        let mut bad = seg.clone();
        bad[good.batches[2].file_offset() as usize + 20] ^= 4;
        let msg = scan(&bad, true).unwrap_err().to_string();
        assert!(msg.contains("log.test") && msg.contains("log-truncate") && msg.contains("--offset"), "{msg}");
    }

    /// A write that never completed: the sectors it covers are each left at their old version
    /// (all zero, or the earlier, valid contents of the packed tail sector) or the new one, in
    /// any combination. That is always a cut torn tail (or the whole batch, if every sector
    /// made it), never corruption, and the batches before it always read back, because a
    /// rewritten sector's old version holds the same acknowledged bytes.
    #[test]
    fn hardening_3_any_torn_write_is_cut_never_corrupt_and_earlier_batches_survive() {
        for (earlier_size, torn_size) in [(300usize, 500usize), (5, 200), (1500, 600)] {
            let earlier = [batch_of(1..3, earlier_size), batch_of(3..4, earlier_size)];
            let (old, at) = written(&earlier, 4 * LOG_BLOCK_BYTES);
            let torn = batch_of(4..8, torn_size);
            let mut new = old.clone();
            write_at(&mut new, &at, &torn);
            let changed: Vec<usize> = (0..old.len() / SECTOR_BYTES)
                .filter(|&s| old[s * 512..(s + 1) * 512] != new[s * 512..(s + 1) * 512])
                .collect();
            assert!((2..=12).contains(&changed.len()), "{} sectors change", changed.len());
            assert!(
                changed.iter().any(|&s| old[s * 512..(s + 1) * 512].iter().any(|b| *b != 0)),
                "the tail sector is rewritten"
            );
            for mask in 0u32..(1 << changed.len()) {
                let mut file = old.clone();
                for (k, &s) in changed.iter().enumerate() {
                    if mask & (1 << k) != 0 {
                        file[s * 512..(s + 1) * 512].copy_from_slice(&new[s * 512..(s + 1) * 512]);
                    }
                }
                let s = scan(&file, true).unwrap_or_else(|e| panic!("mask {mask:b}: {e}"));
                let all = mask == (1 << changed.len()) - 1;
                if all {
                    assert_eq!((s.records.len(), s.torn.as_ref()), (7, None));
                    continue;
                }
                assert_eq!(s.records.len(), 3, "mask {mask:b}");
                assert_eq!(s.end_offset, at.next_offset());
                if mask != 0 {
                    let t = s.torn.as_ref().unwrap_or_else(|| panic!("mask {mask:b}: no torn tail"));
                    assert_eq!(t.offset, at.next_offset());
                    // Clearing the tail as recovery does gives the file before the write.
                    let (reseal, zero_from) = t.clearing(&s.end_sector_head);
                    if let Some((off, sector)) = reseal {
                        file[off as usize..off as usize + SECTOR_BYTES].copy_from_slice(&sector);
                    }
                    file[zero_from as usize..t.garbage_end as usize].fill(0);
                    assert_eq!(file, old, "mask {mask:b}");
                }
                // The same in an older segment is corruption.
                if mask != 0 {
                    assert!(scan(&file_with(&old, &new, &changed, mask), false).is_err());
                }
            }
        }
    }

    fn file_with(old: &[u8], new: &[u8], changed: &[usize], mask: u32) -> Vec<u8> {
        let mut file = old.to_vec();
        for (k, &s) in changed.iter().enumerate() {
            if mask & (1 << k) != 0 {
                file[s * 512..(s + 1) * 512].copy_from_slice(&new[s * 512..(s + 1) * 512]);
            }
        }
        file
    }

    #[test]
    fn damage_that_no_torn_write_makes_is_corruption() {
        // A valid batch after a bad one (sectors all valid: written with a wrong crc).
        let mut stream = Vec::new();
        stream.extend(batch_of(1..3, 100).to_vec());
        let second = stream.len();
        let mut b = batch_of(3..5, 100).to_vec();
        b[8] ^= 1; // the batch crc
        stream.extend(b);
        stream.extend(batch_of(5..6, 100).to_vec());
        match scan(&sectorize(&stream), true) {
            Err(LogError::Corrupt { offset, reason, .. }) => {
                assert_eq!(offset, file_offset_of(second as u64));
                assert_eq!(reason, BadBatch::ChecksumMismatch);
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        // The same at the end of the last segment is a torn tail (cut), elsewhere corruption.
        let last_only = sectorize(&stream[..stream.len() - batch_of(5..6, 100).len()]);
        assert!(scan(&last_only, true).unwrap().torn.is_some());
        assert!(matches!(scan(&last_only, false), Err(LogError::Corrupt { .. })));
        // A zero header, then more batches: a hole.
        let mut holed = batch_of(1..3, 100).to_vec();
        holed.extend(vec![0u8; 64]);
        holed.extend(batch_of(3..5, 100).to_vec());
        assert!(matches!(
            scan(&sectorize(&holed), true),
            Err(LogError::Corrupt { reason: BadBatch::HoleBeforeData, .. })
        ));
        // A zxid gap.
        assert!(matches!(
            scan(&segment(&[1..3, 4..6], 0), true),
            Err(LogError::Corrupt { reason: BadBatch::FirstZxidMismatch { expected: 3, found: 4 }, .. })
        ));
        // A file cut inside a sector that holds data.
        let seg = segment(&[1..8], 0);
        let cut = scan(&seg[..700], true).unwrap_err();
        assert!(matches!(cut, LogError::Corrupt { offset: 512, reason: BadBatch::PartialSector, .. }), "{cut:?}");
        // Another version's batch is refused, not cut; so is a version-1 segment (an older
        // build's: no sectors, the batch crc where the version is).
        let mut v3 = batch_of(1..3, 100).to_vec();
        v3[4..8].copy_from_slice(&3u32.to_be_bytes());
        let e = scan(&sectorize(&v3), false).unwrap_err();
        assert!(matches!(e, LogError::Corrupt { reason: BadBatch::Version(3), .. }), "{e:?}");
        let mut v1 = vec![0u8; 32];
        v1[..4].copy_from_slice(&BATCH_MAGIC);
        v1[8..12].copy_from_slice(&(rec(1).len() as u32 + 4).to_be_bytes());
        v1[12..16].copy_from_slice(&1u32.to_be_bytes());
        v1[16..24].copy_from_slice(&1i64.to_be_bytes());
        v1[24..32].copy_from_slice(&1i64.to_be_bytes());
        v1.extend((rec(1).len() as u32).to_be_bytes());
        v1.extend(rec(1).to_vec());
        let crc = crc32c::crc32c(&v1[8..]);
        v1[4..8].copy_from_slice(&crc.to_be_bytes());
        v1.resize(4096, 0);
        let e = scan(&v1, true).unwrap_err();
        assert!(matches!(e, LogError::Corrupt { offset: 0, reason: BadBatch::Version(1), .. }), "{e:?}");
    }

    #[test]
    fn the_valid_prefix_of_a_damaged_segment() {
        let mut seg = segment(&[1..3, 3..6, 6..9], LOG_BLOCK_BYTES);
        let s = scan(&seg, true).unwrap();
        let damaged_at = s.batches[1].file_offset() as usize + 600;
        seg[damaged_at] ^= 1;
        let (prefix, stop) = scan_valid_prefix(&seg, Some(1));
        assert_eq!(prefix.records.len(), 2);
        assert_eq!(stop, Some(((damaged_at / 512 * 512) as u64, BadBatch::SectorChecksum)));
        let (whole, stop) = scan_valid_prefix(&segment(&[1..3], 0), Some(1));
        assert_eq!((whole.records.len(), stop), (2, None));
    }

    #[test]
    fn a_segment_cut_after_a_batch_that_ends_in_its_last_sector_padding_scans() {
        // A one-record batch whose body ends exactly at the first sector's payload end: its
        // 8-byte alignment padding is in the second sector. A file cut after the first sector
        // (an external truncation) leaves the next batch offset past the logical stream's end.
        let size = (0..600)
            .find(|n| BATCH_HEADER_BYTES + RECORD_PREFIX_BYTES + rec_sized(1, *n).len() == SECTOR_PAYLOAD_BYTES);
        let size = size.expect("a record size that ends the batch at the sector's payload end");
        let file = sectorize(&encode_batch(&[rec_sized(1, size)]));
        let cut = &file[..SECTOR_BYTES];
        let s = scan(cut, true).expect("one whole batch");
        assert_eq!(s.records.len(), 1);
        let (prefix, stop) = scan_valid_prefix(cut, Some(1));
        assert_eq!((prefix.records.len(), stop), (1, None));
    }

    proptest::proptest! {
        #[test]
        fn scanning_random_bytes_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..9000), last in proptest::prelude::any::<bool>()) {
            let _ = scan_segment(&bytes, last);
            let _ = scan_valid_prefix(&bytes, None);
        }

        #[test]
        fn sealed_random_sectors_never_panic(stream in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..6000), last in proptest::prelude::any::<bool>()) {
            let _ = scan_segment(&sectorize(&stream), last);
        }

        #[test]
        fn a_flipped_byte_is_always_corruption(pos in 0usize..20_000, flip in 1u8..=255) {
            let seg = segment(&[1..3, 3..40, 40..41], LOG_BLOCK_BYTES);
            let pos = pos % seg.len();
            let mut bad = seg.clone();
            bad[pos] ^= flip;
            let corrupt = matches!(scan(&bad, true), Err(LogError::Corrupt { .. }));
            proptest::prop_assert!(corrupt, "pos {} flip {}", pos, flip);
        }
    }
}
