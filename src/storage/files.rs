//! Small durable files, directory listings of snapshots and log segments, and purge.
//! Rules: blocking std::fs, so callers use these before executors start or off the hot path
//! (purge removes a few files; the pipeline core never waits on it); a small file is replaced
//! atomically (temp file, fsync, rename, fsync of the directory); purge never removes the
//! newest `SNAP_RETAIN_COUNT_MIN` snapshots nor any log segment needed to replay from the
//! oldest snapshot it keeps.

use super::log::parse_segment_name;
use super::snapshot::parse_snapshot_name;
use super::SNAP_RETAIN_COUNT_MIN;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Suffix of the temp file `write_atomic` writes before renaming.
pub const ATOMIC_TMP_SUFFIX: &str = ".tmp";

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new contents.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{} names no file", path.display())))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(ATOMIC_TMP_SUFFIX);
    let tmp = path.with_file_name(tmp_name);
    {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fsync_dir(parent_dir(path))
}

/// The directory holding `path` ("." for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes entries created, renamed or removed in `dir` durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Files in `dir` whose names `parse` accepts, as (number, path), sorted by number.
fn list_numbered(dir: &Path, parse: fn(&str) -> Option<i64>) -> io::Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(z) = parse(name) {
            if entry.file_type()?.is_file() {
                out.push((z, entry.path()));
            }
        }
    }
    out.sort_by_key(|(z, _)| *z);
    Ok(out)
}

/// Snapshot files in `data_dir` as (zxid, path), oldest first.
pub fn list_snapshots(data_dir: &Path) -> io::Result<Vec<(i64, PathBuf)>> {
    list_numbered(data_dir, parse_snapshot_name)
}

/// Log segments in `log_dir` as (first zxid, path), oldest first.
pub fn list_segments(log_dir: &Path) -> io::Result<Vec<(i64, PathBuf)>> {
    list_numbered(log_dir, parse_segment_name)
}

/// What purge removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PurgeReport {
    pub removed_snapshots: Vec<PathBuf>,
    pub removed_segments: Vec<PathBuf>,
}

/// Index of the segment holding `zxid`: the last one whose first zxid is <= it.
pub fn segment_index_for(segments: &[(i64, PathBuf)], zxid: i64) -> Option<usize> {
    segments.iter().rposition(|(first, _)| *first <= zxid)
}

/// Keeps the newest `max(snap_retain_count, SNAP_RETAIN_COUNT_MIN)` snapshots and the log
/// segments needed to replay from the oldest of them; removes older snapshots and segments.
/// With fewer snapshots than that nothing is removed.
pub fn purge(data_dir: &Path, log_dir: &Path, snap_retain_count: usize) -> io::Result<PurgeReport> {
    let keep = snap_retain_count.max(SNAP_RETAIN_COUNT_MIN);
    // Only snapshots that verify count: recovery skips a damaged one, so keeping it instead of
    // a good one could leave nothing to start from.
    let mut snapshots = Vec::new();
    for (z, p) in list_snapshots(data_dir)? {
        match fs::read(&p).map(|b| super::snapshot::verify_snapshot(&b)) {
            Ok(Ok(found)) if found == z => snapshots.push((z, p)),
            _ => tracing::warn!("purge: {} does not verify; it is neither counted nor removed", p.display()),
        }
    }
    let mut report = PurgeReport::default();
    if snapshots.len() <= keep {
        return Ok(report);
    }
    let (old, kept) = snapshots.split_at(snapshots.len() - keep);
    let oldest_kept = kept[0].0;
    let segments = list_segments(log_dir)?;
    // Replaying from the oldest kept snapshot starts at the segment holding oldest_kept + 1.
    if let Some(first_needed) = segment_index_for(&segments, oldest_kept.saturating_add(1)) {
        for (_, p) in &segments[..first_needed] {
            fs::remove_file(p)?;
            report.removed_segments.push(p.clone());
        }
    }
    for (_, p) in old {
        fs::remove_file(p)?;
        report.removed_snapshots.push(p.clone());
    }
    Ok(report)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::storage::log::segment_name;
    use crate::storage::snapshot::snapshot_name;

    pub(crate) struct TempDir(pub PathBuf);
    impl TempDir {
        pub fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "rk-storage-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let d = TempDir::new("atomic");
        let p = d.0.join("myid");
        write_atomic(&p, b"1\n").unwrap();
        write_atomic(&p, b"22\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"22\n");
        assert_eq!(fs::read_dir(&d.0).unwrap().count(), 1);
    }

    #[test]
    fn purge_keeps_newest_snapshots_and_the_logs_they_need() {
        let d = TempDir::new("purge");
        let (data, logs) = (d.0.join("data"), d.0.join("logs"));
        fs::create_dir_all(&data).unwrap();
        fs::create_dir_all(&logs).unwrap();
        for z in [10, 20, 30, 40, 50] {
            let mut tree = crate::tree::DataTree::new();
            tree.set_last_zxid(z);
            fs::write(data.join(snapshot_name(z)), crate::storage::snapshot::encode_snapshot(&tree)).unwrap();
        }
        // Damaged snapshots, newer than all: they must not count as kept (found by a
        // reviewing helper: the good ones were purged and the server could not start).
        for z in [70, 80, 90] {
            fs::write(data.join(snapshot_name(z)), b"").unwrap();
        }
        fs::write(data.join("snapshot.0000000000000060.tmp"), b"t").unwrap();
        fs::write(data.join("unrelated"), b"u").unwrap();
        for z in [1, 15, 25, 31, 45] {
            fs::write(logs.join(segment_name(z)), b"l").unwrap();
        }
        // retain 1 is raised to 3: keep 30, 40, 50; replay from 31 needs log.31 (31 <= 31).
        let r = purge(&data, &logs, 1).unwrap();
        assert_eq!(r.removed_snapshots, vec![data.join(snapshot_name(10)), data.join(snapshot_name(20))]);
        assert_eq!(
            r.removed_segments,
            vec![logs.join(segment_name(1)), logs.join(segment_name(15)), logs.join(segment_name(25))]
        );
        let left: Vec<i64> = list_segments(&logs).unwrap().into_iter().map(|s| s.0).collect();
        assert_eq!(left, vec![31, 45]);
        assert_eq!(list_snapshots(&data).unwrap().len(), 6, "3 good kept, 3 damaged left alone");
        assert!(data.join("unrelated").exists() && data.join("snapshot.0000000000000060.tmp").exists());
        // Nothing more to do.
        assert_eq!(purge(&data, &logs, 3).unwrap(), PurgeReport::default());
    }
}
