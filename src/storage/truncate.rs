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
//!
//! The operator's cut of a damaged segment (`cut_damaged_segment`, `ringkeeper log-truncate`)
//! is the one way acknowledged txns leave the log: only when the operator asks, it keeps the
//! valid batches before the damage, and it deletes nothing: a copy of the damaged segment and
//! every later segment are moved into a `damaged.<time>/` directory of the log dir.

use super::files::{fsync_dir, list_segments, segment_index_for};
use super::log::{
    file_offset_of, scan_segment_file, scan_valid_prefix, sectorize, BadBatch, BatchEncoder, BatchSpan, LogError,
    SECTOR_BYTES, SECTOR_PAYLOAD_BYTES,
};
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
    let scan = scan_segment_file(&name, &data, true, Some(*first)).map_err(TruncateError::Log)?;
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
    let next_offset = rewrite_segment(log_dir, path, &encode_batches(kept))?;
    Ok(LogTail { segment: Some(path.clone()), next_offset })
}

/// Replaces the segment at `path` with `logical` (a stream of whole batches) in sectors:
/// written to `<path>.trunc`, fsynced, renamed over `path`, directory fsynced. Returns the
/// logical offset where the next batch goes.
fn rewrite_segment(log_dir: &Path, path: &Path, logical: &[u8]) -> Result<u64, TruncateError> {
    let bytes = sectorize(logical);
    let tmp = PathBuf::from(format!("{}{TRUNC_TMP_SUFFIX}", path.display()));
    {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io_err(&tmp))?;
        f.write_all(&bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    fsync_dir(log_dir).map_err(io_err(log_dir))?;
    Ok(logical.len() as u64)
}

/// `records` as a logical stream of packed batches of at most `REWRITE_BATCH_BYTES_MAX` body
/// bytes.
fn encode_batches(records: Vec<Bytes>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = BatchEncoder::new();
    for r in records {
        if !enc.is_empty() && enc.encoded_len() + r.len() > REWRITE_BATCH_BYTES_MAX {
            out.extend(std::mem::replace(&mut enc, BatchEncoder::new()).finish().to_vec());
        }
        enc.push(r);
    }
    if !enc.is_empty() {
        out.extend(enc.finish().to_vec());
    }
    out
}

/// What the operator's cut of a damaged segment (`ringkeeper log-truncate`) does or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamageCut {
    /// The damaged segment.
    pub segment: PathBuf,
    /// Its valid batches before the damage, which stay: their last zxid and txn count.
    pub kept_last_zxid: Option<i64>,
    pub kept_txns: usize,
    /// File offset the segment is cut at (the end of the last batch kept).
    pub cut_at: u64,
    /// Txns of the damaged segment after the cut that can still be read (dropped), as a
    /// zxid range; the damaged part itself cannot be read.
    pub dropped_readable: Option<(i64, i64)>,
    /// Why the valid prefix stops where it does (None: it reaches the end of the data).
    pub stop: Option<(u64, BadBatch)>,
    /// Later segments, moved aside: their path and the zxid range their valid prefix holds.
    pub later: Vec<(PathBuf, Option<(i64, i64)>)>,
    /// Where the original segment (copied) and the later ones go.
    pub aside_dir: PathBuf,
    /// The damage is after the end of the segment's data: no txn is dropped.
    pub loses_no_txn: bool,
}

/// Name of the directory a cut moves damaged and later segments into.
pub fn damaged_dir_name(unix_secs: u64) -> String {
    let (y, mo, d) = crate::offline::civil_date((unix_secs / 86_400) as i64);
    let t = unix_secs % 86_400;
    format!("damaged.{y:04}{mo:02}{d:02}T{:02}{:02}{:02}Z", t / 3600, t / 60 % 60, t % 60)
}

/// Plans (and with `apply`, performs) the operator's cut of the segment `file_name` in
/// `log_dir` at the damage at file offset `offset`: the segment keeps its valid batches that
/// end at or before `offset` (and before any other damage); a copy of the original and every
/// later segment go into `log_dir/<aside_name>/`, so nothing is deleted. Damage after the end
/// of the segment's data drops no txn and moves no later segment.
pub fn cut_damaged_segment(
    log_dir: &Path,
    file_name: &str,
    offset: u64,
    aside_name: &str,
    apply: bool,
) -> Result<DamageCut, TruncateError> {
    let segments = list_segments(log_dir).map_err(io_err(log_dir))?;
    let Some(i) = segments.iter().position(|(_, p)| p.file_name().and_then(|n| n.to_str()) == Some(file_name)) else {
        return Err(TruncateError::Io {
            path: log_dir.join(file_name),
            err: io::Error::new(io::ErrorKind::NotFound, "no such txn log segment (log.<16 hex digits>)"),
        });
    };
    let (first, path) = segments[i].clone();
    let data = fs::read(&path).map_err(io_err(&path))?;
    let (prefix, stop) = scan_valid_prefix(&data, Some(first));
    let kept: Vec<BatchSpan> = prefix.batches.iter().copied().filter(|b| b.file_end() <= offset).collect();
    let kept_txns = kept.iter().map(|b| (b.last_zxid - b.first_zxid + 1) as usize).sum();
    let cut_logical = kept.last().map_or(0, |b| b.offset + b.len);
    let dropped_readable = prefix
        .batches
        .get(kept.len())
        .map(|b| (b.first_zxid, prefix.batches.last().map_or(b.last_zxid, |l| l.last_zxid)));
    // Damage after the end of the segment's data (in its zero-filled space) loses no txn:
    // later segments still follow on, so they stay.
    let damage_after_data = stop.is_none() && kept.len() == prefix.batches.len();
    let mut later = Vec::new();
    for (f, p) in segments[i + 1..].iter().filter(|_| !damage_after_data) {
        let range = match fs::read(p) {
            Ok(d) => {
                let (s, _) = scan_valid_prefix(&d, Some(*f));
                s.batches.first().zip(s.batches.last()).map(|(a, b)| (a.first_zxid, b.last_zxid))
            }
            Err(_) => None,
        };
        later.push((p.clone(), range));
    }
    let aside_dir = log_dir.join(aside_name);
    let cut = DamageCut {
        segment: path.clone(),
        kept_last_zxid: kept.last().map(|b| b.last_zxid),
        kept_txns,
        cut_at: file_offset_of(cut_logical),
        dropped_readable,
        stop,
        later,
        aside_dir: aside_dir.clone(),
        loses_no_txn: damage_after_data,
    };
    if !apply {
        return Ok(cut);
    }
    fs::create_dir(&aside_dir).map_err(io_err(&aside_dir))?;
    let copy = aside_dir.join(file_name);
    fs::copy(&path, &copy).map_err(io_err(&copy))?;
    fs::File::open(&copy).and_then(|f| f.sync_all()).map_err(io_err(&copy))?;
    fsync_dir(&aside_dir).map_err(io_err(&aside_dir))?;
    fsync_dir(log_dir).map_err(io_err(log_dir))?;
    // Newest first, like TRUNC: a crash leaves a log that is a prefix of the old one.
    for (p, _) in cut.later.iter().rev() {
        let to = aside_dir.join(p.file_name().unwrap_or_default());
        fs::rename(p, &to).map_err(io_err(p))?;
        fsync_dir(&aside_dir).map_err(io_err(&aside_dir))?;
        fsync_dir(log_dir).map_err(io_err(log_dir))?;
    }
    if kept.is_empty() {
        fs::remove_file(&path).map_err(io_err(&path))?;
        fsync_dir(log_dir).map_err(io_err(log_dir))?;
    } else {
        let logical = &prefix_logical(&data, cut_logical);
        rewrite_segment(log_dir, &path, logical)?;
    }
    Ok(cut)
}

/// The first `len` bytes of a segment's logical stream (sectors before them verified by the
/// caller's scan).
fn prefix_logical(data: &[u8], len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    for sector in data.chunks(SECTOR_BYTES) {
        if out.len() as u64 >= len {
            break;
        }
        let n = ((len - out.len() as u64) as usize).min(SECTOR_PAYLOAD_BYTES).min(sector.len());
        out.extend_from_slice(&sector[..n]);
    }
    out
}

/// Where `upgrade_v1_segments` keeps the originals of the segments it rewrote.
pub const V1_ORIGINALS_DIR: &str = "format-v1";

/// Rewrites every segment an older build wrote (log format version 1, `storage::log_v1`) into
/// the current format, before recovery reads the log: the records are read under version 1's
/// rules, the original is hard-linked into `log_dir/format-v1/` (kept, never deleted), and the
/// new segment replaces it as a truncation does (`.trunc`, fsync, rename, fsync). A crash at
/// any point leaves the original or the rewritten segment under the segment's name. Returns
/// the names rewritten.
pub fn upgrade_v1_segments(log_dir: &Path) -> Result<Vec<String>, TruncateError> {
    let segments = list_segments(log_dir).map_err(io_err(log_dir))?;
    let mut upgraded = Vec::new();
    for (i, (_, path)) in segments.iter().enumerate() {
        // Only a segment that starts with the magic and no current version field can be
        // version 1: the rest are not read here (recovery reads them next).
        let mut head = [0u8; 8];
        let n = {
            use std::io::Read;
            let mut f = fs::File::open(path).map_err(io_err(path))?;
            f.read(&mut head).map_err(io_err(path))?
        };
        if n < head.len()
            || head[..4] != super::log::BATCH_MAGIC
            || head[4..8] == super::log::LOG_FORMAT_VERSION.to_be_bytes()
        {
            continue;
        }
        let data = fs::read(path).map_err(io_err(path))?;
        if !super::log_v1::is_v1_segment(&data) {
            continue;
        }
        let is_last = i + 1 == segments.len();
        let records = super::log_v1::read_records(&data, is_last).map_err(|e| TruncateError::Io {
            path: path.clone(),
            err: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a log segment of format version 1 is damaged at {e}"),
            ),
        })?;
        let originals = log_dir.join(V1_ORIGINALS_DIR);
        fs::create_dir_all(&originals).map_err(io_err(&originals))?;
        let name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let kept = originals.join(&name);
        if !kept.exists() {
            fs::hard_link(path, &kept).map_err(io_err(&kept))?;
            fsync_dir(&originals).map_err(io_err(&originals))?;
            fsync_dir(log_dir).map_err(io_err(log_dir))?;
        }
        rewrite_segment(log_dir, path, &encode_batches(records))?;
        upgraded.push(name.to_string_lossy().into_owned());
    }
    Ok(upgraded)
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
        write_segment_sized(dir, batches, 5)
    }

    /// The same with records of `size` bytes after their zxid.
    fn write_segment_sized(dir: &Path, batches: &[std::ops::RangeInclusive<i64>], size: usize) {
        let mut out = Vec::new();
        for b in batches {
            let mut enc = BatchEncoder::new();
            for z in b.clone() {
                let mut r = rec(z).to_vec();
                r.resize(8 + size, z as u8);
                enc.push(Bytes::from(r));
            }
            out.extend(enc.finish().to_vec());
        }
        let mut out = sectorize(&out);
        out.resize(out.len() + 3 * 4096, 0); // preallocated space
        fs::write(dir.join(segment_name(*batches[0].start())), out).unwrap();
    }

    /// Every zxid left in the log, segment by segment, and the tail of the last one.
    fn zxids(dir: &Path) -> Vec<i64> {
        let segs = list_segments(dir).unwrap();
        let mut out = Vec::new();
        for (i, (first, p)) in segs.iter().enumerate() {
            let scan = scan_segment_file("t", &fs::read(p).unwrap(), i + 1 == segs.len(), Some(*first)).unwrap();
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
        let seg = fs::read(d.0.join(segment_name(8))).unwrap();
        assert_eq!(tail.next_offset, scan_segment_file("t", &seg, true, Some(8)).unwrap().end_offset);
        assert_eq!(seg.len() % 4096, 0);
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
        assert_eq!(tail.next_offset, scan_segment_file("t", &before, true, Some(13)).unwrap().end_offset);
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

    /// The operator's cut: the damaged segment keeps its batches before the damage, a copy of
    /// it and every later segment are moved aside (nothing deleted), and the log then reads
    /// clean up to the cut.
    #[test]
    fn an_older_builds_log_is_upgraded_and_its_originals_kept() {
        let dir = TempDir::new("upgrade-v1");
        let v1a = crate::storage::log_v1::encode_v1_segment(&[vec![rec(1), rec(2)], vec![rec(3)]]);
        let mut v1b = crate::storage::log_v1::encode_v1_segment(&[vec![rec(4)], vec![rec(5), rec(6)]]);
        v1b.resize(v1b.len() + 8192, 0); // preallocated space after the data
        fs::write(dir.0.as_path().join(segment_name(1)), &v1a).unwrap();
        fs::write(dir.0.as_path().join(segment_name(4)), &v1b).unwrap();
        let up = upgrade_v1_segments(dir.0.as_path()).unwrap();
        assert_eq!(up, vec![segment_name(1), segment_name(4)]);
        assert_eq!(zxids(dir.0.as_path()), (1..=6).collect::<Vec<_>>());
        assert_eq!(fs::read(dir.0.as_path().join(V1_ORIGINALS_DIR).join(segment_name(1))).unwrap(), v1a);
        // Idempotent: current-format segments are left alone.
        assert!(upgrade_v1_segments(dir.0.as_path()).unwrap().is_empty());
        let r = crate::storage::recovery::recover(dir.0.as_path(), dir.0.as_path()).unwrap();
        assert_eq!((r.records.len(), r.last_zxid), (6, 6));
    }

    #[test]
    fn hardening_3_operator_cut_keeps_the_valid_prefix_and_moves_the_rest_aside() {
        let d = TempDir::new("trunc-damaged");
        three_segments(&d.0);
        write_segment_sized(&d.0, &[8..=8, 9..=12], 600);
        let path = d.0.join(segment_name(8));
        let mut data = fs::read(&path).unwrap();
        let scan = scan_segment_file("t", &data, false, Some(8)).unwrap();
        // Damage inside the second batch (9..=12), past the sector the first one ends in.
        let damage = scan.batches[1].file_offset() + 1000;
        data[damage as usize] ^= 0x20;
        fs::write(&path, &data).unwrap();
        let err = scan_segment_file(&path.display().to_string(), &data, false, Some(8)).unwrap_err();
        let LogError::Corrupt { offset, .. } = err.clone();
        assert_eq!(offset, damage / 512 * 512);
        // A dry run changes nothing.
        let plan = cut_damaged_segment(&d.0, &segment_name(8), offset, "damaged.test", false).unwrap();
        assert_eq!((plan.kept_last_zxid, plan.kept_txns), (Some(8), 1));
        assert_eq!(plan.later.len(), 1);
        assert_eq!(plan.later[0].1, Some((13, 20)));
        assert_eq!(fs::read(&path).unwrap(), data);
        assert!(!d.0.join("damaged.test").exists());
        let done = cut_damaged_segment(&d.0, &segment_name(8), offset, "damaged.test", true).unwrap();
        assert_eq!(done, plan);
        assert_eq!(zxids(&d.0), (1..=8).collect::<Vec<_>>());
        assert_eq!(fs::read(d.0.join("damaged.test").join(segment_name(8))).unwrap(), data, "the evidence is kept");
        assert!(d.0.join("damaged.test").join(segment_name(13)).exists());
        // Damage in the zero-filled space after a segment's data: no txn is lost and the later
        // segment stays.
        let first = d.0.join(segment_name(1));
        let mut data = fs::read(&first).unwrap();
        let len = data.len();
        data[len - 100] ^= 1;
        fs::write(&first, &data).unwrap();
        let cut = cut_damaged_segment(&d.0, &segment_name(1), (len - 512) as u64, "damaged.tail", true).unwrap();
        assert_eq!((cut.kept_txns, cut.later.len(), cut.dropped_readable), (7, 0, None));
        assert_eq!(zxids(&d.0), (1..=8).collect::<Vec<_>>());
        // Damage in the first batch of a segment: the whole segment goes aside.
        let first = d.0.join(segment_name(1));
        let mut data = fs::read(&first).unwrap();
        data[100] ^= 1;
        fs::write(&first, &data).unwrap();
        let cut = cut_damaged_segment(&d.0, &segment_name(1), 0, &damaged_dir_name(0), true).unwrap();
        assert_eq!((cut.kept_txns, cut.later.len()), (0, 1));
        assert!(zxids(&d.0).is_empty());
        assert!(d.0.join("damaged.19700101T000000Z").join(segment_name(8)).exists());
    }
}
