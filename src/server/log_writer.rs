//! The txn log writer (glommio shell over src/storage/log.rs): appends one batch at a time to
//! the current segment with O_DIRECT writes and one fdatasync per batch (group commit), so a
//! returned append is durable; an append of more than `ringkeeper.batchBytesMax` goes out as
//! several batches under it (`plan_batches`). Rules: batches are block aligned and never rewritten; zxids
//! must follow on without gaps (checked, an error otherwise); a DMA buffer is at most
//! `LOG_WRITE_BYTES_MAX` (RLIMIT_MEMLOCK is small), a larger batch goes out in several writes;
//! a new segment is created (named by its first zxid), preallocated and made durable in its
//! directory before its first batch is acknowledged.
//! Preallocation writes zeroes, ahead of need: a background task fills the next segment as
//! `log.spare` while the current one is written, and a roll renames it. Blocks that were
//! `fallocate`d (or left as holes) are "unwritten" extents, and the first write into each
//! makes `fdatasync` commit a metadata change too; into zeroed blocks it is a data flush
//! only, which is most of the cost of a durable write at low load.
//! `fdatasync` is called directly on the pipeline thread: io_uring cannot complete it inline
//! on ext4 or xfs and hands it to a kernel worker thread (two more thread switches per
//! batch, ~60 µs here), and the pipeline waits for it anyway.

use crate::storage::log::{
    parse_segment_name, segment_name, zxid_follows, BatchEncoder, EncodedBatch, BATCH_BODY_BYTES_MAX, LOG_BLOCK_BYTES,
    SPARE_SEGMENT_NAME,
};
use crate::storage::recovery::LogTail;
use crate::txn::codec::record_zxid;
use bytes::Bytes;
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Splits `records` (zxids from `next_zxid` on) into batches: a batch closes before the record
/// that would take its body past `body_bytes_max`, and at a new epoch (whose first record
/// starts a new segment). A record larger than the cap (a leader's, configured with a larger
/// jute.maxbuffer) is a batch of its own; one too large for the format
/// (`BATCH_BODY_BYTES_MAX`), or out of order, is InvalidInput.
pub fn plan_batches(records: &[Bytes], next_zxid: i64, body_bytes_max: usize) -> io::Result<Vec<BatchEncoder>> {
    let mut runs: Vec<BatchEncoder> = Vec::new();
    let mut expected = next_zxid;
    for r in records {
        let found = record_zxid(r);
        let Some(z) = found.filter(|&z| z == expected || zxid_follows(expected - 1, z)) else {
            return Err(invalid(format!("log append out of order: expected zxid {expected:#x}, got {found:?}")));
        };
        if !BatchEncoder::new().has_room(r.len(), BATCH_BODY_BYTES_MAX) {
            return Err(invalid(format!("log record {z:#x} of {} bytes is over any batch's size", r.len())));
        }
        match runs.last_mut() {
            Some(run) if z == expected && run.has_room(r.len(), body_bytes_max) => run.push(r.clone()),
            _ => {
                let mut run = BatchEncoder::new();
                run.push(r.clone());
                runs.push(run);
            }
        }
        expected = z + 1;
    }
    Ok(runs)
}

/// Largest single DMA write (and DMA buffer) the writer makes.
pub const LOG_WRITE_BYTES_MAX: usize = 1024 * 1024;

const _: () = assert!(LOG_WRITE_BYTES_MAX.is_multiple_of(LOG_BLOCK_BYTES));

struct Segment {
    file: DmaFile,
    path: PathBuf,
    /// Next write offset (block aligned).
    offset: u64,
}

pub struct TxnLogWriter {
    log_dir: PathBuf,
    segment: Option<Segment>,
    /// The next segment being zero-filled in the background (`log.spare`), if any.
    spare: Option<glommio::Task<io::Result<DmaFile>>>,
    next_zxid: i64,
    prealloc_bytes: u64,
    force_sync: bool,
    /// Set by a failed append: what reached the disk is unknown, so nothing more is written
    /// (a retry could rewrite a partly written block); the server must stop and recover.
    failed: bool,
    fsync_warning_ms: u64,
    batch_bytes_max: usize,
    slow_syncs: u64,
    /// Every fdatasync: how many, their total and the longest, in µs (fsynctime).
    sync_count: u64,
    sync_total_us: u64,
    sync_max_us: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = Directory::open(dir).await?;
    d.sync().await?;
    d.close().await?;
    Ok(())
}

impl TxnLogWriter {
    /// Opens the writer where recovery left the log: `tail` from `recover()`, `next_zxid` the
    /// zxid of the first record the next append must carry (recovered last_zxid + 1).
    pub async fn open(
        log_dir: &Path,
        tail: &LogTail,
        next_zxid: i64,
        prealloc_bytes: u64,
        force_sync: bool,
    ) -> io::Result<TxnLogWriter> {
        if !tail.next_offset.is_multiple_of(LOG_BLOCK_BYTES as u64) {
            return Err(invalid(format!("log tail offset {} is not block aligned", tail.next_offset)));
        }
        let segment = match &tail.segment {
            None => None,
            Some(path) => Some(open_segment_at(path, tail.next_offset, prealloc_bytes).await?),
        };
        let mut writer = TxnLogWriter {
            log_dir: log_dir.to_path_buf(),
            segment,
            spare: None,
            next_zxid,
            prealloc_bytes,
            force_sync,
            failed: false,
            fsync_warning_ms: crate::config::FSYNC_WARNING_THRESHOLD_MS_DEFAULT,
            batch_bytes_max: crate::config::BATCH_BYTES_DEFAULT,
            slow_syncs: 0,
            sync_count: 0,
            sync_total_us: 0,
            sync_max_us: 0,
        };
        writer.prepare_spare();
        Ok(writer)
    }

    /// Starts zero-filling the next segment in the background (nothing to do without
    /// preallocation). A `log.spare` left by an earlier run is replaced.
    fn prepare_spare(&mut self) {
        if self.prealloc_bytes == 0 || self.spare.is_some() {
            return;
        }
        let path = self.log_dir.join(SPARE_SEGMENT_NAME);
        let bytes = self.prealloc_bytes;
        self.spare = Some(glommio::spawn_local(async move { zero_filled_file(&path, bytes).await }));
    }

    /// Log a warning for every fdatasync of `ms` or more (fsync.warningthresholdms).
    pub fn set_fsync_warning_ms(&mut self, ms: u64) {
        self.fsync_warning_ms = ms;
    }

    /// Caps a batch's body (`ringkeeper.batchBytesMax`): an append larger than this goes out
    /// as several batches.
    pub fn set_batch_bytes_max(&mut self, bytes: usize) {
        self.batch_bytes_max = bytes;
    }

    /// fdatasyncs that took at least the warning threshold so far.
    pub fn slow_syncs(&self) -> u64 {
        self.slow_syncs
    }

    /// fdatasyncs so far: count, total µs, longest µs.
    pub fn sync_times(&self) -> (u64, u64, u64) {
        (self.sync_count, self.sync_total_us, self.sync_max_us)
    }

    /// Zxid the next appended record must carry.
    pub fn next_zxid(&self) -> i64 {
        self.next_zxid
    }

    /// The segment being written and the next write offset in it, if one is open.
    pub fn position(&self) -> Option<(&Path, u64)> {
        self.segment.as_ref().map(|s| (s.path.as_path(), s.offset))
    }

    /// Writes `records` (txn::codec encodings, zxids next_zxid, next_zxid + 1, …) as one batch
    /// and returns once it is durable (one fdatasync; none with force_sync off). A record that
    /// starts a later epoch (`zxid_follows`) starts a new segment, so a run of records may take
    /// one batch per epoch. Records out of order are refused (InvalidInput) without touching
    /// the disk; after an I/O error every later append fails too.
    pub async fn append(&mut self, records: &[Bytes]) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the txn log writer failed earlier; restart to recover the log"));
        }
        let runs = plan_batches(records, self.next_zxid, self.batch_bytes_max)?;
        for run in runs {
            let batch = run.finish();
            if batch.first_zxid() != self.next_zxid {
                // A new epoch: its txns start their own segment, named by its first zxid.
                self.roll().await?;
                self.next_zxid = batch.first_zxid();
            }
            self.failed = true;
            self.write(&batch).await?;
            self.failed = false;
        }
        Ok(())
    }

    /// After installing a snapshot at `zxid` (ZAB's SNAP): drops logged txns after it and
    /// continues the log in a new segment after it (the snapshot covers any gap before).
    pub async fn restart_after_snapshot(&mut self, zxid: i64) -> io::Result<()> {
        self.truncate(zxid).await?;
        if self.next_zxid != zxid + 1 {
            if let Some(seg) = self.segment.take() {
                seg.file.close().await?;
            }
            self.next_zxid = zxid + 1;
        }
        Ok(())
    }

    async fn write(&mut self, batch: &EncodedBatch) -> io::Result<()> {
        let len = batch.len() as u64;
        // A segment with no batch yet is named by the zxid it was made for; a crash may have
        // left one for a txn that never came (the first of an epoch nobody established). Its
        // name must be this batch's first zxid, or recovery would find the wrong zxids in it.
        let misnamed = self.segment.as_ref().is_some_and(|s| {
            s.offset == 0
                && s.path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_name) != Some(batch.first_zxid())
        });
        if misnamed {
            if let Some(seg) = self.segment.take() {
                seg.file.close().await?;
                tracing::info!("removing {}, an empty log segment named for another zxid", seg.path.display());
                std::fs::remove_file(&seg.path)?;
                sync_dir(&self.log_dir).await?;
            }
        }
        if self.segment.as_ref().is_some_and(|s| s.offset > 0 && s.offset + len > self.prealloc_bytes) {
            self.roll().await?;
        }
        if self.segment.is_none() {
            self.segment = Some(self.create_segment(batch.first_zxid()).await?);
        }
        let Some(seg) = self.segment.as_mut() else {
            return Err(invalid("no log segment".into()));
        };
        write_batch(&seg.file, seg.offset, batch).await?;
        if self.force_sync {
            use std::os::fd::AsRawFd;
            // SAFETY: the fd belongs to the open segment file.
            let started = std::time::Instant::now();
            if unsafe { libc::fdatasync(seg.file.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let took_us = started.elapsed().as_micros() as u64;
            self.sync_count += 1;
            self.sync_total_us += took_us;
            self.sync_max_us = self.sync_max_us.max(took_us);
            let took_ms = took_us / 1000;
            if took_ms >= self.fsync_warning_ms {
                self.slow_syncs += 1;
                tracing::warn!(
                    "fdatasync of the txn log {} took {took_ms} ms (fsync.warningthresholdms is {}); every write \
                     waiting for it was delayed as long: check the disk",
                    seg.path.display(),
                    self.fsync_warning_ms
                );
            }
        }
        seg.offset += len;
        self.next_zxid = batch.last_zxid() + 1;
        Ok(())
    }

    /// The segment that starts at `first_zxid`: the zero-filled spare renamed, or (without
    /// preallocation, or when the spare failed) a fresh file. Durable in the directory before
    /// it is returned; the next spare starts filling.
    async fn create_segment(&mut self, first_zxid: i64) -> io::Result<Segment> {
        let path = self.log_dir.join(segment_name(first_zxid));
        self.prepare_spare();
        let spare = match self.spare.take() {
            Some(task) => match task.await {
                Ok(file) => Some(file),
                Err(e) => {
                    tracing::warn!("preparing {SPARE_SEGMENT_NAME} failed ({e}); creating {} directly", path.display());
                    None
                }
            },
            None => None,
        };
        let file = match spare {
            Some(file) => {
                file.rename(&path).await?;
                file
            }
            None => {
                let file = OpenOptions::new().read(true).write(true).create_new(true).dma_open(&path).await?;
                if self.prealloc_bytes > 0 {
                    file.pre_allocate(self.prealloc_bytes, false).await?;
                }
                file.fdatasync().await?;
                file
            }
        };
        sync_dir(&self.log_dir).await?;
        self.prepare_spare();
        Ok(Segment { file, path, offset: 0 })
    }

    /// Removes every logged txn after `after` (ZAB's TRUNC) and continues the log right after
    /// it. Blocks the executor while one segment is rewritten (`storage::truncate`), which is
    /// fine: a follower truncates only while it syncs with a new leader.
    pub async fn truncate(&mut self, after: i64) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the txn log writer failed earlier; restart to recover the log"));
        }
        if let Some(seg) = self.segment.take() {
            seg.file.close().await?;
        }
        self.failed = true;
        let tail = crate::storage::truncate::truncate_log(&self.log_dir, after).map_err(io::Error::other)?;
        self.segment = match &tail.segment {
            None => None,
            Some(path) => Some(open_segment_at(path, tail.next_offset, self.prealloc_bytes).await?),
        };
        self.failed = false;
        self.next_zxid = self.next_zxid.min(after + 1);
        Ok(())
    }

    /// Ends the current segment; the next append starts `log.<next zxid>`. A segment with no
    /// batch yet is kept (it already starts at the next zxid).
    pub async fn roll(&mut self) -> io::Result<()> {
        if self.segment.as_ref().is_some_and(|s| s.offset == 0) {
            return Ok(());
        }
        if let Some(seg) = self.segment.take() {
            seg.file.close().await?;
        }
        Ok(())
    }

    /// Closes the current segment. A spare still being filled is abandoned (the next run
    /// replaces it).
    pub async fn close(mut self) -> io::Result<()> {
        drop(self.spare.take());
        if let Some(seg) = self.segment.take() {
            seg.file.close().await?;
        }
        Ok(())
    }
}

/// Opens an existing segment to append at `offset`, preallocating it if it is short.
async fn open_segment_at(path: &Path, offset: u64, prealloc_bytes: u64) -> io::Result<Segment> {
    let file = OpenOptions::new().read(true).write(true).dma_open(path).await?;
    if file.file_size().await? < prealloc_bytes {
        file.pre_allocate(prealloc_bytes, false).await?;
        file.fdatasync().await?;
    }
    Ok(Segment { file, path: path.to_path_buf(), offset })
}

/// Creates `path` (replacing any old file of that name) as `bytes` of zeroes, written with
/// O_DIRECT and made durable, and returns it open.
async fn zero_filled_file(path: &Path, bytes: u64) -> io::Result<DmaFile> {
    match glommio::io::remove(path).await {
        Ok(()) => {}
        Err(e) => {
            let e = io::Error::from(e);
            if e.kind() != io::ErrorKind::NotFound {
                return Err(e);
            }
        }
    }
    let file = OpenOptions::new().read(true).write(true).create_new(true).dma_open(path).await?;
    let len = (bytes as usize).next_multiple_of(LOG_BLOCK_BYTES);
    write_blocks(&file, 0, len, |_, buf| buf.fill(0)).await?;
    file.fdatasync().await?;
    Ok(file)
}

/// Writes a batch at `offset` through buffers of at most LOG_WRITE_BYTES_MAX, one at a time
/// (the batch bytes are copied once, from the records into each DMA buffer).
async fn write_batch(file: &DmaFile, offset: u64, batch: &EncodedBatch) -> io::Result<()> {
    write_blocks(file, offset, batch.len(), |done, buf| batch.write_to(done, buf)).await
}

/// Writes `len` bytes (a multiple of the block size) at `offset` through DMA buffers of at
/// most LOG_WRITE_BYTES_MAX, one at a time; `fill(done, buf)` fills each buffer with the bytes
/// from `done` on. A short but aligned write continues from where it stopped.
async fn write_blocks(
    file: &DmaFile,
    offset: u64,
    len: usize,
    mut fill: impl FnMut(usize, &mut [u8]),
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let n = (len - done).min(LOG_WRITE_BYTES_MAX);
        let mut buf = file.alloc_dma_buffer(n);
        fill(done, &mut buf.as_bytes_mut()[..n]);
        let written = file.write_at(buf, offset + done as u64).await?;
        if written == 0 || !written.is_multiple_of(LOG_BLOCK_BYTES) {
            return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short log write: {written} of {n} bytes")));
        }
        done += written.min(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::recovery::{rebuild_tree, recover};
    use crate::txn::{codec, Txn, TxnHeader, TxnOp};
    use bytes::BytesMut;
    use glommio::LocalExecutorBuilder;

    fn txn(zxid: i64, data_len: usize) -> Bytes {
        let op = if zxid == 1 {
            TxnOp::Create {
                path: "/n".into(),
                data: None,
                acl: crate::tree::acl::open_acl_unsafe(),
                ephemeral_owner: 0,
                response_type: 1,
            }
        } else {
            TxnOp::SetData { path: "/n".into(), data: Some(Bytes::from(vec![(zxid % 251) as u8; data_len])) }
        };
        let mut b = BytesMut::new();
        codec::encode(&Txn { header: TxnHeader { zxid, session_id: 5, cxid: 1, time_ms: zxid }, op }, &mut b);
        b.freeze()
    }

    #[test]
    fn append_reopen_roll_and_recover() {
        let dir = std::env::temp_dir().join(format!("rk-logwriter-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (data, logs) = (dir.join("data"), dir.join("log"));
        std::fs::create_dir_all(&logs).unwrap();
        let prealloc = 64 * 1024u64;
        // A spare left by a crash, half written with junk: replaced, never read as a segment.
        std::fs::write(logs.join(SPARE_SEGMENT_NAME), vec![0xabu8; 10_000]).unwrap();
        let (d2, l2) = (data.clone(), logs.clone());
        let first_len = LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d2, &l2).unwrap();
                let mut w = TxnLogWriter::open(&l2, &rec.tail, rec.last_zxid + 1, prealloc, true).await.unwrap();
                w.append(&[txn(1, 0), txn(2, 10)]).await.unwrap();
                w.append(&[txn(3, 100)]).await.unwrap();
                // The first segment came from a zero-filled spare, and the next spare is on its way.
                let seg = std::fs::read(l2.join(segment_name(1))).unwrap();
                assert_eq!(seg.len() as u64, prealloc);
                let used = w.position().unwrap().1 as usize;
                assert!(used > 0 && seg[used..].iter().all(|b| *b == 0), "preallocated space reads as zeroes");
                w.prepare_spare();
                let spare = w.spare.take().unwrap().await.unwrap();
                assert_eq!(spare.file_size().await.unwrap(), prealloc);
                w.spare = None;
                spare.close().await.unwrap();
                let bytes = std::fs::read(l2.join(SPARE_SEGMENT_NAME)).unwrap();
                assert!(bytes.len() as u64 == prealloc && bytes.iter().all(|b| *b == 0));
                // Out of order is refused, and the writer stays usable.
                assert_eq!(w.append(&[txn(5, 1)]).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
                // A batch of ~2.5 MiB goes out in several DMA writes (and outgrows the prealloc).
                w.append(&(4..14).map(|z| txn(z, 250 * 1024)).collect::<Vec<_>>()).await.unwrap();
                let first_len = w.position().unwrap().1;
                w.close().await.unwrap();
                first_len
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(first_len > 2 * LOG_WRITE_BYTES_MAX as u64);
        let (d3, l3) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d3, &l3).unwrap();
                assert_eq!((rec.last_zxid, rec.records.len()), (13, 13));
                assert_eq!(rec.tail.next_offset, first_len);
                let mut w = TxnLogWriter::open(&l3, &rec.tail, 14, prealloc, true).await.unwrap();
                // Continues in the same segment? No: it is past the prealloc size, so it rolls.
                w.append(&[txn(14, 5)]).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name(14)));
                for z in 15..40 {
                    w.append(&[txn(z, 3000)]).await.unwrap();
                }
                w.roll().await.unwrap();
                w.roll().await.unwrap();
                w.append(&[txn(40, 1)]).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name(40)));
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let segs: Vec<i64> = crate::storage::files::list_segments(&logs).unwrap().into_iter().map(|s| s.0).collect();
        assert_eq!(segs.first(), Some(&1));
        assert!(segs.contains(&14) && segs.contains(&40) && segs.len() >= 4, "{segs:?}");
        let rec = recover(&data, &logs).unwrap();
        assert_eq!((rec.last_zxid, rec.records.len()), (40, 40));
        for (i, r) in rec.records.iter().enumerate() {
            let z = i as i64 + 1;
            let size = match z {
                1 => 0,
                2 => 10,
                3 => 100,
                4..=13 => 250 * 1024,
                14 => 5,
                40 => 1,
                _ => 3000,
            };
            assert_eq!(r, &txn(z, size), "record {z}");
        }
        let tree = rebuild_tree(&rec).unwrap();
        assert_eq!(tree.last_zxid(), 40);
        assert_eq!(tree.get("/n").unwrap().stat().version, 39);

        // TRUNC: cut after zxid 20 (inside a segment), then go on from 21 with new txns.
        let (d4, l4) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d4, &l4).unwrap();
                let mut w = TxnLogWriter::open(&l4, &rec.tail, 41, prealloc, true).await.unwrap();
                w.truncate(20).await.unwrap();
                assert_eq!(w.next_zxid(), 21);
                w.append(&[txn(21, 77), txn(22, 78)]).await.unwrap();
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        assert_eq!((rec.last_zxid, rec.records.len()), (22, 22));
        assert_eq!(rec.records[19], txn(20, 3000));
        assert_eq!((&rec.records[20], &rec.records[21]), (&txn(21, 77), &txn(22, 78)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An ensemble's log: a batch that crosses into a new epoch splits into one segment per
    /// epoch; a SNAP restarts the log after the snapshot; recovery follows both.
    #[test]
    fn epochs_start_segments_and_snapshots_restart_the_log() {
        let dir = crate::storage::files::tests::TempDir::new("logwriter-epochs");
        let (data, logs) = (dir.0.join("data"), dir.0.join("log"));
        let e2 = 2i64 << 32;
        let (d, l) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d, &l).unwrap();
                let mut w = TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, true).await.unwrap();
                // With fsync.warningthresholdms=0 every fdatasync counts as slow (and is logged).
                w.set_fsync_warning_ms(0);
                w.append(&[txn(1, 0), txn(2, 1), txn(e2 | 1, 2), txn(e2 | 2, 3)]).await.unwrap();
                assert_eq!(w.slow_syncs(), 2, "one fdatasync per epoch's batch");
                assert!(w.position().unwrap().0.ends_with(segment_name(e2 | 1)));
                // A gap inside an epoch, or a later epoch not at counter 1, is refused.
                assert_eq!(w.append(&[txn(e2 | 4, 1)]).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
                assert_eq!(w.append(&[txn((3 << 32) | 2, 1)]).await.unwrap_err().kind(), io::ErrorKind::InvalidInput);
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        let zxids: Vec<i64> = rec.records.iter().map(|r| codec::record_zxid(r).unwrap()).collect();
        assert_eq!(zxids, vec![1, 2, e2 | 1, e2 | 2]);

        // SNAP at (2, 7), past the log's end: the log goes on after the snapshot.
        let snap_at = e2 | 7;
        let mut tree = rebuild_tree(&rec).unwrap();
        tree.set_last_zxid(snap_at);
        crate::storage::files::write_atomic(
            &data.join(crate::storage::snapshot::snapshot_name(snap_at)),
            &crate::storage::snapshot::encode_snapshot(&tree),
        )
        .unwrap();
        let (d, l) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d, &l).unwrap();
                assert_eq!((rec.snapshot_zxid, rec.records.len()), (snap_at, 0));
                let mut w = TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, true).await.unwrap();
                w.restart_after_snapshot(snap_at).await.unwrap();
                w.append(&[txn((3 << 32) | 1, 4)]).await.unwrap();
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        assert_eq!((rec.snapshot_zxid, rec.last_zxid, rec.records.len()), (snap_at, (3 << 32) | 1, 1));
    }

    /// Recovers the log, opens a writer where recovery left it, appends `records`, closes.
    fn append_after_recovery(data: &Path, logs: &Path, records: Vec<Bytes>) {
        let (d, l) = (data.to_path_buf(), logs.to_path_buf());
        LocalExecutorBuilder::default()
            .io_memory(2 << 20)
            .spawn(move || async move {
                let rec = recover(&d, &l).unwrap();
                let mut w = TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, true).await.unwrap();
                w.append(&records).await.unwrap();
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A crash right after the first segment of a new epoch was created (before its first
    /// batch) leaves an empty segment named for a txn that may never come; when the log goes on
    /// with another zxid (a later epoch, or more of the old one) that segment is replaced,
    /// and recovery reads the log fine (found by a reviewing helper: the later epoch's txns
    /// were written into the misnamed segment and the next start-up refused the log).
    #[test]
    fn an_empty_segment_left_by_a_crash_is_replaced_when_the_log_goes_elsewhere() {
        let dir = crate::storage::files::tests::TempDir::new("logwriter-empty-seg");
        let (data, logs) = (dir.0.join("data"), dir.0.join("log"));
        let (e1, e2) = (1i64 << 32, 2i64 << 32);
        for (i, next) in [(e2 | 1), 3].into_iter().enumerate() {
            let _ = std::fs::remove_dir_all(&logs);
            append_after_recovery(&data, &logs, vec![txn(1, 0), txn(2, 1)]);
            // The crash state: the epoch-1 segment exists, zero-filled, with no batch.
            std::fs::write(logs.join(segment_name(e1 | 1)), vec![0u8; 64 * 1024]).unwrap();
            append_after_recovery(&data, &logs, vec![txn(next, 5)]);
            let rec = recover(&data, &logs).unwrap_or_else(|e| panic!("case {i}: {e}"));
            let zxids: Vec<i64> = rec.records.iter().map(|r| codec::record_zxid(r).unwrap()).collect();
            assert_eq!(zxids, vec![1, 2, next], "case {i}");
            assert!(!logs.join(segment_name(e1 | 1)).exists(), "case {i}: the misnamed segment is gone");
        }
    }
}
