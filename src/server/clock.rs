//! The server's two clocks. Every timeout is timed on the monotonic clock, as milliseconds
//! since the process started (`mono_ms`): session deadlines and expiry buckets, ZAB ticks
//! (and so initLimit/syncLimit), the reaper's and autopurge's schedules, connection
//! deadlines. The wall clock (`wall_clock_ms_for_dates`) is read only for dates: a txn's time
//! (Stat ctime/mtime), TTL expiry (ZooKeeper compares a TTL with mtime), seeds that must differ
//! across restarts (session ids, a peer's incarnation) and dates the four-letter words print.
//! Rules: nothing under src/server reads `SystemTime` except `wall_clock_ms_for_dates`; a
//! step of the system clock (NTP, an operator) moves dates, never a deadline.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static STARTED: OnceLock<Instant> = OnceLock::new();

/// Monotonic milliseconds since the first call (the server calls it at start-up).
pub fn mono_ms() -> i64 {
    mono_ms_at(Instant::now())
}

/// `at` as monotonic milliseconds since the first call of `mono_ms`.
fn mono_ms_at(at: Instant) -> i64 {
    let started = *STARTED.get_or_init(|| at);
    at.saturating_duration_since(started).as_millis() as i64
}

/// Wall-clock milliseconds since the Unix epoch: for dates only (see the file comment).
pub fn wall_clock_ms_for_dates() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Both clocks, read once per round of the pipeline core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// For timeouts and schedules.
    pub mono_ms: i64,
    /// For dates (a txn's time).
    pub wall_ms: i64,
    /// The monotonic instant `mono_ms` was read at (the pipeline's stage timings start from
    /// it, so a pass does not read the clock again for its first request).
    pub at: Instant,
}

impl Now {
    pub fn read() -> Now {
        let at = Instant::now();
        Now { mono_ms: mono_ms_at(at), wall_ms: wall_clock_ms_for_dates(), at }
    }

    /// The date a monotonic instant falls on, as the wall clock reads now (a `dump` prints
    /// session deadlines as dates, as ZooKeeper's elapsedTimeToDate does).
    pub fn date_of(&self, mono_ms: i64) -> i64 {
        mono_ms.saturating_add(self.wall_ms - self.mono_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_ms_never_go_back_and_dates_follow_the_offset() {
        let a = mono_ms();
        let b = mono_ms();
        assert!(b >= a);
        let now = Now { mono_ms: 1_000, wall_ms: 1_700_000_000_000, at: Instant::now() };
        assert_eq!(now.date_of(5_000), 1_700_000_004_000);
    }
}
