//! A leader's DIFF from the txn log on disk (`zab::peer::Output::ReadLog`): the txns after a
//! follower's last zxid that the in-memory window (commitLogCount) no longer holds, read from
//! the log segments, or None (the follower gets a SNAP) when they are larger than ZooKeeper's
//! limit: snapshotSizeFactor × the size of the newest snapshot (negative: never read; no
//! snapshot yet: no limit), as `ZKDatabase.getProposalsFromTxnLog` decides.
//! Rules: blocking std::fs, so it runs on glommio's blocking pool (`ensemble.rs`), never on an
//! executor; it keeps at most the limit's worth of txns; a segment still being appended is read
//! only as far as its valid batches go (the txns wanted are older than anything in flight);
//! anything it cannot read whole is None, never a partial DIFF, and never one with a hole: each
//! txn must follow the one before it (the next counter of its epoch, or the first of a later
//! epoch with no snapshot between them, since a SNAP installed past the log's end leaves the
//! log with a hole at a snapshot point), and a segment damaged before the wanted end is read no
//! further than its damage.

use crate::storage::files::{list_segments, segment_index_for};
use crate::storage::log::scan_valid_prefix;
use crate::txn::codec::record_zxid;
use crate::zab::{epoch_of, Txn, Zxid};
use std::path::{Path, PathBuf};

/// What a log read came to.
#[derive(Debug, PartialEq, Eq)]
pub enum DiffRead {
    /// The txns in (after, upto], in order.
    Txns(Vec<Txn>),
    /// Larger than the limit (bytes of records read so far, the limit).
    TooLarge { bytes: u64, limit: u64 },
    /// Not in the log whole (`after` missing, a gap, or `upto` not reached); named.
    Missing(String),
}

/// The byte limit for a DIFF read from disk: `factor` × the newest snapshot's size; None when
/// reading is disabled (negative factor); u64::MAX with no snapshot. `snapshots`: the data
/// directory's, oldest first (`list_snapshots`).
pub fn diff_bytes_limit(snapshots: &[(Zxid, PathBuf)], factor: f64) -> std::io::Result<Option<u64>> {
    if factor < 0.0 {
        return Ok(None);
    }
    let Some((_, newest)) = snapshots.last() else { return Ok(Some(u64::MAX)) };
    let size = std::fs::metadata(newest)?.len();
    Ok(Some((size as f64 * factor) as u64))
}

/// Whether `next` can directly follow `prev` in a log whose snapshots are at `snapshots`: the
/// next counter of the same epoch, or the first txn of a later epoch with no snapshot strictly
/// between (a follower that installed a SNAP past its log's end logs on from the snapshot).
fn follows(prev: Zxid, next: Zxid, snapshots: &[Zxid]) -> bool {
    if next == prev + 1 {
        return true;
    }
    let first_of_later_epoch = epoch_of(next) > epoch_of(prev) && next as u32 == 1;
    first_of_later_epoch && !snapshots.iter().any(|s| prev < *s && *s < next)
}

/// Reads the txns after `after`, up to `upto`, from the segments in `log_dir`; with
/// `check_after`, `after` itself must be there. Stops at `bytes_limit` bytes of records.
/// `snapshots` are the zxids of the snapshots in the data directory (see `follows`).
pub fn read_diff(
    log_dir: &Path,
    snapshots: &[Zxid],
    after: Zxid,
    upto: Zxid,
    check_after: bool,
    bytes_limit: u64,
) -> DiffRead {
    let segments = match list_segments(log_dir) {
        Ok(s) => s,
        Err(e) => return DiffRead::Missing(format!("listing {}: {e}", log_dir.display())),
    };
    // The segment holding `after` (or the first one after it, when `after` is a snapshot point
    // at a segment boundary).
    let start = segment_index_for(&segments, after).unwrap_or(0);
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut found_after = !check_after;
    for (first, path) in &segments[start..] {
        if *first > upto {
            break;
        }
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) => return DiffRead::Missing(format!("reading {}: {e}", path.display())),
        };
        let (scan, damage) = scan_valid_prefix(&data, Some(*first));
        for r in scan.records {
            let Some(z) = record_zxid(&r) else {
                return DiffRead::Missing(format!("a short record in {}", path.display()));
            };
            if z == after {
                found_after = true;
            }
            if z <= after {
                continue;
            }
            if z > upto {
                break;
            }
            let prev = out.last().map_or(after, |t: &Txn| t.zxid);
            if !follows(prev, z, snapshots) {
                return DiffRead::Missing(format!("zxid {z:#x} does not follow {prev:#x} in {}", path.display()));
            }
            bytes += r.len() as u64;
            if bytes > bytes_limit {
                return DiffRead::TooLarge { bytes, limit: bytes_limit };
            }
            out.push(Txn { zxid: z, data: r });
        }
        let reached = out.last().is_some_and(|t| t.zxid >= upto);
        if let (Some((offset, why)), false) = (damage, reached) {
            return DiffRead::Missing(format!("{} is damaged at offset {offset} ({why:?})", path.display()));
        }
    }
    if !found_after {
        return DiffRead::Missing(format!("zxid {after:#x} is not in the log"));
    }
    if out.last().map(|t| t.zxid) != Some(upto) {
        return DiffRead::Missing(format!("the log does not reach {upto:#x}"));
    }
    DiffRead::Txns(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::files::list_snapshots;
    use crate::storage::files::tests::TempDir;
    use crate::storage::log::{encode_batch, sectorize, segment_name};
    use bytes::Bytes;

    fn record(zxid: Zxid, len: usize) -> Bytes {
        let mut r = zxid.to_be_bytes().to_vec();
        r.resize(8 + len, 7);
        Bytes::from(r)
    }

    fn write_segment(dir: &Path, zxids: std::ops::RangeInclusive<Zxid>) {
        let first = *zxids.start();
        let mut logical = Vec::new();
        for z in zxids {
            logical.extend(encode_batch(&[record(z, 40)]));
        }
        let mut file = sectorize(&logical);
        file.resize(file.len() + 4096, 0);
        std::fs::write(dir.join(segment_name(first)), file).unwrap();
    }

    #[test]
    fn issue13_commit_log_count_and_snapshot_size_factor_keys() {
        use crate::config::{Config, COMMIT_LOG_COUNT_DEFAULT, EMBEDDED_DEFAULT_CFG};
        let (c, w) = Config::parse(EMBEDDED_DEFAULT_CFG, "t").unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((c.commit_log_count, c.snapshot_size_factor), (COMMIT_LOG_COUNT_DEFAULT, 0.33));
        let text = format!("{EMBEDDED_DEFAULT_CFG}\nzookeeper.commitLogCount=2000\nsnapshotSizeFactor=-1\n");
        let (c, w) = Config::parse(&text, "t").unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((c.commit_log_count, c.snapshot_size_factor), (2000, -1.0));
        // As ZooKeeper: below 500 is raised to 500, above 1 falls back to 0.33; both say so.
        let text = format!("{EMBEDDED_DEFAULT_CFG}\ncommitLogCount=10\nsnapshotSizeFactor=1.5\n");
        let (c, w) = Config::parse(&text, "t").unwrap();
        assert_eq!((c.commit_log_count, c.snapshot_size_factor, w.len()), (500, 0.33, 2), "{w:?}");
        let text = format!("{EMBEDDED_DEFAULT_CFG}\nsnapshotSizeFactor=lots\n");
        assert!(Config::parse(&text, "t").is_err());
    }

    #[test]
    fn issue13_diff_read_from_segments_checks_after_limit_and_reach() {
        let dir = TempDir::new("diff-read");
        write_segment(&dir.0, 1..=10);
        write_segment(&dir.0, 11..=20);
        let DiffRead::Txns(t) = read_diff(&dir.0, &[], 5, 15, true, u64::MAX) else { panic!("a whole read") };
        assert_eq!(t.iter().map(|t| t.zxid).collect::<Vec<_>>(), (6..=15).collect::<Vec<_>>());
        assert_eq!(t[0].data, record(6, 40));
        // `after` must be there when asked; a snapshot point need not be.
        assert!(matches!(read_diff(&dir.0, &[], 0, 3, true, u64::MAX), DiffRead::Missing(_)));
        assert!(matches!(read_diff(&dir.0, &[], 0, 3, false, u64::MAX), DiffRead::Txns(t) if t.len() == 3));
        // Not reaching `upto` is no DIFF.
        assert!(matches!(read_diff(&dir.0, &[], 5, 25, true, u64::MAX), DiffRead::Missing(_)));
        // Over the byte limit: a SNAP instead.
        assert!(matches!(read_diff(&dir.0, &[], 5, 15, true, 100), DiffRead::TooLarge { limit: 100, .. }));
        // The limit: factor × the newest snapshot's size; negative disables; none: unlimited.
        assert_eq!(diff_bytes_limit(&list_snapshots(&dir.0).unwrap(), 0.33).unwrap(), Some(u64::MAX));
        std::fs::write(dir.0.join(crate::storage::snapshot::snapshot_name(20)), vec![0u8; 1000]).unwrap();
        assert_eq!(diff_bytes_limit(&list_snapshots(&dir.0).unwrap(), 0.33).unwrap(), Some(330));
        assert_eq!(diff_bytes_limit(&list_snapshots(&dir.0).unwrap(), -1.0).unwrap(), None);
    }

    fn zxids(read: &DiffRead) -> Vec<Zxid> {
        match read {
            DiffRead::Txns(t) => t.iter().map(|t| t.zxid).collect(),
            other => panic!("not a whole read: {other:?}"),
        }
    }

    #[test]
    fn a_log_with_a_hole_where_a_snap_was_installed_gives_no_diff() {
        use crate::zab::make_zxid as z;
        // A follower's log ended at (1,5) when it installed its leader's SNAP at (1,9); it
        // logged on from (1,10). Later, as leader, it must not DIFF across (1,5]..(1,10).
        let dir = TempDir::new("diff-hole");
        write_segment(&dir.0, z(1, 1)..=z(1, 5));
        write_segment(&dir.0, z(1, 10)..=z(1, 20));
        let read = read_diff(&dir.0, &[z(1, 9)], z(1, 3), z(1, 12), true, u64::MAX);
        assert!(matches!(&read, DiffRead::Missing(why) if why.contains("does not follow")), "{read:?}");
        // Either side of the hole alone is whole.
        assert_eq!(
            zxids(&read_diff(&dir.0, &[z(1, 9)], z(1, 1), z(1, 5), true, u64::MAX)),
            vec![z(1, 2), z(1, 3), z(1, 4), z(1, 5)]
        );
        assert_eq!(zxids(&read_diff(&dir.0, &[z(1, 9)], z(1, 9), z(1, 11), false, u64::MAX)), vec![z(1, 10), z(1, 11)]);
        // Starting from a snapshot point that is not in the log, the first txn must follow it.
        assert!(matches!(read_diff(&dir.0, &[z(1, 8)], z(1, 8), z(1, 11), false, u64::MAX), DiffRead::Missing(_)));
    }

    #[test]
    fn a_new_epoch_follows_the_last_one_unless_a_snapshot_lies_between() {
        use crate::zab::make_zxid as z;
        let dir = TempDir::new("diff-epochs");
        write_segment(&dir.0, z(1, 1)..=z(1, 5));
        write_segment(&dir.0, z(2, 1)..=z(2, 5));
        let across = |snapshots: &[Zxid]| read_diff(&dir.0, snapshots, z(1, 3), z(2, 2), true, u64::MAX);
        assert_eq!(zxids(&across(&[])), vec![z(1, 4), z(1, 5), z(2, 1), z(2, 2)]);
        // A snapshot at the old epoch's end is no hole; one past what the log holds is.
        assert_eq!(zxids(&across(&[z(1, 5)])).len(), 4);
        assert!(matches!(across(&[z(1, 7)]), DiffRead::Missing(_)));
    }

    #[test]
    fn a_segment_damaged_before_the_wanted_end_gives_no_diff() {
        use crate::zab::make_zxid as z;
        // The damage falls at the end of an epoch's last segment, where the next epoch's first
        // txn would otherwise look like the one to follow.
        let dir = TempDir::new("diff-damage");
        write_segment(&dir.0, z(1, 1)..=z(1, 40));
        write_segment(&dir.0, z(2, 1)..=z(2, 5));
        let path = dir.0.join(segment_name(z(1, 1)));
        let mut file = std::fs::read(&path).unwrap();
        let data_end = file.len() - 4096;
        file[data_end - 100] ^= 0x40;
        std::fs::write(&path, file).unwrap();
        let read = read_diff(&dir.0, &[], z(1, 3), z(2, 2), true, u64::MAX);
        assert!(matches!(&read, DiffRead::Missing(why) if why.contains("damaged")), "{read:?}");
        // What lies before the damage is still read whole.
        assert_eq!(zxids(&read_diff(&dir.0, &[], z(1, 3), z(1, 6), true, u64::MAX)).len(), 3);
    }
}
