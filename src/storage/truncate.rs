//! Cutting the txn log after a zxid: ZAB's TRUNC, when a follower holds txns its new leader
//! never had (they were never committed).
//! Rules:
//! - Later segments go first, newest first, each removal made durable before the next, so a
//!   crash always leaves a valid log: the old one or a prefix of it. Ending up with the
//!   uncut log is safe, because the caller acknowledges nothing that relies on the cut before
//!   this returns.
//! - The segment holding the cut is rewritten into `<segment>.trunc`, fsynced, renamed over the
//!   original and the directory fsynced; a stale `.trunc` file is removed by recovery.
//! - Only records after `after` go; the caller guarantees none of them is committed.

use super::files::{fsync_dir, list_segments, segment_index_for};
use super::log::{align_up, scan_segment_file, BatchEncoder, LogError};
use super::recovery::LogTail;
use crate::txn::codec::record_zxid;
use bytes::Bytes;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Suffix of the rewritten segment before it replaces the original.
pub const TRUNC_TMP_SUFFIX: &str = ".trunc";
/// Body bytes per batch when a segment is rewritten.
const REWRITE_BATCH_BYTES_MAX: usize = 1024 * 1024;

#[derive(Debug)]
pub enum TruncateError {
    Io { path: PathBuf, err: io::Error },
    Log(LogError),
}

impl fmt::Display for TruncateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TruncateError::Io { path, err } => write!(f, "truncating the txn log: {}: {err}", path.display()),
            TruncateError::Log(e) => write!(f, "truncating the txn log: {e}"),
        }
    }
}

impl std::error::Error for TruncateError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> TruncateError + '_ {
    move |err| TruncateError::Io { path: path.to_path_buf(), err }
}

/// Removes every logged txn after `after`; returns where the next batch goes.
pub fn truncate_log(log_dir: &Path, after: i64) -> Result<LogTail, TruncateError> {
    let segments = list_segments(log_dir).map_err(io_err(log_dir))?;
    let keep = segment_index_for(&segments, after);
    let first_gone = keep.map_or(0, |i| i + 1);
    for (_, path) in segments[first_gone..].iter().rev() {
        fs::remove_file(path).map_err(io_err(path))?;
        fsync_dir(log_dir).map_err(io_err(log_dir))?;
    }
    let Some(i) = keep else { return Ok(LogTail { segment: None, next_offset: 0 }) };
    let (first, path) = &segments[i];
    let name = path.display().to_string();
    let data = fs::read(path).map_err(io_err(path))?;
    let scan = scan_segment_file(&name, Bytes::from(data), true, Some(*first)).map_err(TruncateError::Log)?;
    let total = scan.records.len();
    let kept: Vec<Bytes> =
        scan.records.into_iter().take_while(|r| record_zxid(r).is_some_and(|z| z <= after)).collect();
    if kept.len() == total {
        return Ok(LogTail { segment: Some(path.clone()), next_offset: scan.end_offset });
    }
    if kept.is_empty() {
        fs::remove_file(path).map_err(io_err(path))?;
        fsync_dir(log_dir).map_err(io_err(log_dir))?;
        return Ok(LogTail { segment: None, next_offset: 0 });
    }
    let bytes = encode_batches(kept);
    let tmp = PathBuf::from(format!("{}{TRUNC_TMP_SUFFIX}", path.display()));
    {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io_err(&tmp))?;
        f.write_all(&bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    fsync_dir(log_dir).map_err(io_err(log_dir))?;
    Ok(LogTail { segment: Some(path.clone()), next_offset: bytes.len() as u64 })
}

/// `records` as block-aligned batches of at most `REWRITE_BATCH_BYTES_MAX` body bytes.
fn encode_batches(records: Vec<Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = BatchEncoder::new();
    for r in records {
        if !enc.is_empty() && enc.encoded_len() + r.len() > REWRITE_BATCH_BYTES_MAX {
            flush(&mut out, std::mem::replace(&mut enc, BatchEncoder::new()));
        }
        enc.push(r);
    }
    if !enc.is_empty() {
        flush(&mut out, enc);
    }
    out
}

fn flush(out: &mut Vec<u8>, enc: BatchEncoder) {
    let batch = enc.finish().to_vec();
    let padded = align_up(batch.len());
    out.extend_from_slice(&batch);
    out.resize(out.len() + padded - batch.len(), 0);
}

/// Removes `log.*.trunc` files a crash left behind (before any writer runs).
pub fn remove_stale_truncations(log_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(log_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(super::log::SEGMENT_PREFIX) && name.ends_with(TRUNC_TMP_SUFFIX) {
            fs::remove_file(entry.path())?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::files::tests::TempDir;
    use crate::storage::log::segment_name;

    /// A record: its zxid and some bytes (storage only reads the zxid prefix).
    fn rec(z: i64) -> Bytes {
        let mut v = z.to_be_bytes().to_vec();
        v.extend_from_slice(&[z as u8; 5]);
        Bytes::from(v)
    }

    /// A segment file holding batches of the given zxid runs.
    fn write_segment(dir: &Path, batches: &[std::ops::RangeInclusive<i64>]) {
        let mut out = Vec::new();
        for b in batches {
            let mut enc = BatchEncoder::new();
            for z in b.clone() {
                enc.push(rec(z));
            }
            flush(&mut out, enc);
        }
        out.resize(out.len() + 3 * 4096, 0); // preallocated space
        fs::write(dir.join(segment_name(*batches[0].start())), out).unwrap();
    }

    /// Every zxid left in the log, segment by segment, and the tail of the last one.
    fn zxids(dir: &Path) -> Vec<i64> {
        let segs = list_segments(dir).unwrap();
        let mut out = Vec::new();
        for (i, (first, p)) in segs.iter().enumerate() {
            let scan =
                scan_segment_file("t", Bytes::from(fs::read(p).unwrap()), i + 1 == segs.len(), Some(*first)).unwrap();
            assert!(scan.torn.is_none());
            out.extend(scan.records.iter().map(|r| record_zxid(r).unwrap()));
        }
        out
    }

    fn three_segments(dir: &Path) {
        write_segment(dir, &[1..=3, 4..=7]);
        write_segment(dir, &[8..=8, 9..=12]);
        write_segment(dir, &[13..=20]);
    }

    #[test]
    fn cuts_inside_a_batch_and_drops_later_segments() {
        let d = TempDir::new("trunc-mid");
        three_segments(&d.0);
        let tail = truncate_log(&d.0, 10).unwrap();
        assert_eq!(zxids(&d.0), (1..=10).collect::<Vec<_>>());
        assert_eq!(tail.segment, Some(d.0.join(segment_name(8))));
        assert_eq!(tail.next_offset % 4096, 0);
        assert_eq!(tail.next_offset, fs::metadata(d.0.join(segment_name(8))).unwrap().len());
    }

    #[test]
    fn cuts_at_boundaries_and_before_everything() {
        let d = TempDir::new("trunc-edges");
        three_segments(&d.0);
        // At the very end: nothing changes.
        let before = fs::read(d.0.join(segment_name(13))).unwrap();
        let tail = truncate_log(&d.0, 20).unwrap();
        assert_eq!(zxids(&d.0), (1..=20).collect::<Vec<_>>());
        assert_eq!(fs::read(d.0.join(segment_name(13))).unwrap(), before);
        assert_eq!(tail.next_offset, 4096);
        // At the end of a segment: the later one goes, this one stays as it was.
        truncate_log(&d.0, 12).unwrap();
        assert_eq!(zxids(&d.0), (1..=12).collect::<Vec<_>>());
        // At a batch boundary inside a segment.
        truncate_log(&d.0, 3).unwrap();
        assert_eq!(zxids(&d.0), vec![1, 2, 3]);
        // Before the first txn: no log at all.
        let tail = truncate_log(&d.0, 0).unwrap();
        assert!(zxids(&d.0).is_empty() && tail.segment.is_none());
    }

    #[test]
    fn a_stale_rewrite_is_removed_and_never_read_as_a_segment() {
        let d = TempDir::new("trunc-stale");
        three_segments(&d.0);
        let stale = d.0.join(format!("{}{TRUNC_TMP_SUFFIX}", segment_name(8)));
        fs::write(&stale, b"half written").unwrap();
        assert_eq!(zxids(&d.0), (1..=20).collect::<Vec<_>>());
        assert_eq!(remove_stale_truncations(&d.0).unwrap(), vec![stale.clone()]);
        assert!(!stale.exists());
    }
}
