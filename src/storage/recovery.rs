//! Recovery at startup: decode the newest snapshot that verifies (checksum and structure) into
//! a DataTree, read every log record after it, cut (and clear on disk) a torn batch at the tail
//! of the last segment, and tell the log writer where to continue. Runs on the main thread
//! before executors start, so it uses blocking std::fs. Rules: the snapshot file is read with
//! one sequential read, decoded once, and its bytes dropped as soon as the tree is built (the
//! cores share the decoded tree: an O(1) clone each, `rebuild_tree`); a damaged snapshot is
//! skipped for an older one (with a warning); a torn tail (a write never acknowledged, `storage::log`'s sector rule) is cut with
//! a warning; any other damage, a zxid gap, or logs that do not reach back to the chosen
//! snapshot stop the server with an error naming the file and byte, and the file is left as it
//! is (the operator decides: `ringkeeper log-truncate`); an ensemble member moves the damaged
//! segment and later ones aside instead (`set_aside_damaged`) and rejoins from the quorum.

use super::files::{fsync_dir, list_segments, list_snapshots, segment_index_for};
use super::log::{scan_segment_file, zxid_follows, LogError};
use super::snapshot::{decode_snapshot, SNAPSHOT_PREFIX, SNAPSHOT_TMP_SUFFIX};
use crate::tree::DataTree;
use crate::txn::{apply::apply, codec};
use bytes::Bytes;
use std::fmt;
use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Where the log writer continues.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogTail {
    /// The segment to append to; None: start a new segment named by the next zxid.
    pub segment: Option<PathBuf>,
    /// Logical-stream offset of the next batch in `segment` (0 when `segment` is None); the
    /// writer reads the block holding it back (`log::AppendPoint`).
    pub next_offset: u64,
}

/// Everything a core needs to rebuild its DataTree. Send + Sync: the server hands it to every
/// core.
#[derive(Debug, Clone, Default)]
pub struct Recovered {
    /// The tree of the newest valid snapshot, decoded (a fresh tree without one). Persistent:
    /// each core's `rebuild_tree` clones it in O(1) and shares its structure.
    pub snapshot: DataTree,
    /// Zxid the snapshot is exact at (0 without one).
    pub snapshot_zxid: i64,
    /// Every log record with zxid > snapshot_zxid, in zxid order without gaps.
    pub records: Vec<Bytes>,
    /// Zxid of the last txn (snapshot_zxid when no record follows it).
    pub last_zxid: i64,
    pub tail: LogTail,
    /// What recovery repaired or skipped (also logged with tracing::warn!).
    pub warnings: Vec<String>,
}

#[derive(Debug)]
pub enum RecoveryError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    Log(LogError),
    /// The logs hold an admin `restore` at this zxid but recovery started from an older
    /// snapshot: `snapshot.<zxid>` (the restored tree) is missing or damaged.
    RestoreWithoutSnapshot {
        zxid: i64,
    },
    /// The logs do not hold every txn after the snapshot recovery starts from.
    MissingTxns {
        snapshot_zxid: i64,
        first_missing_zxid: i64,
        detail: String,
    },
    /// Rewriting an older build's log in the current format failed (or it is damaged).
    Upgrade(super::truncate::TruncateError),
    /// A record whose batch checksum is fine but which does not decode.
    BadRecord {
        zxid: i64,
        error: codec::TxnDecodeError,
    },
}

impl fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoveryError::Io { path, source } => write!(f, "recovery: {}: {source}", path.display()),
            RecoveryError::Log(e) => write!(f, "recovery: {e}"),
            RecoveryError::Upgrade(e) => write!(f, "recovery, upgrading the txn log: {e}"),
            RecoveryError::MissingTxns { snapshot_zxid, first_missing_zxid, detail } => write!(
                f,
                "recovery: the txn logs do not hold zxid {first_missing_zxid:#x} (needed to replay after the \
                 snapshot at {snapshot_zxid:#x}): {detail}. The server will not start without it"
            ),
            RecoveryError::BadRecord { zxid, error } => write!(f, "recovery: log record {zxid:#x}: {error}"),
            RecoveryError::RestoreWithoutSnapshot { zxid } => write!(
                f,
                "recovery: the txn log holds an admin restore at zxid {zxid:#x}, but snapshot.{zxid:x} (the \
                 restored tree) is missing or damaged; replaying the log over an older snapshot would give the \
                 tree before the restore. The server will not start: put that snapshot back"
            ),
        }
    }
}

impl std::error::Error for RecoveryError {}

impl From<LogError> for RecoveryError {
    fn from(e: LogError) -> Self {
        RecoveryError::Log(e)
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RecoveryError + '_ {
    move |source| RecoveryError::Io { path: path.to_path_buf(), source }
}

fn warn(warnings: &mut Vec<String>, msg: String) {
    tracing::warn!("{msg}");
    warnings.push(msg);
}

/// Removes `snapshot.*.tmp` files a crash left behind (safe: no writer runs yet).
fn remove_stale_temps(data_dir: &Path, warnings: &mut Vec<String>) -> Result<(), RecoveryError> {
    for entry in fs::read_dir(data_dir).map_err(io_err(data_dir))? {
        let entry = entry.map_err(io_err(data_dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(SNAPSHOT_PREFIX) && name.ends_with(SNAPSHOT_TMP_SUFFIX) {
            let p = entry.path();
            fs::remove_file(&p).map_err(io_err(&p))?;
            warn(warnings, format!("removed unfinished snapshot {}", p.display()));
        }
    }
    Ok(())
}

/// Overwrites `path` at `offset` with `bytes` and syncs it.
fn write_range(path: &Path, offset: u64, bytes: &[u8]) -> Result<(), RecoveryError> {
    let mut f = fs::OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
    f.seek(SeekFrom::Start(offset)).map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_data().map_err(io_err(path))
}

/// Overwrites `[from, to)` of `path` with zeroes and syncs it.
fn zero_range(path: &Path, from: u64, to: u64) -> Result<(), RecoveryError> {
    let mut f = fs::OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    let to = to.min(len);
    if to <= from {
        return Ok(());
    }
    f.seek(SeekFrom::Start(from)).map_err(io_err(path))?;
    let zeroes = vec![0u8; super::LOG_BLOCK_BYTES * 16];
    let mut left = to - from;
    while left > 0 {
        let n = left.min(zeroes.len() as u64) as usize;
        f.write_all(&zeroes[..n]).map_err(io_err(path))?;
        left -= n as u64;
    }
    f.sync_data().map_err(io_err(path))
}

/// Recovers the state on disk. Creates `data_dir` and `log_dir` if missing.
pub fn recover(data_dir: &Path, log_dir: &Path) -> Result<Recovered, RecoveryError> {
    fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
    fs::create_dir_all(log_dir).map_err(io_err(log_dir))?;
    let mut warnings = Vec::new();
    remove_stale_temps(data_dir, &mut warnings)?;
    for p in super::truncate::remove_stale_truncations(log_dir).map_err(io_err(log_dir))? {
        warn(&mut warnings, format!("removed unfinished log truncation {}", p.display()));
    }
    // An older build's log (format version 1) is rewritten in the current format first.
    let upgraded = super::truncate::upgrade_v1_segments(log_dir).map_err(RecoveryError::Upgrade)?;
    if !upgraded.is_empty() {
        warn(
            &mut warnings,
            format!(
                "rewrote {} log segment(s) of format version 1 in format {} (originals kept in {}): {}",
                upgraded.len(),
                super::log::LOG_FORMAT_VERSION,
                log_dir.join(super::truncate::V1_ORIGINALS_DIR).display(),
                upgraded.join(", ")
            ),
        );
    }

    // Newest snapshot that verifies and decodes; its bytes are dropped once decoded.
    let mut snapshot: Option<DataTree> = None;
    let mut snapshot_zxid = 0i64;
    for (zxid, p) in list_snapshots(data_dir).map_err(io_err(data_dir))?.into_iter().rev() {
        let began = std::time::Instant::now();
        let bytes = fs::read(&p).map_err(io_err(&p))?;
        let read_ms = began.elapsed().as_millis();
        let decoded = decode_snapshot(&bytes);
        let file_bytes = bytes.len();
        drop(bytes);
        match decoded {
            Ok(tree) if tree.last_zxid() == zxid => {
                tracing::info!(
                    "snapshot {} ({file_bytes} bytes, {} znodes): read in {read_ms} ms, decoded in {} ms",
                    p.display(),
                    tree.node_count(),
                    began.elapsed().as_millis() - read_ms
                );
                snapshot = Some(tree);
                snapshot_zxid = zxid;
                break;
            }
            Ok(tree) => warn(
                &mut warnings,
                format!(
                    "skipping snapshot {}: it holds zxid {:#x}, not the one in its name",
                    p.display(),
                    tree.last_zxid()
                ),
            ),
            Err(e) => warn(&mut warnings, format!("skipping snapshot {}: {e}", p.display())),
        }
    }

    let segments = list_segments(log_dir).map_err(io_err(log_dir))?;
    let mut records: Vec<Bytes> = Vec::new();
    let mut last_zxid = snapshot_zxid;
    let mut tail = LogTail::default();
    if !segments.is_empty() {
        // The segment holding the txn after the snapshot, or (after a SNAP from a leader) a
        // first segment that starts a later epoch.
        let first_follows = zxid_follows(snapshot_zxid, segments[0].0);
        let Some(start) = segment_index_for(&segments, snapshot_zxid + 1).or(first_follows.then_some(0)) else {
            return Err(RecoveryError::MissingTxns {
                snapshot_zxid,
                first_missing_zxid: snapshot_zxid + 1,
                detail: format!("the oldest log segment {} starts after it", segments[0].1.display()),
            });
        };
        // Next zxid the log must continue with.
        let mut next = segments[start].0;
        for (i, (first, p)) in segments.iter().enumerate().skip(start) {
            let is_last = i + 1 == segments.len();
            let file = p.display().to_string();
            if *first != next && !zxid_follows(next - 1, *first) {
                return Err(RecoveryError::MissingTxns {
                    snapshot_zxid,
                    first_missing_zxid: next,
                    detail: format!("segment {file} starts at {first:#x}"),
                });
            }
            let raw = fs::read(p).map_err(io_err(p))?;
            let scan = scan_segment_file(&file, &raw, is_last, Some(*first))?;
            drop(raw);
            if let Some(torn) = &scan.torn {
                warn(
                    &mut warnings,
                    format!(
                        "txn log {file}: cut a torn write (never acknowledged) at byte {} ({}); clearing bytes {}..{}",
                        torn.file_offset, torn.reason, torn.file_offset, torn.garbage_end
                    ),
                );
                let (reseal, zero_from) = torn.clearing(&scan.end_sector_head);
                if let Some((off, sector)) = reseal {
                    write_range(p, off, &sector)?;
                }
                zero_range(p, zero_from, torn.garbage_end)?;
            }
            next = first + scan.records.len() as i64;
            for r in scan.records {
                if codec::record_zxid(&r).is_some_and(|z| z > snapshot_zxid) {
                    records.push(r);
                }
            }
            if is_last {
                // The writer may continue in this segment only if its next zxid follows on.
                if next > snapshot_zxid {
                    tail = LogTail { segment: Some(p.clone()), next_offset: scan.end_offset };
                } else {
                    warn(
                        &mut warnings,
                        format!("the txn logs end at {:#x}, before the snapshot at {snapshot_zxid:#x}; a new segment will start", next - 1),
                    );
                }
            }
        }
        if let Some(r) = records.last() {
            last_zxid = codec::record_zxid(r).unwrap_or(last_zxid);
        }
    } else if snapshot.is_none() && !list_snapshots(data_dir).map_err(io_err(data_dir))?.is_empty() {
        return Err(RecoveryError::MissingTxns {
            snapshot_zxid: 0,
            first_missing_zxid: 1,
            detail: "no snapshot verifies and there are no txn logs".into(),
        });
    }
    fsync_dir(data_dir).map_err(io_err(data_dir))?;
    let snapshot = snapshot.unwrap_or_default();
    Ok(Recovered { snapshot, snapshot_zxid, records, last_zxid, tail, warnings })
}

/// Name prefix of the directories damaged log segments are moved into.
pub const DAMAGED_DIR_PREFIX: &str = "damaged.";

/// Moves the log segment `file` (a path `recover` named in `LogError::Corrupt`) and every later
/// segment of `log_dir` into a new `log_dir/damaged.<unix ms>/`, renamed, never rewritten (the
/// evidence is kept); returns that directory. For an ensemble member, which then rejoins from
/// the quorum; the caller records that first (`peer_state::mark_rejoin_pending`).
pub fn set_aside_damaged(log_dir: &Path, file: &Path) -> Result<PathBuf, RecoveryError> {
    let segments = list_segments(log_dir).map_err(io_err(log_dir))?;
    let Some(from) = segments.iter().position(|(_, p)| p == file) else {
        return Err(RecoveryError::Io {
            path: file.to_path_buf(),
            source: io::Error::new(io::ErrorKind::NotFound, "not a log segment of this log directory"),
        });
    };
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let mut dir = log_dir.join(format!("{DAMAGED_DIR_PREFIX}{stamp}"));
    let mut n = 0;
    while dir.exists() {
        n += 1;
        dir = log_dir.join(format!("{DAMAGED_DIR_PREFIX}{stamp}.{n}"));
    }
    fs::create_dir(&dir).map_err(io_err(&dir))?;
    for (_, p) in &segments[from..] {
        let Some(name) = p.file_name() else { continue };
        fs::rename(p, dir.join(name)).map_err(io_err(p))?;
    }
    fsync_dir(&dir).map_err(io_err(&dir))?;
    fsync_dir(log_dir).map_err(io_err(log_dir))?;
    Ok(dir)
}

/// Builds a core's DataTree from what recover() found: the snapshot's tree (an O(1) clone,
/// sharing structure with every other core's), then every record decoded and applied in order.
pub fn rebuild_tree(rec: &Recovered) -> Result<DataTree, RecoveryError> {
    let mut tree = rec.snapshot.clone();
    let mut changes = Vec::new();
    for r in &rec.records {
        let zxid = codec::record_zxid(r).unwrap_or(-1);
        let txn = codec::decode(r.clone()).map_err(|error| RecoveryError::BadRecord { zxid, error })?;
        if matches!(txn.op, crate::txn::TxnOp::Restore) {
            // The tree was replaced at this zxid; its snapshot is not the one recovery started
            // from (lost or damaged), and replaying on top of an older tree would be wrong.
            return Err(RecoveryError::RestoreWithoutSnapshot { zxid });
        }
        changes.clear();
        apply(&mut tree, &txn, &mut changes);
    }
    Ok(tree)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::storage::files::write_atomic;
    use crate::storage::log::{
        encode_batch, file_len_for, sectorize, segment_name, LOG_BLOCK_BYTES, SECTOR_PAYLOAD_BYTES,
    };
    use crate::storage::snapshot::{encode_snapshot, snapshot_name};
    use crate::txn::{Txn, TxnHeader, TxnOp};
    use bytes::BytesMut;

    use crate::storage::files::tests::TempDir;

    /// zxid 1 creates a session, 2 creates /n, the rest set /n's data to their zxid.
    fn txn(zxid: i64) -> Bytes {
        let op = match zxid {
            1 => TxnOp::CreateSession { timeout_ms: 5000 },
            2 => TxnOp::Create {
                path: "/n".into(),
                data: None,
                acl: crate::tree::acl::open_acl_unsafe(),
                ephemeral_owner: 0,
                response_type: 1,
            },
            z => TxnOp::SetData { path: "/n".into(), data: Some(Bytes::from(z.to_string())) },
        };
        let mut b = BytesMut::new();
        codec::encode(
            &Txn { header: TxnHeader { zxid, session_id: 0x77, cxid: zxid as i32, time_ms: 100 + zxid }, op },
            &mut b,
        );
        b.freeze()
    }

    fn write_segment(dir: &Path, batches: &[std::ops::Range<i64>], prealloc: usize) -> PathBuf {
        let mut out = Vec::new();
        for b in batches {
            out.extend(encode_batch(&b.clone().map(txn).collect::<Vec<_>>()));
        }
        let mut out = sectorize(&out);
        if out.len() < prealloc {
            out.resize(prealloc, 0);
        }
        let p = dir.join(segment_name(batches[0].start));
        fs::write(&p, out).unwrap();
        p
    }

    fn tree_at(zxid: i64) -> DataTree {
        let rec = Recovered { records: (1..=zxid).map(txn).collect(), ..Default::default() };
        rebuild_tree(&rec).unwrap()
    }

    #[test]
    fn a_replay_that_meets_a_restore_marker_refuses() {
        // The restore's snapshot (zxid 4) was not what recovery started from: replaying the
        // marker over the older tree would give the tree from before the restore.
        let mut marker = BytesMut::new();
        let header = TxnHeader { zxid: 4, session_id: 0, cxid: 0, time_ms: 104 };
        codec::encode(&Txn { header, op: TxnOp::Restore }, &mut marker);
        let records = vec![txn(1), txn(2), txn(3), marker.freeze(), txn(5)];
        let rec = Recovered { records, ..Default::default() };
        match rebuild_tree(&rec) {
            Err(RecoveryError::RestoreWithoutSnapshot { zxid: 4 }) => {}
            other => panic!("{other:?}"),
        }
        // From the restore's snapshot on, the records after the marker replay as usual.
        let rec = Recovered { snapshot: tree_at(3), snapshot_zxid: 3, records: vec![txn(4)], ..Default::default() };
        assert_eq!(rebuild_tree(&rec).map(|t| t.last_zxid()).ok(), Some(4));
    }

    #[test]
    fn fresh_dirs_are_created_and_empty() {
        let d = TempDir::new("fresh");
        let r = recover(&d.0.join("data"), &d.0.join("log")).unwrap();
        assert!(d.0.join("data").is_dir() && d.0.join("log").is_dir());
        assert_eq!((r.snapshot_zxid, r.last_zxid, r.records.len()), (0, 0, 0));
        assert_eq!(r.tail, LogTail::default());
        assert_eq!(rebuild_tree(&r).unwrap().node_count(), DataTree::new().node_count());
    }

    #[test]
    fn snapshot_plus_logs_with_a_torn_tail() {
        let d = TempDir::new("torn");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&logs).unwrap();
        write_segment(&logs, &[1..4, 4..10], 0);
        let seg2 = write_segment(&logs, &[10..12, 12..20, 20..60], 16 * LOG_BLOCK_BYTES);
        write_atomic(&data.join(snapshot_name(6)), &encode_snapshot(&tree_at(6))).unwrap();
        // A newer snapshot that is damaged is skipped.
        let mut bad = encode_snapshot(&tree_at(12));
        bad[30] ^= 1;
        fs::write(data.join(snapshot_name(12)), bad).unwrap();
        fs::write(data.join(snapshot_name(13) + ".tmp"), b"partial").unwrap();
        // Tear the last batch (20..60): only its first two sectors reached the disk.
        let b1 = encode_batch(&(10..12).map(txn).collect::<Vec<_>>()).len();
        let b2 = encode_batch(&(12..20).map(txn).collect::<Vec<_>>()).len();
        let torn_at = b1 + b2;
        let mut bytes = fs::read(&seg2).unwrap();
        let kept_sectors = torn_at / SECTOR_PAYLOAD_BYTES + 2;
        bytes[kept_sectors * 512..].fill(0);
        assert!(kept_sectors * 512 < 3 * LOG_BLOCK_BYTES, "the torn batch spans more sectors than were kept");
        fs::write(&seg2, &bytes).unwrap();

        let r = recover(&data, &logs).unwrap();
        assert_eq!(r.snapshot_zxid, 6);
        assert_eq!(r.records.len(), 13);
        assert_eq!(codec::record_zxid(&r.records[0]), Some(7));
        assert_eq!(r.last_zxid, 19);
        assert_eq!(r.tail, LogTail { segment: Some(seg2.clone()), next_offset: torn_at as u64 });
        assert!(r.warnings.iter().any(|w| w.contains("cut a torn write")), "{:?}", r.warnings);
        assert!(r.warnings.iter().any(|w| w.contains("skipping snapshot")), "{:?}", r.warnings);
        assert!(!data.join(snapshot_name(13) + ".tmp").exists());
        // The torn bytes were cleared: nothing but zeroes after the sector holding the cut, and
        // that sector holds only the bytes before it; a second recovery sees a clean tail.
        let on_disk = fs::read(&seg2).unwrap();
        assert!(on_disk[file_len_for(torn_at as u64) as usize..].iter().all(|b| *b == 0));
        let mut expected = Vec::new();
        for b in [10..12, 12..20] {
            expected.extend(encode_batch(&b.map(txn).collect::<Vec<_>>()));
        }
        let expected = sectorize(&expected);
        assert_eq!(&on_disk[..expected.len()], &expected[..]);
        let again = recover(&data, &logs).unwrap();
        assert!(again.warnings.iter().all(|w| !w.contains("cut a torn write")), "{:?}", again.warnings);
        assert_eq!(again.last_zxid, 19);
        // The rebuilt tree equals one built by applying 1..=19.
        let tree = rebuild_tree(&r).unwrap();
        crate::storage::snapshot::tests::assert_same_tree(&tree, &tree_at(19));
        assert_eq!(tree.get("/n").unwrap().data.as_deref(), Some(&b"19"[..]));
    }

    /// A snapshot whose checksum is right but whose content does not decode (here its node
    /// count) is skipped for an older one, as a damaged one is; before, recover() took it on
    /// the crc alone and the tree could not be built (the server did not start).
    #[test]
    fn issue13_a_snapshot_that_verifies_but_does_not_decode_is_skipped() {
        let d = TempDir::new("undecodable");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&logs).unwrap();
        write_segment(&logs, &[1..4, 4..10], 0);
        write_atomic(&data.join(snapshot_name(4)), &encode_snapshot(&tree_at(4))).unwrap();
        let mut bad = encode_snapshot(&tree_at(8));
        let n = bad.len();
        bad[n - 12..n - 4].copy_from_slice(&99u64.to_be_bytes());
        let crc = crc32c::crc32c(&bad[..n - 4]);
        bad[n - 4..].copy_from_slice(&crc.to_be_bytes());
        assert!(crate::storage::snapshot::verify_snapshot(&bad).is_ok());
        fs::write(data.join(snapshot_name(8)), bad).unwrap();
        let r = recover(&data, &logs).unwrap();
        assert_eq!((r.snapshot_zxid, r.last_zxid, r.records.len()), (4, 9, 5));
        assert!(r.warnings.iter().any(|w| w.contains("skipping snapshot") && w.contains("node")), "{:?}", r.warnings);
        crate::storage::snapshot::tests::assert_same_tree(&rebuild_tree(&r).unwrap(), &tree_at(9));
    }

    /// Restart from a large-ish snapshot plus a log: every znode comes back, decoded once; each
    /// core's tree is a clone of the one decoded tree plus the replayed log (two rebuilds share
    /// the snapshot and agree).
    #[test]
    fn issue13_recovery_from_a_large_snapshot_restores_every_znode() {
        use crate::proto::Acl;
        use std::sync::Arc;
        const PARENTS: usize = 100;
        const PER_PARENT: usize = 200;
        let d = TempDir::new("large");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&logs).unwrap();
        let acl: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
        let mut big = DataTree::new();
        let mut z = 0i64;
        for p in 0..PARENTS {
            z += 1;
            big.create_node(&format!("/p{p:04}"), None::<&[u8]>, acl.clone(), 0, z, 100 + z);
            for c in 0..PER_PARENT {
                z += 1;
                big.create_node(
                    &format!("/p{p:04}/n{c:07}"),
                    Some(Bytes::from(vec![c as u8; 100])),
                    acl.clone(),
                    0,
                    z,
                    100 + z,
                );
            }
        }
        big.set_last_zxid(z);
        write_atomic(&data.join(snapshot_name(z)), &encode_snapshot(&big)).unwrap();
        // The log after the snapshot: a session, /n, and setData on it (`txn`'s numbering,
        // shifted past the snapshot).
        let mut shifted = Vec::new();
        for k in 1..=5 {
            let rec = txn(k);
            let mut t = codec::decode(rec).unwrap();
            t.header.zxid += z;
            let mut b = BytesMut::new();
            codec::encode(&t, &mut b);
            shifted.push(b.freeze());
        }
        let mut seg = sectorize(&encode_batch(&shifted));
        seg.resize(seg.len().max(16 * LOG_BLOCK_BYTES), 0);
        fs::write(logs.join(segment_name(z + 1)), seg).unwrap();

        let r = recover(&data, &logs).unwrap();
        assert_eq!((r.snapshot_zxid, r.last_zxid, r.records.len()), (z, z + 5, 5));
        assert_eq!(r.snapshot.node_count(), big.node_count());
        crate::storage::snapshot::tests::assert_same_tree(&r.snapshot, &big);
        let (a, b) = (rebuild_tree(&r).unwrap(), rebuild_tree(&r).unwrap());
        assert_eq!(a.node_count(), 4 + PARENTS * (PER_PARENT + 1) + 1);
        crate::storage::snapshot::tests::assert_same_tree(&a, &b);
        for p in [0, PARENTS / 2, PARENTS - 1] {
            assert_eq!(a.get(&format!("/p{p:04}")).unwrap().children.len(), PER_PARENT);
            let n = a.get(&format!("/p{p:04}/n{:07}", PER_PARENT - 1)).unwrap();
            assert_eq!(n.data.as_deref(), Some(&vec![(PER_PARENT - 1) as u8; 100][..]));
        }
        assert_eq!(a.get("/n").unwrap().data.as_deref(), Some(&b"5"[..]));
        // The snapshot's tree itself is untouched by the replays.
        assert!(r.snapshot.get("/n").is_none());
    }

    #[test]
    fn corruption_in_an_older_segment_names_the_file() {
        let d = TempDir::new("corrupt");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&logs).unwrap();
        let seg1 = write_segment(&logs, &[1..4, 4..10], 0);
        write_segment(&logs, &[10..12], 0);
        let mut bytes = fs::read(&seg1).unwrap();
        let last = bytes.len() - 10;
        bytes[last - 4000] ^= 1;
        fs::write(&seg1, bytes).unwrap();
        let err = recover(&data, &logs).unwrap_err();
        assert!(matches!(err, RecoveryError::Log(LogError::Corrupt { .. })), "{err}");
        assert!(err.to_string().contains(&segment_name(1)), "{err}");
    }

    #[test]
    fn a_gap_between_segments_or_before_the_logs_is_an_error() {
        let d = TempDir::new("gap");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&logs).unwrap();
        write_segment(&logs, &[1..4], 0);
        write_segment(&logs, &[5..8], 0);
        assert!(matches!(recover(&data, &logs), Err(RecoveryError::MissingTxns { first_missing_zxid: 4, .. })));
        fs::remove_file(logs.join(segment_name(1))).unwrap();
        assert!(matches!(recover(&data, &logs), Err(RecoveryError::MissingTxns { first_missing_zxid: 1, .. })));
        // With a snapshot at 4 the logs from 5 suffice.
        fs::create_dir_all(&data).unwrap();
        write_atomic(&data.join(snapshot_name(4)), &encode_snapshot(&tree_at(4))).unwrap();
        let r = recover(&data, &logs).unwrap();
        assert_eq!((r.snapshot_zxid, r.last_zxid, r.records.len()), (4, 7, 3));
        crate::storage::snapshot::tests::assert_same_tree(&rebuild_tree(&r).unwrap(), &tree_at(7));
    }

    #[test]
    fn logs_ending_before_the_snapshot_start_a_new_segment() {
        let d = TempDir::new("behind");
        let (data, logs) = (d.0.join("data"), d.0.join("log"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&logs).unwrap();
        write_segment(&logs, &[1..4], LOG_BLOCK_BYTES * 4);
        write_atomic(&data.join(snapshot_name(9)), &encode_snapshot(&tree_at(9))).unwrap();
        let r = recover(&data, &logs).unwrap();
        assert_eq!((r.snapshot_zxid, r.last_zxid, r.records.len()), (9, 9, 0));
        assert_eq!(r.tail, LogTail::default());
    }
}
