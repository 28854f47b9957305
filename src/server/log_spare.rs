//! The zero fill of the txn log's next segment (glommio shell; its pace is the pure
//! `fill_step`). Log space is zeroed before the log writes into it, so a batch's fdatasync
//! flushes data, not extent metadata (`log_writer.rs` says why). A task fills `log.spare`
//! beside the log in 128 KiB writes: at a floor rate while it stays ahead of the log's use of
//! its current segment, at once while it is behind, so the log's own writes and syncs never
//! queue behind a burst of zeroes (three members on one disk stalled 0.1 s behind full-speed
//! fills of 1 MiB writes). A roll never waits for the fill: the file, however far it is
//! filled, becomes the new segment (`hand_over`) and the fill goes on in it, ahead of the
//! log's writes; the next spare's fill starts once that one has ended (one fill at a time).
//! Rules: the file is fallocated to its full length before its first zero (where the file
//! system can), so a segment taken early has its size and reads as zeroes past what was
//! written (its unwritten blocks cost the log's syncs a metadata commit, as ZooKeeper's
//! preallocation always does); the fill writes only at or past `zeroed`, the log only below it: a log write that would end
//! past it first stops the fill and waits for its write in flight (`before_log_write`); a
//! segment is closed only with its fill stopped (a TRUNC rewrites segments); a failed fill of
//! a spare removes the file, of a live segment leaves it (its rest is unwritten, not wrong).

use super::log_writer::{checked_write, remove_if_present, LOG_WRITE_BYTES_MAX};
use crate::storage::log::LOG_BLOCK_BYTES;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::io::{DmaBuffer, DmaFile, OpenOptions};
use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The slowest a fill goes, bytes per second (64 MiB in 8 s), while it stays ahead of the log.
pub const SPARE_FILL_BYTES_PER_S_MIN: u64 = 8 * 1024 * 1024;
/// One write of a paced fill: a log write arriving meanwhile waits behind at most this.
pub const SPARE_FILL_WRITE_BYTES: usize = 128 * 1024;
/// A spare's fill keeps this far ahead of the log, as a fraction (numerator, denominator): the
/// share of the spare zeroed is at least this times the share of the room the log had in its
/// segment that it has used since. Just over 1: the fill's writes spread evenly over the
/// log's, and it still ends before the log needs it.
const SPARE_FILL_LEAD: (u64, u64) = (5, 4);
/// A fill in the live segment stays this many times as far through its file as the log's
/// writes, so it ends by the segment's middle and the next spare has the other half's time.
const LIVE_FILL_LEAD: u64 = 2;
/// ... and at least this many bytes ahead of them.
pub const LIVE_FILL_LEAD_BYTES: u64 = 1024 * 1024;
/// Longest pause between two paced writes, so a log that speeds up is noticed soon.
const SPARE_FILL_PAUSE_MAX_MS: u64 = 20;

const _: () =
    assert!(SPARE_FILL_WRITE_BYTES.is_multiple_of(LOG_BLOCK_BYTES) && SPARE_FILL_WRITE_BYTES <= LOG_WRITE_BYTES_MAX);

/// The pace's settings: the constants above in a server; tests slow a fill down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FillPace {
    pub floor_bytes_per_s: u64,
    pub live_lead_bytes: u64,
}

impl Default for FillPace {
    fn default() -> Self {
        FillPace { floor_bytes_per_s: SPARE_FILL_BYTES_PER_S_MIN, live_lead_bytes: LIVE_FILL_LEAD_BYTES }
    }
}

/// Where a fill is, for its pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillStage {
    /// `log.spare` beside the log, which had `room` bytes left in its segment when the fill
    /// started (0: it needs the spare at once) and has written `used` bytes since.
    Spare { room: u64, used: u64 },
    /// The log's segment now, its writes ending at `log_end`.
    Live { log_end: u64 },
}

/// The next step of a fill with `done` of `len` bytes zeroed, `stage_done` of them zeroed in
/// `elapsed` since its stage began: `Ok(size)` to write now, `Err(pause)` to wait first. A
/// write at once while the fill is behind (a spare: not `SPARE_FILL_LEAD` as far through as the
/// log through its room; live: not `LIVE_FILL_LEAD` times as far through the file as the
/// log's writes, or less than `live_lead_bytes` ahead of them), full-size only for a spare
/// the log needs at once (no room); else a small write once the floor rate says, after
/// pauses of at most `SPARE_FILL_PAUSE_MAX_MS`.
pub fn fill_step(
    pace: &FillPace,
    done: u64,
    len: u64,
    stage: FillStage,
    stage_done: u64,
    elapsed: Duration,
) -> Result<usize, Duration> {
    let behind = match stage {
        FillStage::Spare { room: 0, .. } => true,
        // done / len < LEAD * used / room
        FillStage::Spare { room, used } => {
            (done as u128) * (room as u128) * (SPARE_FILL_LEAD.1 as u128)
                < (SPARE_FILL_LEAD.0 as u128) * (used as u128) * (len as u128)
        }
        FillStage::Live { log_end } => {
            done < log_end.saturating_add(pace.live_lead_bytes).max(log_end.saturating_mul(LIVE_FILL_LEAD))
        }
    };
    if behind {
        // Small writes still, so a log write queues behind little; full-size when the log
        // needs the spare at once.
        return Ok(if matches!(stage, FillStage::Spare { room: 0, .. }) {
            LOG_WRITE_BYTES_MAX
        } else {
            SPARE_FILL_WRITE_BYTES
        });
    }
    let due = Duration::from_secs_f64(stage_done as f64 / pace.floor_bytes_per_s.max(1) as f64);
    if elapsed >= due {
        return Ok(SPARE_FILL_WRITE_BYTES);
    }
    Err((due - elapsed).min(Duration::from_millis(SPARE_FILL_PAUSE_MAX_MS)))
}

/// What the fill task and the log writer share (one thread).
struct FillState {
    len: u64,
    pace: FillPace,
    /// The room the log had in its segment when the spare started, and how far it had written
    /// then (`written` counts on: bytes its write point moved, in all segments).
    room: u64,
    written: Rc<Cell<u64>>,
    written_at_start: u64,
    /// The `ended` of the current segment's fill, if it was still going when this one
    /// started: this one's writes wait until it is set. Only the flag is held, so fills
    /// never keep a chain of earlier fills alive.
    after: Option<Rc<Cell<bool>>>,
    /// Bytes zeroed from offset 0 (writes completed).
    zeroed: Cell<u64>,
    /// The file is at its path at its full length: a roll may take it.
    created: Cell<bool>,
    /// Zeroed throughout and synced.
    complete: Cell<bool>,
    /// The task has ended (complete, stopped or failed).
    ended: Rc<Cell<bool>>,
    stop: Cell<bool>,
    /// Set by `hand_over`: where the log's writes in this file end (None while a spare).
    log_end: Cell<Option<u64>>,
    /// Cuts a paced pause short (a stop, a hand-over; not a log write, which a pause of at
    /// most `SPARE_FILL_PAUSE_MAX_MS` sees soon enough).
    wake: LocalSender<()>,
    /// Said once the file is created, or the fill ended without it (`hand_over` waits).
    made: LocalSender<()>,
}

/// A segment file being zero-filled by a task of its own.
pub struct ZeroFill {
    state: Rc<FillState>,
    task: Option<glommio::Task<()>>,
    path: PathBuf,
    made: LocalReceiver<()>,
}

impl ZeroFill {
    /// Starts filling `path` (an old file of that name is replaced) with `len` bytes of zeroes
    /// (whole blocks), beside a log that has `room` bytes left in its segment and has written
    /// `written` bytes so far; its writes wait until `after` (the current segment's own fill)
    /// has ended, and its pace counts from then.
    pub fn start(
        path: PathBuf,
        len: u64,
        room: u64,
        written: Rc<Cell<u64>>,
        pace: FillPace,
        after: Option<&ZeroFill>,
    ) -> ZeroFill {
        let (wake, woken) = local_channel::new_bounded(1);
        let (made_tx, made) = local_channel::new_bounded(1);
        let state = Rc::new(FillState {
            len: len.next_multiple_of(LOG_BLOCK_BYTES as u64),
            pace,
            room,
            written_at_start: written.get(),
            written,
            after: after.map(|a| a.state.ended.clone()).filter(|ended| !ended.get()),
            zeroed: Cell::new(0),
            created: Cell::new(false),
            complete: Cell::new(false),
            ended: Rc::new(Cell::new(false)),
            stop: Cell::new(false),
            log_end: Cell::new(None),
            wake,
            made: made_tx,
        });
        let (s, p) = (state.clone(), path.clone());
        let task = glommio::spawn_local(async move { run(s, p, woken).await });
        ZeroFill { state, task: Some(task), path, made }
    }

    /// Bytes zeroed so far.
    pub fn zeroed(&self) -> u64 {
        self.state.zeroed.get()
    }

    /// The file's length, zeroed or not.
    pub fn file_len(&self) -> u64 {
        self.state.len
    }

    /// The task has ended: zeroed throughout, stopped, or failed.
    pub fn has_ended(&self) -> bool {
        self.state.ended.get()
    }

    /// Makes the file the segment at `segment_path` (renamed there; the caller syncs the
    /// directory and opens it) without waiting for the fill, which goes on in it ahead of the
    /// log's writes. A spare not yet created is waited for (its create and fallocate); one
    /// whose fill failed is an error (the file is gone).
    pub async fn hand_over(mut self, segment_path: &Path) -> io::Result<ZeroFill> {
        if !self.state.created.get() && !self.state.ended.get() {
            let _ = self.made.recv().await;
        }
        if !self.state.created.get() {
            self.stop().await;
            return Err(io::Error::other(format!("{} was not made", self.path.display())));
        }
        // From here a failed fill leaves the file: it is a segment.
        self.state.log_end.set(Some(0));
        self.wake();
        if let Err(e) = glommio::io::rename(&self.path, segment_path).await {
            self.stop().await;
            let _ = remove_if_present(&self.path).await;
            return Err(io::Error::from(e));
        }
        if !self.state.complete.get() {
            tracing::debug!(
                "log segment {} taken with {} of {} bytes zeroed; the fill goes on ahead of the log",
                segment_path.display(),
                self.zeroed(),
                self.file_len()
            );
        }
        self.path = segment_path.to_path_buf();
        Ok(self)
    }

    /// Before the log writes this file up to `end`: a fill not that far yet is stopped (its
    /// write in flight waited for), so it never writes where the log does.
    pub async fn before_log_write(&mut self, end: u64) {
        if self.state.ended.get() {
            return;
        }
        if end > self.state.zeroed.get() {
            self.stop().await;
        } else {
            self.state.log_end.set(Some(end));
        }
    }

    /// Stops the fill and waits for its write in flight.
    pub async fn stop(&mut self) {
        self.state.stop.set(true);
        self.wake();
        if let Some(task) = self.task.take() {
            task.await;
        }
    }

    /// Waits for the fill to end without stopping it: true if it zeroed the whole file.
    pub async fn finish(mut self) -> bool {
        if let Some(task) = self.task.take() {
            task.await;
        }
        self.state.complete.get()
    }

    fn wake(&self) {
        let _ = self.state.wake.try_send(());
    }
}

async fn run(state: Rc<FillState>, path: PathBuf, woken: LocalReceiver<()>) {
    if let Err(e) = fill_file(&state, &path, &woken).await {
        if state.log_end.get().is_none() {
            // A partly filled spare (the disk filled up) must not keep the space it took.
            state.created.set(false);
            tracing::warn!("zero-filling {} failed ({e}); the next log segment is made without it", path.display());
            let _ = remove_if_present(&path).await;
        } else {
            tracing::warn!(
                "zero-filling the rest of the current log segment failed ({e}); its writes go on into \
                 unwritten blocks"
            );
        }
    }
    state.ended.set(true);
    let _ = state.made.try_send(());
}

async fn fill_file(state: &FillState, path: &Path, woken: &LocalReceiver<()>) -> io::Result<()> {
    remove_if_present(path).await?;
    let file = OpenOptions::new().read(true).write(true).create_new(true).dma_open(path).await?;
    let filled = async {
        match file.pre_allocate(state.len, false).await.map_err(io::Error::from) {
            Ok(()) => {}
            // A file system without fallocate: the file grows as it is zeroed, and a segment
            // taken early is as long as its zeroed part (it rolls there, or grows).
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                tracing::debug!("fallocate {}: {e}; the spare grows as it is zeroed", path.display())
            }
            Err(e) => return Err(e),
        }
        state.created.set(true);
        let _ = state.made.try_send(());
        write_zeroes(&file, state, woken).await?;
        if state.zeroed.get() >= state.len {
            file.fdatasync().await?;
            state.complete.set(true);
        }
        Ok::<(), io::Error>(())
    }
    .await;
    let closed = file.close().await.map_err(io::Error::from);
    filled.and(closed)
}

/// Writes zeroes from `state.zeroed` on, paced by `fill_step`, until the file is zeroed or
/// the fill is stopped. The writes of each size share one buffer zeroed once (`write_rc_at`),
/// so a fill costs no memset per write (a profile at 0% reads: a memset per write was 1.4-2.5%
/// of the server's CPU); a shorter one (the last) gets a buffer of its own.
async fn write_zeroes(file: &DmaFile, state: &FillState, woken: &LocalReceiver<()>) -> io::Result<()> {
    let mut zeroed_buffers: Vec<Rc<DmaBuffer>> = Vec::with_capacity(2);
    // When the current stage (spare, then live) began, and the bytes zeroed then.
    let mut stage_began = (Instant::now(), 0u64, false);
    // The spare's pace: the log's room, and how far it had written, when the fill began.
    let (mut room, mut written_at_start) = (state.room, state.written_at_start);
    let mut waiting = state.after.is_some();
    loop {
        let done = state.zeroed.get();
        if done >= state.len || state.stop.get() {
            return Ok(());
        }
        let live = state.log_end.get();
        let step = if waiting && live.is_none() && state.after.as_ref().is_some_and(|ended| !ended.get()) {
            // One fill at a time: the current segment's is still going.
            Err(Duration::from_millis(SPARE_FILL_PAUSE_MAX_MS))
        } else {
            if waiting {
                // Its time starts now, with the room the log has left.
                waiting = false;
                let now = state.written.get();
                room = room.saturating_sub(now.saturating_sub(written_at_start));
                written_at_start = now;
                stage_began = (Instant::now(), done, false);
            }
            if live.is_some() != stage_began.2 {
                stage_began = (Instant::now(), done, live.is_some());
            }
            let stage = match live {
                Some(log_end) => FillStage::Live { log_end },
                None => FillStage::Spare { room, used: state.written.get().saturating_sub(written_at_start) },
            };
            fill_step(&state.pace, done, state.len, stage, done - stage_began.1, stage_began.0.elapsed())
        };
        let step_max = match step {
            Ok(n) => n,
            Err(pause) => {
                futures_lite::future::or(
                    async {
                        glommio::timer::sleep(pause).await;
                    },
                    async {
                        let _ = woken.recv().await;
                    },
                )
                .await;
                continue;
            }
        };
        let n = (state.len - done).min(step_max as u64) as usize;
        let buf = match zeroed_buffers.iter().find(|b| b.len() == n) {
            Some(b) => b.clone(),
            None => {
                let mut b = file.alloc_dma_buffer(n);
                b.as_bytes_mut()[..n].fill(0);
                let b = Rc::new(b);
                if n == step_max {
                    zeroed_buffers.push(b.clone());
                }
                b
            }
        };
        let written = file.write_rc_at(buf, done).await?;
        state.zeroed.set(done + checked_write(written, n)? as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    /// A spare: small writes at the floor rate while it is ahead of the log, pauses bounded so
    /// a faster log is seen, small writes at once when it falls behind, full-size ones when the
    /// log needs it at once.
    #[test]
    fn a_spare_fill_is_paced_only_while_it_stays_ahead_of_the_log() {
        let p = FillPace::default();
        let (len, room) = (64 * MIB, 64 * MIB);
        let spare = |used| FillStage::Spare { room, used };
        // Idle log: the first write goes at once, small.
        assert_eq!(fill_step(&p, 0, len, spare(0), 0, Duration::ZERO), Ok(SPARE_FILL_WRITE_BYTES));
        // 8 MiB done at once: due at 1 s on the 8 MiB/s floor; paused at most 20 ms at a time.
        assert_eq!(fill_step(&p, 8 * MIB, len, spare(0), 8 * MIB, Duration::ZERO), Err(Duration::from_millis(20)));
        let at = |ms| fill_step(&p, 8 * MIB, len, spare(0), 8 * MIB, Duration::from_millis(ms));
        assert_eq!(at(990), Err(Duration::from_millis(10)));
        assert_eq!(at(1000), Ok(SPARE_FILL_WRITE_BYTES));
        // The log used 10% of its room while the fill did 12.5%: 5/4 as far, so paced.
        assert!(fill_step(&p, 8 * MIB, len, spare(room / 10), 8 * MIB, Duration::ZERO).is_err());
        // The log used 11%: 12.5% is less than 5/4 of that, a write at once.
        let used = room * 11 / 100;
        assert_eq!(fill_step(&p, 8 * MIB, len, spare(used), 8 * MIB, Duration::ZERO), Ok(SPARE_FILL_WRITE_BYTES));
        // A log that needs the spare at once (no segment): full speed.
        assert_eq!(
            fill_step(&p, MIB, len, FillStage::Spare { room: 0, used: 0 }, MIB, Duration::ZERO),
            Ok(LOG_WRITE_BYTES_MAX)
        );
    }

    /// In the live segment: full-size writes while less than the lead ahead of the log's
    /// writes, the floor rate (counted from the hand-over) once ahead.
    #[test]
    fn a_live_fill_keeps_its_lead_over_the_log() {
        let p = FillPace::default();
        let len = 64 * MIB;
        // With 4 MiB zeroed since the hand-over at once, only a fill that is behind writes now.
        let step = |done, log_end| fill_step(&p, done, len, FillStage::Live { log_end }, 4 * MIB, Duration::ZERO);
        // Less than the lead (1 MiB) ahead of the log's writes: behind.
        assert_eq!(step(MIB / 2, 0), Ok(SPARE_FILL_WRITE_BYTES));
        assert_eq!(step(MIB, 0), Err(Duration::from_millis(20)));
        // Past the lead, twice as far through the file as the log: at 8 MiB, 16 MiB.
        assert_eq!(step(16 * MIB - 4096, 8 * MIB), Ok(SPARE_FILL_WRITE_BYTES));
        assert_eq!(step(16 * MIB, 8 * MIB), Err(Duration::from_millis(20)));
        // Ahead: the floor rate, counted from the hand-over (4 MiB since then: due at 0.5 s).
        let paced =
            |ms| fill_step(&p, 16 * MIB, len, FillStage::Live { log_end: 8 * MIB }, 4 * MIB, Duration::from_millis(ms));
        assert_eq!(paced(490), Err(Duration::from_millis(10)));
        assert_eq!(paced(500), Ok(SPARE_FILL_WRITE_BYTES));
    }

    /// Whatever the log's steady rate, a spare's paced fill is whole before the log has used
    /// its room (pacing never makes a roll find the spare unfinished), with a whole segment's
    /// room or half of one (a spare that waited for a live fill): simulated step by step.
    #[test]
    fn a_paced_spare_is_ready_before_the_log_needs_it() {
        for room in [64 * MIB, 32 * MIB] {
            spare_ready_within(room);
        }
    }

    fn spare_ready_within(room: u64) {
        let p = FillPace::default();
        let len = 64 * MIB;
        // The fill's own disk speed in this model: 200 MB/s.
        let disk_bytes_per_s = 200e6;
        for log_bytes_per_s in [0.0, 1e5, 1e6, 4e6, 16e6, 40e6, 60e6, 90e6] {
            // Only rates the disk can keep up with: the fill must do `len` while the log does
            // `room`, with the lead's margin.
            if log_bytes_per_s * (len as f64 / room as f64) * 1.25 >= disk_bytes_per_s {
                continue;
            }
            let (mut done, mut t) = (0u64, 0.0f64);
            while done < len {
                let used = (log_bytes_per_s * t) as u64;
                assert!(used < room, "the log at {log_bytes_per_s} B/s used its room before the spare was ready");
                match fill_step(&p, done, len, FillStage::Spare { room, used }, done, Duration::from_secs_f64(t)) {
                    Ok(n) => {
                        let n = (n as u64).min(len - done);
                        done += n;
                        t += n as f64 / disk_bytes_per_s;
                    }
                    Err(pause) => {
                        assert!(pause > Duration::ZERO && pause <= Duration::from_millis(SPARE_FILL_PAUSE_MAX_MS));
                        t += pause.as_secs_f64();
                    }
                }
            }
            // Idle, it takes the floor rate's time, not a burst at the disk's speed.
            if log_bytes_per_s == 0.0 {
                assert!(t >= (len as f64 / SPARE_FILL_BYTES_PER_S_MIN as f64) - 0.05, "{t}");
            }
        }
    }
}
