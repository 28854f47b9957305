//! The txn log writer (glommio shell over src/storage/log.rs): appends one batch at a time to
//! the current segment with O_DIRECT writes and one sync per batch (group commit), so a
//! returned append is durable; an append of more than `ringkeeper.batchBytesMax` goes out as
//! several batches under it (`plan_batches`). Rules: batches are packed in crc-sealed sectors
//! (`storage::log::AppendPoint`): a write starts at the partly filled block at the end of the
//! data and writes the bytes already there unchanged, so no acknowledged byte changes; zxids
//! must follow on without gaps (checked, an error otherwise); a DMA buffer is at most
//! `LOG_WRITE_BYTES_MAX` (RLIMIT_MEMLOCK is small), a larger batch goes out in several writes;
//! a new segment is created (named by its first zxid), preallocated and made durable in its
//! directory before its first batch is acknowledged.
//! Preallocation writes zeroes, ahead of need: a background task fills the next segment as
//! `log.spare` while the current one is written, and a roll renames it. Blocks that were
//! `fallocate`d (or left as holes) are "unwritten" extents, and the first write into each
//! makes `fdatasync` commit a metadata change too; into zeroed blocks it is a data flush
//! only, which is most of the cost of a durable write at low load. The fill is paced and a
//! roll never waits for it: a spare taken early goes on being filled ahead of the log's writes
//! in its new segment (`log_spare.rs`, whose rules this writer keeps).
//! The sync (`SyncMode`): the standalone pipeline calls `fdatasync` directly on its thread
//! (io_uring cannot complete one inline on ext4 or xfs and hands it to a worker thread, two
//! more thread switches per batch, ~60 µs here; and that pipeline has nothing to do
//! meanwhile). No ensemble member's loop stops on its disk (`set_sync`, per append): a
//! follower submits its fdatasync through io_uring, so it goes on answering pings (its
//! clients' session touches) and applying the others' commits; a leader writes through an
//! O_DSYNC fd of the segment, so its loop takes in acks and commits while its append is in
//! flight. The log's DMA I/O stays off glommio's IOPOLL ring unless the disk polls
//! (`disk_poll`).

use super::log_spare::{FillPace, ZeroFill};
use crate::storage::log::{
    align_up, parse_segment_name, segment_name, zxid_follows, AppendPoint, BatchEncoder, EncodedBatch,
    BATCH_BODY_BYTES_MAX, LOG_BLOCK_BYTES, SPARE_SEGMENT_NAME,
};
use crate::storage::recovery::LogTail;
use crate::txn::codec::record_zxid;
use bytes::Bytes;
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

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

/// Space left free when the spare segment is sized: a spare never takes the last free space
/// of the log's file system (snapshots and the log itself need it).
pub const LOG_SPARE_RESERVE_BYTES: u64 = 16 * 1024 * 1024;
/// Smallest spare (or preallocation) worth making; with less room than this plus the reserve
/// a segment is created directly, without preallocation, and grows as it is written.
pub const LOG_SPARE_BYTES_MIN: u64 = 1024 * 1024;

struct Segment {
    file: DmaFile,
    /// The same file opened O_DIRECT|O_DSYNC, for write-through appends (opened at the first).
    through: Option<DmaFile>,
    path: PathBuf,
    /// Where the next batch goes (logical offset) and the bytes of the block it starts in.
    at: AppendPoint,
    /// The file size batches go into before the log rolls (its preallocated size, or
    /// `preAllocSize` for a segment that grows as it is written).
    limit: u64,
    /// End of the file range a failed write (disk full) may have written: the next write
    /// covers it again (zeroes after its data), so no stale sector of it stays behind.
    dirty_end: u64,
    /// The zero fill still going on in this segment (it was taken from the spare early).
    fill: Option<ZeroFill>,
}

impl Segment {
    async fn close(mut self) -> io::Result<()> {
        if let Some(mut fill) = self.fill.take() {
            fill.stop().await;
        }
        if let Some(through) = self.through {
            through.close().await?;
        }
        Ok(self.file.close().await?)
    }

    /// Rewrites the range a failed write may have written (`dirty_end`): the block the data
    /// ends in with its acknowledged bytes, zeroes after, up to the failed write's end or the
    /// file's, whichever is first (blocks past the file's end were never written), then syncs.
    /// On a file system that overwrites in place those blocks take no new space; elsewhere
    /// (copy on write) this may fail on a full disk too, and the caller keeps the segment.
    async fn clear_failed_write(&mut self) -> io::Result<()> {
        if self.dirty_end == 0 {
            return Ok(());
        }
        let start = self.at.write_offset();
        let file_end =
            self.file.file_size().await.map_err(io::Error::from)? / LOG_BLOCK_BYTES as u64 * LOG_BLOCK_BYTES as u64;
        let end = self.dirty_end.min(file_end);
        if end > start {
            if let Some(fill) = self.fill.as_mut() {
                fill.before_log_write(end).await;
            }
            let at = &self.at;
            tracing::info!(
                "clearing bytes {start}..{end} of {}, left by a write that failed (never acknowledged)",
                self.path.display()
            );
            write_blocks(&self.file, start, (end - start) as usize, |done, buf| at.fill_cleared(done, buf)).await?;
            self.file.fdatasync().await.map_err(io::Error::from)?;
        }
        self.dirty_end = 0;
        Ok(())
    }
}

/// True for the errors of a full disk (or quota): the write is refused, the writer stays
/// usable, and a later append tries again.
pub fn is_disk_full(e: &io::Error) -> bool {
    // glommio's errors keep the kind (not the errno) when they become io::Errors.
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || matches!(e.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded)
}

/// Bytes an unprivileged writer may still use in the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| invalid(e.to_string()))?;
    // SAFETY: statvfs is plain old data; zeroes are a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a statvfs struct to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// How much to preallocate for a new segment with `free` bytes available: `prealloc`, or
/// what is free minus `LOG_SPARE_RESERVE_BYTES` if that is less, in whole blocks; None if that
/// is below `LOG_SPARE_BYTES_MIN` (or preallocation is off).
pub fn sized_prealloc(prealloc: u64, free: u64) -> Option<u64> {
    let room = free.saturating_sub(LOG_SPARE_RESERVE_BYTES);
    let size = prealloc.min(room) / LOG_BLOCK_BYTES as u64 * LOG_BLOCK_BYTES as u64;
    (prealloc > 0 && size >= LOG_SPARE_BYTES_MIN.min(prealloc)).then_some(size)
}

/// The size a segment of `file_size` bytes is filled to before the log rolls: its size if it
/// was preallocated smaller than preAllocSize, else preAllocSize (a segment made without
/// preallocation grows to it; one a large batch grew past it rolls).
fn segment_limit(file_size: u64, prealloc: u64) -> u64 {
    if file_size >= LOG_SPARE_BYTES_MIN.min(prealloc).max(1) {
        file_size.min(prealloc)
    } else {
        prealloc
    }
}

/// How an append is made durable (forceSync, and who waits for the disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// forceSync=no: written, never synced (ZooKeeper's option for throwaway data).
    Off,
    /// An O_DIRECT write, then fdatasync on the calling thread: the fastest durable write
    /// (the flush's completion wakes this thread directly), but the thread's loop stops
    /// meanwhile. For the standalone pipeline (nothing it could take in would finish a write
    /// sooner, and a blocked thread is not woken by every batch the client cores send, as a
    /// loop parked on the write's completion is).
    Fdatasync,
    /// An O_DIRECT write, then fdatasync through io_uring: the kernel hands the flush to a
    /// worker thread of its own (two more thread switches than `Fdatasync`), and this thread's
    /// loop goes on meanwhile. For an ensemble's followers: while its sync is out, a follower
    /// goes on answering its leader's pings (which carry its clients' session touches) and
    /// applying the commits the others make, as ZooKeeper's follower does (its
    /// SyncRequestProcessor is a thread of its own); a follower stopped on a hung disk would
    /// let its clients' sessions expire and answer none of their writes.
    FdatasyncAside,
    /// The segment written through a second fd opened O_DIRECT|O_DSYNC: a write completes once
    /// its blocks are durable (the kernel flushes the device's cache in a worker of its own, two
    /// more wake-ups than `Fdatasync`), so the thread never blocks on the disk. For an
    /// ensemble's leader, whose loop must go on taking in acks, sending heartbeats and
    /// committing while its own append is in flight: the followers' acks are a quorum without
    /// the leader's own, and a leader whose loop stopped on a slow disk would lose them.
    WriteThrough,
}

pub struct TxnLogWriter {
    log_dir: PathBuf,
    segment: Option<Segment>,
    /// The next segment being zero-filled in the background (`log.spare`), if any.
    spare: Option<ZeroFill>,
    fill_pace: FillPace,
    /// Bytes the appends have written, for the spare's pace (read by its task, same thread).
    written: Rc<Cell<u64>>,
    next_zxid: i64,
    prealloc_bytes: u64,
    sync: SyncMode,
    /// Set by a failed append: what reached the disk is unknown, so nothing more is written
    /// (a retry could rewrite a partly written block); the server must stop and recover.
    failed: bool,
    fsync_warning_ms: u64,
    /// The last reduced preallocation logged (so a full disk does not log it at every try).
    small_prealloc_said: std::cell::Cell<Option<u64>>,
    batch_bytes_max: usize,
    slow_syncs: u64,
    /// Every fdatasync: how many, their total and the longest, in µs (fsynctime).
    sync_count: u64,
    sync_total_us: u64,
    sync_max_us: u64,
    /// Where each batch's write + fdatasync time goes (`stage_latency::Stage::LogFsync`), once
    /// the server says (`time_batches_into`); this core is that histogram's only writer.
    batch_stats: Option<std::sync::Arc<super::stats::Stats>>,
    /// Tests: batch writes left before the next one fails as a full disk would (None: never).
    #[cfg(test)]
    disk_full_after_writes: Option<u32>,
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
        sync: SyncMode,
    ) -> io::Result<TxnLogWriter> {
        super::disk_poll::keep_off_poll_ring_unless_it_polls(log_dir).await;
        let segment = match &tail.segment {
            None => None,
            Some(path) => Some(open_segment_at(path, tail.next_offset, prealloc_bytes).await?),
        };
        let mut writer = TxnLogWriter {
            log_dir: log_dir.to_path_buf(),
            segment,
            spare: None,
            fill_pace: FillPace::default(),
            written: Rc::new(Cell::new(0)),
            next_zxid,
            prealloc_bytes,
            sync,
            failed: false,
            fsync_warning_ms: crate::config::FSYNC_WARNING_THRESHOLD_MS_DEFAULT,
            small_prealloc_said: std::cell::Cell::new(Some(prealloc_bytes)),
            batch_bytes_max: crate::config::BATCH_BYTES_DEFAULT,
            slow_syncs: 0,
            sync_count: 0,
            sync_total_us: 0,
            sync_max_us: 0,
            batch_stats: None,
            #[cfg(test)]
            disk_full_after_writes: None,
        };
        writer.prepare_spare();
        Ok(writer)
    }

    /// Starts zero-filling the next segment in the background (nothing to do without
    /// preallocation), sized to the free space (`sized_prealloc`): with too little room there is
    /// no spare and the next segment is created directly. A `log.spare` left by an earlier run
    /// is replaced (its space counts as free).
    fn prepare_spare(&mut self) {
        let room = self.segment.as_ref().map_or(0, |s| s.limit.saturating_sub(s.at.write_offset()));
        self.prepare_spare_within(room, None);
    }

    /// `prepare_spare` when the log may write `room` more bytes before it needs the spare (0:
    /// at once, so the fill is not paced); its writes wait for `after`, the new segment's own
    /// fill (one fill at a time).
    fn prepare_spare_within(&mut self, room: u64, after: Option<&ZeroFill>) {
        if self.prealloc_bytes == 0 || self.spare.is_some() {
            return;
        }
        let path = self.log_dir.join(SPARE_SEGMENT_NAME);
        let old_spare = std::fs::metadata(&path).map_or(0, |m| m.len());
        let Some(bytes) = self.prealloc_for(old_spare) else {
            // Nothing to make now; but an old spare (say, a partly written one) goes.
            if old_spare > 0 {
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::warn!("removing {}: {e}", path.display());
                }
            }
            return;
        };
        // The room the log has left is the time the fill has, in log bytes.
        self.spare = Some(ZeroFill::start(path, bytes, room, self.written.clone(), self.fill_pace, after));
    }

    /// The preallocation a new segment gets now (`sized_prealloc` of the free space, counting
    /// `also_free` bytes that will be freed first).
    fn prealloc_for(&self, also_free: u64) -> Option<u64> {
        match free_bytes(&self.log_dir) {
            Ok(free) => {
                let size = sized_prealloc(self.prealloc_bytes, free + also_free);
                // Said once per change, not at every try while the disk stays full.
                if size.is_none_or(|s| s < self.prealloc_bytes) && self.small_prealloc_said.replace(size) != size {
                    tracing::warn!(
                        "{} bytes free in the txn log's file system: preallocating {} bytes for the next segment \
                         instead of preAllocSize {} (keeping {} free)",
                        free + also_free,
                        size.unwrap_or(0),
                        self.prealloc_bytes,
                        LOG_SPARE_RESERVE_BYTES
                    );
                }
                size
            }
            Err(e) => {
                tracing::warn!("statvfs {}: {e}; preallocating preAllocSize", self.log_dir.display());
                Some(self.prealloc_bytes)
            }
        }
    }

    /// The zero fill's pace for the spares made from now on (tests slow it down).
    #[cfg(test)]
    fn set_fill_pace(&mut self, pace: FillPace) {
        self.fill_pace = pace;
    }

    /// The zero fill going on in the current segment: (bytes zeroed, its length).
    #[cfg(test)]
    fn live_fill(&self) -> Option<(u64, u64)> {
        self.segment.as_ref()?.fill.as_ref().filter(|f| !f.has_ended()).map(|f| (f.zeroed(), f.file_len()))
    }

    /// Switches the sync for the appends from now on (an ensemble member's role changed); a
    /// writer with `Off` (forceSync=no) stays so.
    pub fn set_sync(&mut self, sync: SyncMode) {
        assert!(sync != SyncMode::Off, "forceSync is set once, at start");
        if self.sync != SyncMode::Off {
            self.sync = sync;
        }
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

    /// Records every batch's write and fdatasync time in `stats` (the pipeline core's stages).
    pub fn time_batches_into(&mut self, stats: std::sync::Arc<super::stats::Stats>) {
        self.batch_stats = Some(stats);
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

    /// The segment being written and the logical offset of the next batch in it, if one is
    /// open.
    pub fn position(&self) -> Option<(&Path, u64)> {
        self.segment.as_ref().map(|s| (s.path.as_path(), s.at.next_offset()))
    }

    /// Writes `records` (txn::codec encodings, zxids next_zxid, next_zxid + 1, …) as one batch
    /// and returns once it is durable (one fdatasync, or write-through writes; no sync with
    /// `SyncMode::Off`). A record that
    /// starts a later epoch (`zxid_follows`) starts a new segment, so a run of records may take
    /// one batch per epoch (or per `batchBytesMax`). Records out of order are refused
    /// (InvalidInput) without touching the disk; after an I/O error every later append fails
    /// too. A full disk (`is_disk_full`) is not such an error: the batches written before it are
    /// durable, the one it refused left nothing the next write does not cover, and the writer
    /// goes on; `next_zxid` then says where the durable log ends, so a caller whose append
    /// took several batches learns which of its records are logged, and appends the rest again.
    pub async fn append(&mut self, records: &[Bytes]) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the txn log writer failed earlier; restart to recover the log"));
        }
        let runs = plan_batches(records, self.next_zxid, self.batch_bytes_max)?;
        for run in runs {
            let batch = run.finish();
            self.failed = true;
            let written = async {
                if batch.first_zxid() != self.next_zxid {
                    // A new epoch: its txns start their own segment, named by its first zxid.
                    self.roll().await?;
                    self.next_zxid = batch.first_zxid();
                }
                self.write(&batch).await
            }
            .await;
            // A full disk leaves the log as it was before this batch (a failed roll kept its
            // segment or closed it cleared; the next write covers the failed one's range): the
            // writer stays usable, and a later append tries again from `next_zxid`.
            if written.is_ok() || written.as_ref().is_err_and(is_disk_full) {
                self.failed = false;
            }
            written?;
        }
        Ok(())
    }

    /// After installing a snapshot at `zxid` (ZAB's SNAP): drops logged txns after it and
    /// continues the log in a new segment after it (the snapshot covers any gap before).
    pub async fn restart_after_snapshot(&mut self, zxid: i64) -> io::Result<()> {
        self.truncate(zxid).await?;
        if self.next_zxid != zxid + 1 {
            self.close_segment().await?;
            self.next_zxid = zxid + 1;
        }
        Ok(())
    }

    async fn write(&mut self, batch: &EncodedBatch) -> io::Result<()> {
        #[cfg(test)]
        if let Some(left) = self.disk_full_after_writes.as_mut() {
            if *left == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            *left -= 1;
        }
        let len = batch.len();
        // A segment with no batch yet is named by the zxid it was made for; a crash may have
        // left one for a txn that never came (the first of an epoch nobody established). Its
        // name must be this batch's first zxid, or recovery would find the wrong zxids in it.
        let misnamed = self.segment.as_ref().is_some_and(|s| {
            s.at.next_offset() == 0
                && s.path.file_name().and_then(|n| n.to_str()).and_then(parse_segment_name) != Some(batch.first_zxid())
        });
        if misnamed {
            if let Some(seg) = self.segment.take() {
                let path = seg.path.clone();
                seg.close().await?;
                tracing::info!("removing {}, an empty log segment named for another zxid", path.display());
                glommio::io::remove(&path).await.map_err(io::Error::from)?;
                sync_dir(&self.log_dir).await?;
            }
        }
        if self.segment.as_ref().is_some_and(|s| s.at.next_offset() > 0 && s.at.data_end_after(len) > s.limit) {
            self.roll().await?;
        }
        if self.segment.is_none() {
            self.segment = Some(self.create_segment(batch.first_zxid()).await?);
        }
        let Some(seg) = self.segment.as_mut() else {
            return Err(invalid("no log segment".into()));
        };
        let start = seg.at.write_offset();
        let mut write_len = seg.at.write_len(len);
        if seg.dirty_end > start {
            write_len = write_len.max(align_up((seg.dirty_end - start) as usize));
        }
        if self.sync == SyncMode::WriteThrough && seg.through.is_none() {
            seg.through = Some(open_write_through(&seg.path).await?);
        }
        let file = match (&seg.through, self.sync) {
            (Some(through), SyncMode::WriteThrough) => through,
            _ => &seg.file,
        };
        if let Some(fill) = seg.fill.as_mut() {
            fill.before_log_write(start + write_len as u64).await;
        }
        let at = &seg.at;
        let batch_started = std::time::Instant::now();
        if let Err(e) = write_blocks(file, start, write_len, |done, buf| at.fill(batch, done, buf)).await {
            seg.dirty_end = seg.dirty_end.max(start + write_len as u64);
            return Err(e);
        }
        // Timed as a sync (fsynctime, the warning threshold): the fdatasync alone, or with
        // write-through the whole write, which is its sync.
        let sync_started = match self.sync {
            SyncMode::Off => None,
            SyncMode::WriteThrough => Some(batch_started),
            SyncMode::Fdatasync | SyncMode::FdatasyncAside => {
                let started = std::time::Instant::now();
                let synced = if self.sync == SyncMode::FdatasyncAside {
                    seg.file.fdatasync().await.map_err(io::Error::from)
                } else {
                    use std::os::fd::AsRawFd;
                    // SAFETY: the fd belongs to the open segment file.
                    match unsafe { libc::fdatasync(seg.file.as_raw_fd()) } {
                        0 => Ok(()),
                        _ => Err(io::Error::last_os_error()),
                    }
                };
                if let Err(e) = synced {
                    seg.dirty_end = seg.dirty_end.max(start + write_len as u64);
                    return Err(e);
                }
                Some(started)
            }
        };
        if let Some(started) = sync_started {
            let took_us = started.elapsed().as_micros() as u64;
            self.sync_count += 1;
            self.sync_total_us += took_us;
            self.sync_max_us = self.sync_max_us.max(took_us);
            let took_ms = took_us / 1000;
            if took_ms >= self.fsync_warning_ms {
                self.slow_syncs += 1;
                tracing::warn!(
                    "syncing the txn log {} took {took_ms} ms (fsync.warningthresholdms is {}); every write \
                     waiting for it was delayed as long: check the disk",
                    seg.path.display(),
                    self.fsync_warning_ms
                );
            }
        }
        if let Some(stats) = &self.batch_stats {
            stats.pipeline_stages.get(super::stage_latency::Stage::LogFsync).record_since(batch_started);
        }
        seg.at = seg.at.after(batch);
        seg.dirty_end = 0;
        // How far the write point moved (the spare's pace; not the block rewritten each time).
        self.written.set(self.written.get() + seg.at.write_offset().saturating_sub(start));
        self.next_zxid = batch.last_zxid() + 1;
        if seg.fill.as_ref().is_some_and(|f| f.has_ended()) {
            seg.fill = None;
        }
        Ok(())
    }

    /// The segment that starts at `first_zxid`: the spare renamed, however far its zero fill
    /// is (the fill goes on in it), or (without preallocation, or when the spare failed) a
    /// fresh file. Durable in the directory before it is returned; the next spare starts
    /// filling, once this segment's own fill has ended.
    async fn create_segment(&mut self, first_zxid: i64) -> io::Result<Segment> {
        let path = self.log_dir.join(segment_name(first_zxid));
        self.prepare_spare();
        let spare = match self.spare.take() {
            Some(spare) => match spare.hand_over(&path).await {
                Ok(fill) => Some(fill),
                Err(e) => {
                    tracing::warn!("preparing {SPARE_SEGMENT_NAME} failed ({e}); creating {} directly", path.display());
                    None
                }
            },
            None => None,
        };
        let mut fill = None;
        let file = match spare {
            Some(mut spare) => match OpenOptions::new().read(true).write(true).dma_open(&path).await {
                Ok(file) => {
                    fill = Some(spare);
                    file
                }
                Err(e) => {
                    // The renamed spare holds space and would block the next try's create_new:
                    // removed (it holds no data yet).
                    spare.stop().await;
                    let _ = remove_if_present(&path).await;
                    return Err(io::Error::from(e));
                }
            },
            None => {
                let file = OpenOptions::new().read(true).write(true).create_new(true).dma_open(&path).await?;
                let size = self.prealloc_for(0);
                let made = async {
                    if let Some(size) = size {
                        match file.pre_allocate(size, false).await.map_err(io::Error::from) {
                            // A file system without fallocate: the segment grows as it is written.
                            Err(e) if e.kind() != io::ErrorKind::Unsupported => return Err(e),
                            _ => {}
                        }
                    }
                    file.fdatasync().await.map_err(io::Error::from)
                }
                .await;
                if let Err(e) = made {
                    // Leave no half-made segment behind (it would hold space, and block the
                    // next try's create_new).
                    let _ = file.close().await;
                    let _ = remove_if_present(&path).await;
                    return Err(e);
                }
                file
            }
        };
        let made = async {
            sync_dir(&self.log_dir).await?;
            file.file_size().await.map_err(io::Error::from)
        }
        .await;
        let file_size = match made {
            Ok(size) => size,
            Err(e) => {
                if let Some(mut fill) = fill {
                    fill.stop().await;
                }
                // As above: no data in it yet, and left it would block the next try.
                let _ = file.close().await;
                let _ = remove_if_present(&path).await;
                return Err(e);
            }
        };
        let limit = segment_limit(file_size, self.prealloc_bytes);
        // The new segment is not `self.segment` yet: its whole room is the next spare's time.
        self.prepare_spare_within(limit, fill.as_ref());
        Ok(Segment { file, through: None, path, at: AppendPoint::start(), limit, dirty_end: 0, fill })
    }

    /// Removes every logged txn after `after` (ZAB's TRUNC) and continues the log right after
    /// it. Blocks the executor while one segment is rewritten (`storage::truncate`), which is
    /// fine: a follower truncates only while it syncs with a new leader.
    pub async fn truncate(&mut self, after: i64) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the txn log writer failed earlier; restart to recover the log"));
        }
        self.close_segment().await?;
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
        if self.segment.as_ref().is_some_and(|s| s.at.next_offset() == 0) {
            return Ok(());
        }
        self.close_segment().await
    }

    /// Closes the current segment, first clearing what a failed write (a full disk) left past
    /// the end of its data: the next write would have covered it, but in a closed segment it
    /// would stay, a torn batch no longer at the log's end, which recovery must take for
    /// damage. The clear runs while the segment is still current, so if it fails the segment
    /// stays, and the next write covers the range.
    async fn close_segment(&mut self) -> io::Result<()> {
        if let Some(seg) = self.segment.as_mut() {
            seg.clear_failed_write().await?;
        }
        if let Some(seg) = self.segment.take() {
            seg.close().await?;
        }
        Ok(())
    }

    /// Closes the current segment (cleared as `close_segment` does, unless an I/O error made
    /// this writer stop writing). A spare still being filled is stopped and left (the next run
    /// replaces it).
    pub async fn close(mut self) -> io::Result<()> {
        if let Some(mut spare) = self.spare.take() {
            spare.stop().await;
        }
        if !self.failed {
            self.close_segment().await?;
        }
        if let Some(seg) = self.segment.take() {
            seg.close().await?;
        }
        Ok(())
    }
}

/// A segment opened for write-through appends: O_DIRECT|O_DSYNC, so a write's completion means
/// its blocks are durable (the kernel flushes the device's cache before it completes it).
async fn open_write_through(path: &Path) -> io::Result<DmaFile> {
    Ok(OpenOptions::new().read(true).write(true).custom_flags(libc::O_DSYNC).dma_open(path).await?)
}

/// Opens an existing segment to append at logical offset `next`; the block holding `next` is
/// read back, since the next write rewrites its first part. It is not grown: a segment made
/// smaller than preAllocSize (little free space) rolls at its size, one made without
/// preallocation grows up to preAllocSize.
async fn open_segment_at(path: &Path, next: u64, prealloc_bytes: u64) -> io::Result<Segment> {
    let file = OpenOptions::new().read(true).write(true).dma_open(path).await?;
    let at = if next == 0 {
        AppendPoint::start()
    } else {
        let block = read_tail_block(path, AppendPoint::block_offset_for(next))?;
        AppendPoint::from_block(next, &block).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: the block before the log's end: {e}", path.display()),
            )
        })?
    };
    let limit = segment_limit(file.file_size().await?, prealloc_bytes);
    Ok(Segment { file, through: None, path: path.to_path_buf(), at, limit, dirty_end: 0, fill: None })
}

/// The 4 KiB block of `path` at `offset`, zeroes past the end of the file. Read with one
/// blocking pread (page cache or one block from disk), and only when a segment is opened to
/// continue it (start-up, after a TRUNC): a DMA read there failed with EOPNOTSUPP after a
/// TRUNC had rewritten the segment, which stopped the member.
fn read_tail_block(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)?;
    let mut block = vec![0u8; LOG_BLOCK_BYTES];
    let mut done = 0;
    while done < block.len() {
        match file.read_at(&mut block[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(block)
}

/// Removes `path` through glommio's blocking pool (not on the executor's thread); a file
/// already gone is not an error.
pub(super) async fn remove_if_present(path: &Path) -> io::Result<()> {
    match glommio::io::remove(path).await.map_err(io::Error::from) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The bytes a write of `n` took: an error if it wrote none or stopped off a block boundary.
pub(super) fn checked_write(written: usize, n: usize) -> io::Result<usize> {
    if written == 0 || !written.is_multiple_of(LOG_BLOCK_BYTES) {
        return Err(io::Error::new(io::ErrorKind::WriteZero, format!("short log write: {written} of {n} bytes")));
    }
    Ok(written.min(n))
}

/// Writes `len` bytes (a multiple of the block size) at `offset` through DMA buffers of at
/// most LOG_WRITE_BYTES_MAX, one at a time; `fill(done, buf)` fills each buffer with the bytes
/// from `done` on (a batch: `AppendPoint::fill`, so record bytes are copied once, sector by
/// sector, straight into the DMA buffer). A short but aligned write continues from where it stopped.
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
        done += checked_write(written, n)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::storage::recovery::{rebuild_tree, recover};
    use crate::txn::{codec, Txn, TxnHeader, TxnOp};
    use bytes::BytesMut;
    use glommio::LocalExecutorBuilder;

    /// An encoded txn: a create of /n at zxid 1, else a setData of `data_len` bytes.
    pub(crate) fn txn(zxid: i64, data_len: usize) -> Bytes {
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

    /// The spare never takes the last free space: preAllocSize when there is room for it and
    /// the reserve, what is free minus the reserve when less, nothing below the floor.
    #[test]
    fn hardening_8_the_spare_is_sized_to_the_free_space() {
        let mib = 1024 * 1024u64;
        let p = 64 * mib;
        assert_eq!(sized_prealloc(p, 1000 * mib), Some(p));
        assert_eq!(sized_prealloc(p, 52 * mib + 12345), Some(36 * mib + 12288));
        assert_eq!(sized_prealloc(p, LOG_SPARE_RESERVE_BYTES + LOG_SPARE_BYTES_MIN), Some(LOG_SPARE_BYTES_MIN));
        assert_eq!(sized_prealloc(p, LOG_SPARE_RESERVE_BYTES + LOG_SPARE_BYTES_MIN - 4096), None);
        assert_eq!(sized_prealloc(p, 0), None);
        assert_eq!(sized_prealloc(0, 1000 * mib), None, "preallocation off");
        // A small preAllocSize is kept whole when it fits.
        assert_eq!(sized_prealloc(64 * 1024, 20 * mib), Some(64 * 1024));
        assert_eq!(segment_limit(36 * mib, p), 36 * mib);
        assert_eq!(segment_limit(0, p), p, "a segment made without preallocation grows to preAllocSize");
        assert_eq!(segment_limit(80 * mib, p), p, "a segment a large batch grew rolls");
        assert!(free_bytes(Path::new("/")).is_ok());
        assert!(is_disk_full(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_disk_full(&io::Error::new(io::ErrorKind::StorageFull, "glommio's")));
        assert!(!is_disk_full(&io::Error::from_raw_os_error(libc::EIO)));
    }

    /// A spare larger than one DMA buffer (its full-size writes share one zeroed buffer, the
    /// last is shorter) reads back as zeroes, over io memory that held other bytes before.
    #[test]
    fn a_spare_of_several_writes_is_all_zeroes() {
        let dir = std::env::temp_dir().join(format!("rk-zerofill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SPARE_SEGMENT_NAME);
        let len = 2 * LOG_WRITE_BYTES_MAX + 3 * LOG_BLOCK_BYTES;
        std::fs::write(&path, vec![0xcdu8; len + LOG_BLOCK_BYTES]).unwrap();
        let p2 = path.clone();
        LocalExecutorBuilder::default()
            .io_memory(4 << 20)
            .spawn(move || async move {
                let junk = OpenOptions::new().read(true).dma_open(&p2).await.unwrap();
                for _ in 0..3 {
                    let mut b = junk.alloc_dma_buffer(LOG_WRITE_BYTES_MAX);
                    b.as_bytes_mut().fill(0xab);
                }
                junk.close().await.unwrap();
                let fill = ZeroFill::start(p2.clone(), len as u64, 0, Rc::new(Cell::new(0)), FillPace::default(), None);
                assert!(fill.finish().await, "zeroed throughout");
            })
            .unwrap()
            .join()
            .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), len, "the old file was replaced, not overwritten");
        assert!(bytes.iter().all(|b| *b == 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn append_reopen_roll_and_recover_with_fdatasync() {
        append_reopen_roll_and_recover(SyncMode::Fdatasync);
    }

    #[test]
    fn append_reopen_roll_and_recover_write_through() {
        append_reopen_roll_and_recover(SyncMode::WriteThrough);
    }

    /// A write that failed (a full disk) after its first block, then a roll before any write
    /// covered it (a snapshot was due): the closed segment ends at the acknowledged data, so
    /// recovery reads every acknowledged txn and the ones appended after in the next segment.
    /// Without the clear it found a torn batch in a segment that is not the last, and refused.
    #[test]
    fn a_roll_after_a_failed_write_clears_its_blocks() {
        let dir = crate::storage::files::tests::TempDir::new("logwriter-torn");
        let (data, logs) = (dir.0.join("data"), dir.0.join("log"));
        std::fs::create_dir_all(&logs).unwrap();
        let (d2, l2) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(4 << 20)
            .spawn(move || async move {
                let mut w = reopened(&d2, &l2, 0).await;
                w.append(&[txn(1, 0), txn(2, 3_000)]).await.unwrap();
                // What the failed append of txns 3 and 4 left: its first block, as a short write.
                let batch = plan_batches(&[txn(3, 9_000), txn(4, 9_000)], 3, usize::MAX).unwrap().remove(0).finish();
                let seg = w.segment.as_mut().unwrap();
                let (start, len) = (seg.at.write_offset(), seg.at.write_len(batch.len()));
                assert!(len > LOG_BLOCK_BYTES);
                let at = &seg.at;
                write_blocks(&seg.file, start, LOG_BLOCK_BYTES, |done, buf| at.fill(&batch, done, buf)).await.unwrap();
                seg.dirty_end = start + len as u64;
                w.roll().await.unwrap();
                w.append(&[txn(3, 10)]).await.unwrap();
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        assert_eq!(rec.last_zxid, 3);
        assert!(rec.warnings.iter().all(|w| !w.contains("torn")), "{:?}", rec.warnings);
        let first = std::fs::read(logs.join(segment_name(1))).unwrap();
        let scan = crate::storage::log::scan_segment(&first, false).unwrap();
        assert_eq!((scan.records.len(), scan.torn), (2, None));
    }

    /// A full disk in the middle of an append of several batches (over batchBytesMax, and
    /// across an epoch's new segment): the batches before it are durable and `next_zxid` says
    /// where they end, the writer goes on, and appending the rest from there logs every record
    /// once, as recovery reads back.
    #[test]
    fn a_full_disk_after_some_batches_of_an_append_keeps_those_and_the_writer() {
        let dir = crate::storage::files::tests::TempDir::new("logwriter-part-full");
        let (data, logs) = (dir.0.join("data"), dir.0.join("log"));
        std::fs::create_dir_all(&logs).unwrap();
        let (d2, l2) = (data.clone(), logs.clone());
        LocalExecutorBuilder::default()
            .io_memory(4 << 20)
            .spawn(move || async move {
                let mut w = reopened(&d2, &l2, 0).await;
                w.set_batch_bytes_max(3_000);
                w.append(&[txn(1, 0)]).await.unwrap();
                // Batches {2, 3}, {4, 5}, {6}: the disk fills at the second.
                let all: Vec<Bytes> = (2..=6).map(|z| txn(z, 1_200)).collect();
                w.disk_full_after_writes = Some(1);
                let e = w.append(&all).await.unwrap_err();
                assert!(is_disk_full(&e), "{e}");
                assert_eq!(w.next_zxid(), 4, "the first batch is durable");
                // The disk still full: nothing more, and still usable.
                w.disk_full_after_writes = Some(0);
                assert!(is_disk_full(&w.append(&all[2..]).await.unwrap_err()));
                assert_eq!(w.next_zxid(), 4);
                // Room again: the rest from where the log ends, then a new epoch, where the disk
                // fills once more after its first batch.
                w.disk_full_after_writes = None;
                w.append(&all[2..]).await.unwrap();
                let e2 = 2i64 << 32;
                let epoch2: Vec<Bytes> = vec![txn(7, 1_200), txn(e2 | 1, 1_200), txn(e2 | 2, 1_200)];
                w.disk_full_after_writes = Some(1);
                assert!(is_disk_full(&w.append(&epoch2).await.unwrap_err()));
                // Txn 7's batch is durable; the log rolled to the new epoch, whose first batch
                // is not: the next record it takes is that epoch's first.
                assert_eq!(w.next_zxid(), e2 | 1);
                w.disk_full_after_writes = None;
                w.append(&epoch2[1..]).await.unwrap();
                assert_eq!(w.next_zxid(), e2 | 3);
                w.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
        let rec = recover(&data, &logs).unwrap();
        assert_eq!(rec.last_zxid, (2i64 << 32) | 2);
        assert!(rec.warnings.iter().all(|w| !w.contains("torn")), "{:?}", rec.warnings);
        let zxids: Vec<i64> = rec.records.iter().map(|r| record_zxid(r).unwrap()).collect();
        assert!(logs.join(segment_name((2i64 << 32) | 1)).exists(), "the new epoch's own segment");
        assert_eq!(zxids, [1, 2, 3, 4, 5, 6, 7, (2i64 << 32) | 1, (2i64 << 32) | 2]);
    }

    /// The current segment's fds: the plain one never O_DSYNC; the write-through one, opened by
    /// the first write-through append, always O_DSYNC; both O_DIRECT.
    fn assert_segment_sync(w: &TxnLogWriter) {
        use std::os::fd::AsRawFd;
        let seg = w.segment.as_ref().expect("a segment is open");
        let flags = |f: &DmaFile| {
            // SAFETY: F_GETFL on an open fd of the segment.
            let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
            assert!(flags >= 0 && flags & libc::O_DIRECT != 0, "{flags:#o}");
            flags & libc::O_DSYNC != 0
        };
        assert!(!flags(&seg.file));
        assert_eq!(seg.through.as_ref().map(flags), (w.sync == SyncMode::WriteThrough).then_some(true), "{:?}", w.sync);
    }

    fn append_reopen_roll_and_recover(sync: SyncMode) {
        let dir = std::env::temp_dir().join(format!("rk-logwriter-{}-{sync:?}", std::process::id()));
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
                let mut w = TxnLogWriter::open(&l2, &rec.tail, rec.last_zxid + 1, prealloc, sync).await.unwrap();
                w.append(&[txn(1, 0), txn(2, 10)]).await.unwrap();
                assert_segment_sync(&w); // made from the spare
                w.append(&[txn(3, 100)]).await.unwrap();
                // The first segment came from a zero-filled spare, and the next spare is on its way.
                let seg = std::fs::read(l2.join(segment_name(1))).unwrap();
                assert_eq!(seg.len() as u64, prealloc);
                let used = crate::storage::log::file_len_for(w.position().unwrap().1) as usize;
                assert!(used > 0 && seg[used..].iter().all(|b| *b == 0), "preallocated space reads as zeroes");
                w.prepare_spare();
                assert!(w.spare.take().unwrap().finish().await, "the spare is zeroed throughout");
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
                let mut w = TxnLogWriter::open(&l3, &rec.tail, 14, prealloc, sync).await.unwrap();
                // Continues in the same segment? No: it is past the prealloc size, so it rolls. The
                // mode may change between appends (a member's role changed).
                w.set_sync(SyncMode::Fdatasync);
                w.append(&[txn(14, 5)]).await.unwrap();
                assert_segment_sync(&w);
                w.set_sync(sync);
                assert!(w.position().unwrap().0.ends_with(segment_name(14)));
                for z in 15..40 {
                    w.append(&[txn(z, 3000)]).await.unwrap();
                }
                w.roll().await.unwrap();
                w.roll().await.unwrap();
                w.append(&[txn(40, 1)]).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name(40)));
                assert_segment_sync(&w);
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
                let mut w = TxnLogWriter::open(&l4, &rec.tail, 41, prealloc, sync).await.unwrap();
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

    /// A roll takes the spare however little of it is zeroed, and its fill goes on in the new
    /// segment ahead of the log, never over it: a slow fill (256 KiB/s) is handed over partly
    /// done at each new epoch; the next spare waits for that fill to end; the log then writes
    /// past where the fill was (it runs ahead, or is stopped by a batch that would pass it),
    /// and every record reads back, also after the log is reopened and written again.
    #[test]
    fn a_roll_takes_a_partly_zeroed_spare_and_its_fill_stays_ahead_of_the_log() {
        use std::time::Duration;
        let dir = crate::storage::files::tests::TempDir::new("logwriter-live-fill");
        let (data, logs) = (dir.0.join("data"), dir.0.join("log"));
        let prealloc = 4 * 1024 * 1024u64;
        let (d, l) = (data.clone(), logs.clone());
        let mut written = LocalExecutorBuilder::default()
            .io_memory(8 << 20)
            .spawn(move || async move {
                let mut w = reopened(&d, &l, prealloc).await;
                w.set_fill_pace(FillPace { floor_bytes_per_s: 256 * 1024, live_lead_bytes: 512 * 1024 });
                let mut written = vec![txn(1, 100)];
                w.append(&written).await.unwrap();
                let mut ran_ahead = false;
                for epoch in 2..=3i64 {
                    let e = epoch << 32;
                    // A fresh spare, filled slowly: whatever the fills before did, it is taken early.
                    if let Some(mut fill) = w.segment.as_mut().and_then(|s| s.fill.take()) {
                        fill.stop().await;
                    }
                    if let Some(mut spare) = w.spare.take() {
                        spare.stop().await;
                    }
                    w.prepare_spare();
                    settle("the slow fill begins", || w.spare.as_ref().is_some_and(|s| s.zeroed() > 0)).await;
                    let zeroed = w.spare.as_ref().expect("a spare is being filled").zeroed();
                    assert!(zeroed > 0 && zeroed < prealloc / 2, "the slow fill has begun, far from done: {zeroed}");
                    let first = txn(e | 1, 100);
                    w.append(std::slice::from_ref(&first)).await.unwrap();
                    written.push(first);
                    let (zeroed, len) = w.live_fill().expect("the new segment's fill goes on");
                    assert!(zeroed < len && len == prealloc, "taken partly zeroed: {zeroed} of {len}");
                    // The next spare is made, and waits for this fill.
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                    assert!(w.live_fill().is_some());
                    assert_eq!(w.spare.as_ref().expect("the next spare").zeroed(), 0, "one fill at a time");
                    if epoch == 3 {
                        // One batch far past the fill's frontier, within the segment: the fill is
                        // stopped (its write in flight waited for) before the batch is written.
                        let big: Vec<Bytes> = (2..=9).map(|c| txn(e | c, 250 * 1024)).collect();
                        w.append(&big).await.unwrap();
                        assert!(w.position().unwrap().0.ends_with(segment_name(e | 1)), "the same segment");
                        assert!(w.live_fill().is_none(), "stopped by a log write past it");
                        written.extend(big);
                        continue;
                    }
                    for c in 2..=60 {
                        let r = txn(e | c, 40 * 1024);
                        w.append(std::slice::from_ref(&r)).await.unwrap();
                        written.push(r);
                        let end = w.position().unwrap().1;
                        ran_ahead |= w.live_fill().is_some_and(|(z, _)| z > end + 256 * 1024);
                    }
                    // The log is past half the segment, so the fill is behind and writes at once
                    // until it is done (it may still be catching up on a loaded machine), and
                    // then the next spare fills.
                    settle("the live fill ends", || w.live_fill().is_none()).await;
                    settle("the next spare's fill begins", || w.spare.as_ref().is_some_and(|s| s.zeroed() > 0)).await;
                }
                assert!(ran_ahead, "the live fill ran ahead of the log's writes");
                w.close().await.unwrap();
                written
            })
            .unwrap()
            .join()
            .unwrap();
        // Reopened where the log ends (in the segment taken early), written again.
        let (d, l) = (data.clone(), logs.clone());
        let more = LocalExecutorBuilder::default()
            .io_memory(8 << 20)
            .spawn(move || async move {
                let mut w = reopened(&d, &l, prealloc).await;
                let more = txn(w.next_zxid(), 300);
                w.append(std::slice::from_ref(&more)).await.unwrap();
                assert!(w.position().unwrap().0.ends_with(segment_name((3 << 32) | 1)));
                w.close().await.unwrap();
                more
            })
            .unwrap()
            .join()
            .unwrap();
        written.push(more);
        let rec = recover(&data, &logs).unwrap();
        assert_eq!(rec.records.len(), written.len());
        for (got, want) in rec.records.iter().zip(&written) {
            assert_eq!(got.as_ref(), want.as_ref(), "record {:#x}", codec::record_zxid(want).unwrap());
        }
        // Past each segment's data: zeroes (zeroed or unwritten), the full preallocated size.
        for epoch in [2i64, 3] {
            let seg = std::fs::read(logs.join(segment_name((epoch << 32) | 1))).unwrap();
            assert_eq!(seg.len() as u64, prealloc);
            let tail_zeroes = seg.iter().rev().take_while(|b| **b == 0).count();
            assert!(tail_zeroes > 4096, "epoch {epoch}: {tail_zeroes} zero bytes at the end");
        }
    }

    /// Waits for a background fill to reach a state, polling; a test on a loaded machine gets
    /// `SETTLE_WAIT_S_MAX` seconds before it fails with `what`.
    async fn settle(what: &str, mut reached: impl FnMut() -> bool) {
        const SETTLE_WAIT_S_MAX: u64 = 20;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(SETTLE_WAIT_S_MAX);
        while !reached() {
            assert!(std::time::Instant::now() < deadline, "{what}: not within {SETTLE_WAIT_S_MAX} s");
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// A writer where recovery leaves the log in `logs`.
    async fn reopened(data: &Path, logs: &Path, prealloc: u64) -> TxnLogWriter {
        let rec = recover(data, logs).unwrap();
        TxnLogWriter::open(logs, &rec.tail, rec.last_zxid + 1, prealloc, SyncMode::FdatasyncAside).await.unwrap()
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
                let mut w =
                    TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, SyncMode::Fdatasync).await.unwrap();
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
                let mut w =
                    TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, SyncMode::Fdatasync).await.unwrap();
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
                let mut w =
                    TxnLogWriter::open(&l, &rec.tail, rec.last_zxid + 1, 64 * 1024, SyncMode::Fdatasync).await.unwrap();
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
