//! The snapshot writer: encodes an O(1) clone of the DataTree (a held root: the tree is a
//! persistent, `Send + Sync` structure) and writes it to `snapshot.<zxid>.tmp`, fdatasyncs it,
//! renames it to `snapshot.<zxid>` and fsyncs the directory — all on a blocking thread, never
//! on an executor: `write_snapshot` hands the clone to the executor's blocking pool
//! (the pipeline executor's pool is unpinned, `offcore::BLOCKING_THREADS`) and only
//! awaits the result (`server::offcore`). Autopurge runs in the same blocking job, after the
//! snapshot is durable.
//! Rules: the pipeline core spends O(1) on a snapshot (the clone) and never waits on its I/O
//! or CPU; memory is the encoder's walk (O(depth)) plus one write buffer of
//! `SNAPSHOT_WRITE_BYTES_MAX`; the snapshot is visible under its final name only once durable,
//! and a failed write leaves no temp file behind.

use crate::storage::files::{fsync_dir, PurgeReport};
use crate::storage::snapshot::{snapshot_name, SnapshotEncoder, SNAPSHOT_TMP_SUFFIX};
use crate::tree::DataTree;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Bytes encoded before each write(2) of a snapshot.
pub const SNAPSHOT_WRITE_BYTES_MAX: usize = 1024 * 1024;

/// Autopurge to run after a snapshot: keep the newest `retain` snapshots (and the logs they
/// need) of `data_dir` / `log_dir`.
#[derive(Debug, Clone)]
pub struct PurgeJob {
    pub data_dir: PathBuf,
    pub log_dir: PathBuf,
    pub retain: usize,
}

/// What one snapshot job did: the snapshot (its path once durable), and the purge if one ran.
#[derive(Debug)]
pub struct SnapshotOutcome {
    pub snapshot: io::Result<PathBuf>,
    pub purge: Option<io::Result<PurgeReport>>,
}

/// Writes `tree` (a clone taken at a txn boundary) as `data_dir/snapshot.<last zxid>` on a
/// blocking thread, then runs `purge` there if given; resolves once both are done. Must be
/// called on a glommio executor.
pub async fn write_snapshot(data_dir: PathBuf, tree: DataTree, purge: Option<PurgeJob>) -> SnapshotOutcome {
    super::offcore::run(move || {
        let snapshot = write_snapshot_blocking(&data_dir, &tree);
        // The tree clone is released here, on the blocking thread, not on the executor.
        drop(tree);
        let purge = purge.map(|j| crate::storage::files::purge(&j.data_dir, &j.log_dir, j.retain));
        SnapshotOutcome { snapshot, purge }
    })
    .await
}

/// Writes `tree` as `data_dir/snapshot.<last zxid>` with blocking I/O and returns its path once
/// it is durable (file data, the rename, the directory entry).
pub fn write_snapshot_blocking(data_dir: &Path, tree: &DataTree) -> io::Result<PathBuf> {
    let name = snapshot_name(tree.last_zxid());
    let final_path = data_dir.join(&name);
    let tmp_path = data_dir.join(format!("{name}{SNAPSHOT_TMP_SUFFIX}"));
    if let Err(e) = write_body(&tmp_path, tree).and_then(|()| fs::rename(&tmp_path, &final_path)) {
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    fsync_dir(data_dir)?;
    Ok(final_path)
}

fn write_body(tmp_path: &Path, tree: &DataTree) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(true).open(tmp_path)?;
    let mut enc = SnapshotEncoder::new(tree);
    let mut buf: Vec<u8> = Vec::with_capacity(SNAPSHOT_WRITE_BYTES_MAX * 2);
    loop {
        let done = enc.next_chunk(&mut buf, SNAPSHOT_WRITE_BYTES_MAX);
        file.write_all(&buf)?;
        buf.clear();
        if done {
            break;
        }
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Acl;
    use crate::storage::files::{list_segments, list_snapshots};
    use crate::storage::log::segment_name;
    use crate::storage::snapshot::decode_snapshot;
    use bytes::Bytes;
    use glommio::{LocalExecutorBuilder, Placement, PoolPlacement};
    use std::sync::Arc;

    fn tree_at(nodes: usize, sessions: i64) -> DataTree {
        let mut t = DataTree::new();
        let acl: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
        for s in 1..=sessions {
            t.add_session(s, 6000);
        }
        let mut z = 0;
        for i in 0..nodes {
            z += 1;
            t.create_node(
                &format!("/d{i}"),
                Some(Bytes::from(vec![i as u8; 3000])),
                acl.clone(),
                if i % 7 == 0 && sessions > 0 { 1 } else { 0 },
                z,
                z,
            );
        }
        t.set_last_zxid(z);
        t
    }

    /// On an executor whose blocking pool is the pipeline's (`server::run`).
    fn on_executor<F, Fut>(f: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(2 << 20)
            .blocking_thread_pool_placement(PoolPlacement::Unbound(crate::server::offcore::BLOCKING_THREADS))
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn issue13_snapshot_written_on_the_blocking_pool_reads_back_identical() {
        let dir = crate::storage::files::tests::TempDir::new("snapwriter");
        let d = dir.0.clone();
        on_executor(move || async move {
            let t = tree_at(300, 9);
            let copy = t.clone();
            let out = write_snapshot(d.clone(), t, None).await;
            let path = out.snapshot.unwrap();
            assert!(out.purge.is_none());
            assert!(path.ends_with(snapshot_name(300)));
            let bytes = std::fs::read(&path).unwrap();
            let back = decode_snapshot(&bytes).unwrap();
            crate::storage::snapshot::tests::assert_same_tree(&copy, &back);
            // Byte for byte the format the chunked encoder gives.
            assert_eq!(bytes, crate::storage::snapshot::encode_snapshot(&copy));
            // A small tree (less than one write) too, at a later zxid.
            let mut small = DataTree::new();
            small.set_last_zxid(301);
            let p2 = write_snapshot(d.clone(), small, None).await.snapshot.unwrap();
            assert_eq!(decode_snapshot(&std::fs::read(&p2).unwrap()).unwrap().last_zxid(), 301);
        });
        let names: Vec<String> =
            std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| !n.ends_with(SNAPSHOT_TMP_SUFFIX)));
    }

    #[test]
    fn issue13_a_failed_snapshot_leaves_no_temp_file() {
        let dir = crate::storage::files::tests::TempDir::new("snapwriter-fail");
        // The final name is taken by a directory: the rename fails after the temp was written.
        let t = tree_at(3, 0);
        std::fs::create_dir(dir.0.join(snapshot_name(3))).unwrap();
        std::fs::write(dir.0.join(snapshot_name(3)).join("x"), b"x").unwrap();
        let d = dir.0.clone();
        on_executor(move || async move {
            assert!(write_snapshot(d, t, None).await.snapshot.is_err());
        });
        assert!(!dir.0.join(format!("{}{SNAPSHOT_TMP_SUFFIX}", snapshot_name(3))).exists());
    }

    /// Autopurge runs in the snapshot's blocking job while the executor goes on: a writer task
    /// keeps applying txns to its own tree and snapshotting clones of it; purge keeps the newest
    /// `retain` snapshots and the log segments replay from the oldest kept one needs, and every
    /// kept snapshot decodes to the tree as it was when its clone was taken.
    #[test]
    fn issue13_autopurge_off_the_executor_keeps_the_right_files_while_writes_go_on() {
        let dir = crate::storage::files::tests::TempDir::new("snapwriter-purge");
        let (data, logs) = (dir.0.join("data"), dir.0.join("logs"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&logs).unwrap();
        let (d, l) = (data.clone(), logs.clone());
        on_executor(move || async move {
            let acl: Arc<[Acl]> = crate::tree::acl::open_acl_unsafe().into();
            let mut tree = DataTree::new();
            let mut taken = Vec::new();
            let mut z = 0i64;
            for round in 0..6 {
                // A log segment for this round's txns (purge only looks at names).
                std::fs::write(l.join(segment_name(z + 1)), b"seg").unwrap();
                for i in 0..50 {
                    z += 1;
                    tree.create_node(
                        &format!("/r{round}-{i}"),
                        Some(Bytes::from(vec![1u8; 100])),
                        acl.clone(),
                        0,
                        z,
                        z,
                    );
                    tree.set_last_zxid(z);
                }
                let snap = tree.clone();
                taken.push(snap.clone());
                let job = PurgeJob { data_dir: d.clone(), log_dir: l.clone(), retain: 3 };
                let writing = glommio::spawn_local(write_snapshot(d.clone(), snap, Some(job)));
                // Writes go on on the executor while the snapshot and the purge run.
                for i in 0..50 {
                    z += 1;
                    tree.create_node(&format!("/w{round}-{i}"), None::<&[u8]>, acl.clone(), 0, z, z);
                    tree.set_last_zxid(z);
                }
                let out = writing.await;
                out.snapshot.unwrap();
                out.purge.unwrap().unwrap();
            }
            let kept = list_snapshots(&d).unwrap();
            let zxids: Vec<i64> = kept.iter().map(|k| k.0).collect();
            assert_eq!(zxids, vec![350, 450, 550], "the newest three snapshots");
            for (zxid, p) in kept {
                let back = decode_snapshot(&std::fs::read(&p).unwrap()).unwrap();
                let want = taken.iter().find(|t| t.last_zxid() == zxid).unwrap();
                crate::storage::snapshot::tests::assert_same_tree(want, &back);
            }
            // Replay from 350 needs the segment starting at 301 and every later one.
            let segs: Vec<i64> = list_segments(&l).unwrap().into_iter().map(|s| s.0).collect();
            assert_eq!(segs, vec![301, 401, 501]);
        });
    }
}
