//! Reading the txn log format of older builds (version 1), so that an upgrade never finds its
//! data directory unreadable: recovery rewrites each version-1 segment into the current format
//! (`truncate::upgrade_v1_segments`) before it reads the log.
//! Version 1: batches start on 4 KiB boundaries, a 32-byte header (magic "RKLB", CRC-32C of
//! bytes 8 .. end of body, body length, record count, first zxid, last zxid) and
//! `{len u32, record}` records; no sectors. Rules: read-only and sans-IO; the format could not
//! tell a torn write from a flipped bit in the last batch, so a bad batch with nothing valid
//! after it in the last segment is taken as torn, exactly as the build that wrote it did; any
//! other damage is an error naming the file and byte.

use super::log::{BATCH_MAGIC, LOG_BLOCK_BYTES, RECORD_BYTES_MIN, RECORD_PREFIX_BYTES};
use crate::txn::codec::record_zxid;
use bytes::Bytes;

/// Batch header of version 1.
pub const V1_BATCH_HEADER_BYTES: usize = 32;

fn be32(s: &[u8]) -> u32 {
    u32::from_be_bytes([s[0], s[1], s[2], s[3]])
}

fn be64(s: &[u8]) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[..8]);
    i64::from_be_bytes(b)
}

/// Whether `data` (a whole segment file) starts with a valid version-1 batch.
pub fn is_v1_segment(data: &[u8]) -> bool {
    matches!(read_batch(data, 0), Batch::Valid(..))
}

enum Batch {
    Valid(Vec<Bytes>, usize),
    End,
    Bad(&'static str),
}

fn read_batch(data: &[u8], off: usize) -> Batch {
    if off + V1_BATCH_HEADER_BYTES > data.len() {
        return Batch::End;
    }
    let h = &data[off..off + V1_BATCH_HEADER_BYTES];
    if h.iter().all(|b| *b == 0) {
        return Batch::End;
    }
    if h[0..4] != BATCH_MAGIC {
        return Batch::Bad("bad batch magic");
    }
    let body_len = be32(&h[8..12]) as usize;
    let count = be32(&h[12..16]) as usize;
    let (first, last) = (be64(&h[16..24]), be64(&h[24..32]));
    let Some(end) = (off + V1_BATCH_HEADER_BYTES).checked_add(body_len).filter(|e| *e <= data.len()) else {
        return Batch::Bad("batch body runs past the end of the file");
    };
    if crc32c::crc32c(&data[off + 8..end]) != be32(&h[4..8]) {
        return Batch::Bad("batch checksum mismatch");
    }
    let mut records = Vec::new();
    let mut pos = off + V1_BATCH_HEADER_BYTES;
    while pos < end {
        if pos + RECORD_PREFIX_BYTES > end {
            return Batch::Bad("records do not fill the batch body");
        }
        let len = be32(&data[pos..]) as usize;
        let start = pos + RECORD_PREFIX_BYTES;
        if len < RECORD_BYTES_MIN || len > end - start {
            return Batch::Bad("records do not fill the batch body");
        }
        records.push(Bytes::copy_from_slice(&data[start..start + len]));
        pos = start + len;
    }
    if count == 0 || records.len() != count || last.wrapping_sub(first).wrapping_add(1) != count as i64 {
        return Batch::Bad("batch header does not match its records");
    }
    if records.iter().enumerate().any(|(i, r)| record_zxid(r) != Some(first.wrapping_add(i as i64))) {
        return Batch::Bad("record zxids do not follow the batch header");
    }
    Batch::Valid(records, (V1_BATCH_HEADER_BYTES + body_len).div_ceil(LOG_BLOCK_BYTES) * LOG_BLOCK_BYTES)
}

/// Whether a valid batch starts at some block boundary at or after `from`.
fn valid_batch_after(data: &[u8], from: usize) -> bool {
    (from..data.len())
        .step_by(LOG_BLOCK_BYTES)
        .any(|off| data[off..].starts_with(&BATCH_MAGIC) && matches!(read_batch(data, off), Batch::Valid(..)))
}

/// Every record of a version-1 segment, under the rules its writer kept (see the file
/// comment). The error names the byte offset and what is wrong.
pub fn read_records(data: &[u8], is_last_segment: bool) -> Result<Vec<Bytes>, String> {
    let mut records = Vec::new();
    let mut off = 0;
    loop {
        let reason = match read_batch(data, off) {
            Batch::Valid(batch, len) => {
                if let (Some(prev), Some(next)) =
                    (records.last().and_then(|r: &Bytes| record_zxid(r)), record_zxid(&batch[0]))
                {
                    if next != prev + 1 && !super::log::zxid_follows(prev, next) {
                        return Err(format!("byte {off}: zxid {next:#x} does not follow {prev:#x}"));
                    }
                }
                records.extend(batch);
                off += len;
                continue;
            }
            Batch::End => {
                if !valid_batch_after(data, off + LOG_BLOCK_BYTES)
                    && data[off.min(data.len())..].iter().all(|b| *b == 0)
                {
                    return Ok(records);
                }
                "data after the end of the log"
            }
            Batch::Bad(reason) => reason,
        };
        if !is_last_segment || valid_batch_after(data, off + LOG_BLOCK_BYTES) {
            return Err(format!("byte {off}: {reason}"));
        }
        // The tail of the last segment: a batch whose write never completed (version 1 cannot
        // tell it from damage; its writer cut it the same way). Nothing valid follows.
        return Ok(records);
    }
}

/// A version-1 segment of `batches` (each a list of records): what an older build wrote. For
/// tests of the upgrade.
#[cfg(test)]
pub fn encode_v1_segment(batches: &[Vec<Bytes>]) -> Vec<u8> {
    let mut out = Vec::new();
    for records in batches {
        let mut body = Vec::new();
        for r in records {
            body.extend_from_slice(&(r.len() as u32).to_be_bytes());
            body.extend_from_slice(r);
        }
        let first = record_zxid(&records[0]).unwrap_or(0);
        let mut h = Vec::with_capacity(V1_BATCH_HEADER_BYTES);
        h.extend_from_slice(&BATCH_MAGIC);
        h.extend_from_slice(&[0; 4]);
        h.extend_from_slice(&(body.len() as u32).to_be_bytes());
        h.extend_from_slice(&(records.len() as u32).to_be_bytes());
        h.extend_from_slice(&first.to_be_bytes());
        h.extend_from_slice(&(first + records.len() as i64 - 1).to_be_bytes());
        h.extend_from_slice(&body);
        let crc = crc32c::crc32c(&h[8..]);
        h[4..8].copy_from_slice(&crc.to_be_bytes());
        out.extend_from_slice(&h);
        out.resize(out.len().div_ceil(LOG_BLOCK_BYTES) * LOG_BLOCK_BYTES, 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(z: i64) -> Bytes {
        let mut r = z.to_be_bytes().to_vec();
        r.extend_from_slice(b"payload");
        Bytes::from(r)
    }

    #[test]
    fn reads_what_an_older_build_wrote_and_its_torn_tail() {
        let seg = encode_v1_segment(&[vec![rec(1), rec(2)], vec![rec(3)]]);
        assert!(is_v1_segment(&seg));
        let got = read_records(&seg, true).unwrap();
        assert_eq!(got, vec![rec(1), rec(2), rec(3)]);
        // A damaged last batch: torn in the last segment, an error in any other.
        let mut torn = seg.clone();
        let at = LOG_BLOCK_BYTES + 40;
        torn[at] ^= 1;
        assert_eq!(read_records(&torn, true).unwrap(), vec![rec(1), rec(2)]);
        assert!(read_records(&torn, false).unwrap_err().starts_with("byte 4096"));
        // Damage with a valid batch after it is never torn.
        let mut bad = seg.clone();
        bad[40] ^= 1;
        assert!(read_records(&bad, true).unwrap_err().starts_with("byte 0"));
        assert!(!is_v1_segment(&bad));
        assert!(!is_v1_segment(&[0u8; 4096]));
    }
}
