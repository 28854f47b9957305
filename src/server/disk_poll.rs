//! Whether glommio may put a disk's DMA I/O on its IOPOLL ring (the txn log's writes).
//!
//! glommio 0.9 decides per device, the first time a thread opens a DMA file there: it tries a
//! polled read, and unless the kernel refuses it with ENOTSUP it sends every DMA read and write
//! on that device through a ring set up with IORING_SETUP_IOPOLL. There a completion is posted
//! only when the executor polls for it, and an executor with one in flight never sleeps. Recent
//! kernels accept polled I/O on a queue that has no poll queues (`queue/io_poll` 0: NVMe
//! without `nvme.poll_queues`, the default, and virtio disks) and complete it by interrupt:
//! the executor then spins through every write, and where CPUs are shared a finished write
//! waits until its thread runs again. Measured here (3 members on 2 CPUs, 2.2k writes/s): log
//! writes that the disk finished in under 3 ms were reported 60-700 ms later, on every member
//! at once; with the log off the poll ring, p99 fell from 150-700 ms to 7 ms.
//!
//! Rule: before a thread opens the txn log on a device whose queue does not poll, it opens a
//! probe file there write-only: glommio's probe read then fails (EBADF), and glommio keeps
//! that device off the poll ring for that thread (it caches the answer per thread and
//! device). A device that polls keeps glommio's choice. The probe's failure is glommio's one
//! error line in `glommio::reactor`, which the logging setup silences (`main.rs`).

use glommio::io::OpenOptions;
use std::path::{Path, PathBuf};

/// The probe file, made and removed in the log's directory.
const PROBE_FILE_NAME: &str = ".ringkeeper-iopoll-probe";

/// The sysfs directory of the whole block device holding `dev` (major, minor): a partition's
/// queue is its disk's. None where sysfs does not know it (not a block device).
fn device_dir(sys_dev_block: &Path, major: u32, minor: u32) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(sys_dev_block.join(format!("{major}:{minor}"))).ok()?;
    if dir.join("partition").exists() {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir)
}

/// Whether the queue of the device holding `dev` polls (`queue/io_poll` is 1). Unreadable or
/// absent: it does not.
fn queue_polls(sys_dev_block: &Path, major: u32, minor: u32) -> bool {
    let Some(dir) = device_dir(sys_dev_block, major, minor) else { return false };
    std::fs::read_to_string(dir.join("queue").join("io_poll")).is_ok_and(|s| s.trim() == "1")
}

/// Whether the device holding `dir` polls.
fn dir_polls(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else { return false };
    let dev = meta.dev();
    queue_polls(Path::new("/sys/dev/block"), libc::major(dev), libc::minor(dev))
}

/// Keeps the device of `dir` off glommio's IOPOLL ring for this thread, unless its queue polls
/// (see the module doc). Call it on the executor thread before it opens DMA files in `dir`.
/// Nothing is lost if it cannot (the files then go where glommio decides); it says so. Runs
/// once per log open, before the core serves: its blocking calls are a stat of `dir` and
/// reads of sysfs (kernel memory, no disk); the probe file goes through glommio.
pub async fn keep_off_poll_ring_unless_it_polls(dir: &Path) {
    if dir_polls(dir) {
        tracing::info!("{}: the disk's queue polls (io_poll 1); the txn log uses glommio's poll ring", dir.display());
        return;
    }
    tracing::info!(
        "{}: the disk's queue does not poll (io_poll 0); the txn log's writes are kept off glommio's poll ring",
        dir.display()
    );
    let path = dir.join(PROBE_FILE_NAME);
    match OpenOptions::new().write(true).create(true).truncate(true).dma_open(&path).await {
        Ok(f) => {
            let _ = f.close().await;
        }
        Err(e) => tracing::warn!(
            "{}: could not make {PROBE_FILE_NAME} ({e}); the txn log's writes may be polled for on a disk that \
             does not poll",
            dir.display()
        ),
    }
    if let Err(e) = super::log_writer::remove_if_present(&path).await {
        tracing::warn!("removing {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use glommio::LocalExecutorBuilder;

    fn fake_sysfs(root: &Path, io_poll: &str) {
        // sys/dev/block/8:0 -> devices/sda; 8:1 -> devices/sda/sda1 (a partition).
        let disk = root.join("devices").join("sda");
        std::fs::create_dir_all(disk.join("queue")).unwrap();
        std::fs::write(disk.join("queue").join("io_poll"), io_poll).unwrap();
        std::fs::create_dir_all(disk.join("sda1")).unwrap();
        std::fs::write(disk.join("sda1").join("partition"), "1\n").unwrap();
        let links = root.join("dev").join("block");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&disk, links.join("8:0")).unwrap();
        std::os::unix::fs::symlink(disk.join("sda1"), links.join("8:1")).unwrap();
    }

    #[test]
    fn a_partition_answers_with_its_disks_queue() {
        let root = std::env::temp_dir().join(format!("rk-diskpoll-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (io_poll, polls) in [("0\n", false), ("1\n", true)] {
            fake_sysfs(&root, io_poll);
            let links = root.join("dev").join("block");
            assert_eq!(queue_polls(&links, 8, 0), polls, "disk, io_poll {io_poll:?}");
            assert_eq!(queue_polls(&links, 8, 1), polls, "partition, io_poll {io_poll:?}");
            assert!(!queue_polls(&links, 9, 0), "a device sysfs does not know does not poll");
            std::fs::remove_dir_all(&root).unwrap();
        }
    }

    /// After the probe, the log's DMA writes on a device that does not poll go through the
    /// main ring, where a completion wakes the executor, and none through the poll ring; on a
    /// device that polls, glommio's choice stands.
    #[test]
    fn dma_writes_stay_off_the_poll_ring_where_the_disk_does_not_poll() {
        let dir = std::env::temp_dir().join(format!("rk-diskpoll-ring-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let polls = dir_polls(&dir);
        let d = dir.clone();
        let (main_writes, poll_writes) = LocalExecutorBuilder::default()
            .spawn(move || async move {
                keep_off_poll_ring_unless_it_polls(&d).await;
                assert!(!d.join(PROBE_FILE_NAME).exists(), "the probe file is removed");
                let _ = glommio::executor().io_stats(); // counts from here
                let f = OpenOptions::new().read(true).write(true).create(true).dma_open(d.join("f")).await.unwrap();
                let mut buf = f.alloc_dma_buffer(4096);
                buf.as_bytes_mut().fill(7);
                assert_eq!(f.write_at(buf, 0).await.unwrap(), 4096);
                f.close().await.unwrap();
                let stats = glommio::executor().io_stats();
                (stats.main_ring.file_writes().0, stats.poll_ring.file_writes().0)
            })
            .unwrap()
            .join()
            .unwrap();
        if polls {
            assert_eq!((main_writes, poll_writes), (0, 1), "a polling disk keeps the poll ring");
        } else {
            assert_eq!(
                (main_writes, poll_writes),
                (1, 0),
                "the write went to the poll ring of a disk that does not poll"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
