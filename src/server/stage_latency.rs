//! Per-stage latency histograms of a request's way through the server (issue 17): where a
//! write's time goes, stage by stage, for `/metrics` (Prometheus histograms) and `mntr`
//! (p50/p99/max/count summaries).
//! Rules: one writer per histogram (the core that owns it: a client core its own set, the
//! pipeline core the pipeline's set), relaxed atomics, no lock, no allocation when recording;
//! readers merge every core's set (as `stats.rs` sums counters) and accept values a few
//! microseconds stale; `srst` zeroes them (a record racing the reset may survive it, which is
//! harmless). Buckets are fixed and log-linear in µs (`BUCKETS`), so memory is bounded
//! whatever the load. Durations are measured on the monotonic clock (`Instant`), which is
//! comparable across cores, so a stage may start on one core and end on another.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Sub-buckets per power of two (4: a bucket is at most 25% wider than its lower edge).
const SUB_BUCKETS_LOG2: u32 = 2;
const SUB_BUCKETS: usize = 1 << SUB_BUCKETS_LOG2;
/// Durations at or above 2^`POWERS_LOG2_MAX` µs (~67 s) share the last, unbounded bucket.
const POWERS_LOG2_MAX: u32 = 26;
/// Buckets of one histogram: exact ones below `SUB_BUCKETS` µs, `SUB_BUCKETS` per power of
/// two up to 2^`POWERS_LOG2_MAX` µs, and the overflow bucket.
pub const BUCKETS: usize = SUB_BUCKETS + (POWERS_LOG2_MAX - SUB_BUCKETS_LOG2) as usize * SUB_BUCKETS + 1;

/// The bucket of a duration of `us` microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS as u64 {
        return us as usize;
    }
    let p = 63 - us.leading_zeros();
    if p >= POWERS_LOG2_MAX {
        return BUCKETS - 1;
    }
    let sub = ((us >> (p - SUB_BUCKETS_LOG2)) as usize) & (SUB_BUCKETS - 1);
    SUB_BUCKETS + (p - SUB_BUCKETS_LOG2) as usize * SUB_BUCKETS + sub
}

/// The exclusive upper edge of bucket `i` in µs (every whole-µs duration in it is below it);
/// None for the overflow bucket. Edges: 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, …
pub fn bucket_upper_us(i: usize) -> Option<u64> {
    if i < SUB_BUCKETS {
        return Some(i as u64 + 1);
    }
    if i >= BUCKETS - 1 {
        return None;
    }
    let k = i - SUB_BUCKETS;
    let p = (k / SUB_BUCKETS) as u32 + SUB_BUCKETS_LOG2;
    let sub = (k % SUB_BUCKETS) as u64;
    Some((SUB_BUCKETS as u64 + sub + 1) << (p - SUB_BUCKETS_LOG2))
}

/// One histogram of durations in whole µs, written by one core.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
    max_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// `n` durations of `us` each (the owning core only).
    pub fn record_us_n(&self, us: u64, n: u64) {
        if n == 0 {
            return;
        }
        // One writer: plain loads and stores, no read-modify-write on the request path (a
        // reset racing them may lose this record, or the new maximum).
        let bucket = &self.buckets[bucket_of(us)];
        bucket.store(bucket.load(Relaxed).wrapping_add(n), Relaxed);
        self.sum_us.store(self.sum_us.load(Relaxed).wrapping_add(us.saturating_mul(n)), Relaxed);
        if us > self.max_us.load(Relaxed) {
            self.max_us.store(us, Relaxed);
        }
    }

    pub fn record(&self, d: Duration) {
        self.record_us_n(d.as_micros().min(u64::MAX as u128) as u64, 1);
    }

    /// The time from `since` to now.
    pub fn record_since(&self, since: Instant) {
        self.record(since.elapsed());
    }

    pub fn reset(&self) {
        for b in &self.buckets {
            b.store(0, Relaxed);
        }
        self.sum_us.store(0, Relaxed);
        self.max_us.store(0, Relaxed);
    }

    /// Adds this histogram's counts into `into` (merge on read).
    pub fn add_to(&self, into: &mut Snapshot) {
        for (acc, b) in into.buckets.iter_mut().zip(&self.buckets) {
            *acc += b.load(Relaxed);
        }
        into.sum_us += self.sum_us.load(Relaxed);
        into.max_us = into.max_us.max(self.max_us.load(Relaxed));
    }
}

/// A histogram's counts as read (or the sum of several).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub buckets: [u64; BUCKETS],
    pub sum_us: u64,
    pub max_us: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot { buckets: [0; BUCKETS], sum_us: 0, max_us: 0 }
    }
}

impl Snapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q` quantile (0 < q ≤ 1) in µs: the upper edge of the bucket holding that rank,
    /// less one (the largest whole µs the bucket holds), never above the largest value seen;
    /// 0 when empty. Monotone in `q`, so p50 ≤ p99 ≤ max.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_upper_us(i).map_or(self.max_us, |u| (u - 1).min(self.max_us));
            }
        }
        self.max_us
    }
}

/// The stages of a request's way through the server, each timed by one kind of core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A write, from the socket read that completed it on its client core until the pipeline
    /// core took it in (client core's batching, the channel, the pipeline's inbox; standalone,
    /// until the start of the pass that took it in). Pipeline core.
    CoreToPipeline,
    /// A write, from the pipeline's take-in until its txn is made (validation, zxid, encode;
    /// in an ensemble the leader's prep and the proposal handed to ZAB). Pipeline core.
    /// Standalone, take-in is the start of the pipeline's pass, and each write of the pass is
    /// recorded with the pass's mean prep time (one clock read per pass; `pipeline::end_preps`).
    Prep,
    /// Leader: a proposal, from sent until committed (a quorum acknowledged it durable).
    ProposeToCommit,
    /// Follower: a client's write, from the pass that forwarded it to the leader until its
    /// commit was delivered here (both hops, the leader's prep and its quorum). Pipeline core.
    ForwardToCommit,
    /// One txn log batch's write and fdatasync. Pipeline core.
    LogFsync,
    /// A write's committed batch, from sent by the pipeline core until the client core of the
    /// write took it in. Client core.
    CommitToCore,
    /// A reply, from encoded into its connection's buffer until the socket write that carried
    /// it completed. Client core.
    ReplyToSocket,
    /// A read, from the socket read that completed it on its client core until its reply was
    /// queued. Client core.
    Read,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Stage::CoreToPipeline,
        Stage::Prep,
        Stage::ProposeToCommit,
        Stage::ForwardToCommit,
        Stage::LogFsync,
        Stage::CommitToCore,
        Stage::ReplyToSocket,
        Stage::Read,
    ];
    pub const COUNT: usize = Stage::ALL.len();

    /// The name in `/metrics` (`stage` label) and `mntr` (`rk_stage_<name>_…`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::CoreToPipeline => "core_to_pipeline",
            Stage::Prep => "prep",
            Stage::ProposeToCommit => "propose_to_commit",
            Stage::ForwardToCommit => "forward_to_commit",
            Stage::LogFsync => "log_fsync",
            Stage::CommitToCore => "commit_to_core",
            Stage::ReplyToSocket => "reply_to_socket",
            Stage::Read => "read",
        }
    }
}

/// One core's histogram of every stage (it records only the stages it times).
#[derive(Debug, Default)]
pub struct StageHistograms([Histogram; Stage::COUNT]);

impl StageHistograms {
    pub fn get(&self, s: Stage) -> &Histogram {
        &self.0[s as usize]
    }

    pub fn reset(&self) {
        for h in &self.0 {
            h.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_edges_are_log_linear_and_every_value_falls_below_its_edge() {
        let edges: Vec<u64> = (0..12).filter_map(bucket_upper_us).collect();
        assert_eq!(edges, [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16]);
        assert_eq!(bucket_upper_us(BUCKETS - 2), Some(1 << POWERS_LOG2_MAX));
        assert_eq!(bucket_upper_us(BUCKETS - 1), None);
        // Around every edge: a value lands in the bucket whose edge is above it and whose
        // predecessor's edge is at or below it.
        let mut probes = vec![0u64, 1, 2, 3, 4, 7, 8, 9, 1_000, 59_999_999, u64::MAX];
        for i in 0..BUCKETS - 1 {
            let u = bucket_upper_us(i).unwrap();
            probes.extend([u - 1, u, u + 1]);
        }
        for v in probes {
            let i = bucket_of(v);
            assert!(i < BUCKETS, "{v}");
            if let Some(u) = bucket_upper_us(i) {
                assert!(v < u, "{v} in bucket {i} with edge {u}");
            }
            if i > 0 {
                assert!(bucket_upper_us(i - 1).unwrap() <= v, "{v} in bucket {i}");
            }
        }
        assert_eq!(bucket_of(60_000_000), BUCKETS - 2, "~60 s still has a bounded bucket");
        assert_eq!(bucket_of(1 << POWERS_LOG2_MAX), BUCKETS - 1);
        // Edges never grow by more than a quarter of the lower edge (beyond the exact ones).
        for i in SUB_BUCKETS..BUCKETS - 1 {
            let (lo, hi) = (bucket_upper_us(i - 1).unwrap(), bucket_upper_us(i).unwrap());
            assert!(hi > lo && (hi - lo) * 4 <= lo, "{lo}..{hi}");
        }
    }

    #[test]
    fn quantiles_count_sum_and_max() {
        let h = Histogram::default();
        let mut s = Snapshot::default();
        h.add_to(&mut s);
        assert_eq!((s.count(), s.quantile_us(0.5), s.quantile_us(0.99)), (0, 0, 0));
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        h.record_us_n(5_000, 3);
        let mut s = Snapshot::default();
        h.add_to(&mut s);
        assert_eq!(s.count(), 103);
        assert_eq!(s.sum_us, 5050 + 15_000);
        assert_eq!(s.max_us, 5_000);
        // Rank 52 is 52 µs, in the bucket 48..56: reported as its largest value, 55.
        assert_eq!(s.quantile_us(0.5), 55);
        // Rank 102 is one of the 5 ms ones: the bucket's top (5119) capped at the max.
        assert_eq!(s.quantile_us(0.99), 5_000);
        assert_eq!(s.quantile_us(1.0), 5_000);
        assert!(s.quantile_us(0.01) <= s.quantile_us(0.5));
        h.reset();
        let mut s = Snapshot::default();
        h.add_to(&mut s);
        assert_eq!(s, Snapshot::default());
    }

    #[test]
    fn merging_cores_adds_counts_and_keeps_the_largest_max() {
        let cores: Vec<StageHistograms> = (0..3).map(|_| StageHistograms::default()).collect();
        cores[0].get(Stage::Read).record_us_n(10, 4);
        cores[2].get(Stage::Read).record_us_n(1_000, 1);
        cores[1].get(Stage::LogFsync).record_us_n(300, 2);
        let mut read = Snapshot::default();
        for c in &cores {
            c.get(Stage::Read).add_to(&mut read);
        }
        assert_eq!((read.count(), read.sum_us, read.max_us), (5, 1_040, 1_000));
        assert_eq!(read.quantile_us(0.5), 11, "10 µs lies in the bucket 10..12");
        assert_eq!(read.quantile_us(0.99), 1_000);
        let mut fsync = Snapshot::default();
        cores[0].get(Stage::LogFsync).add_to(&mut fsync);
        assert_eq!(fsync.count(), 0, "a stage another core times stays empty here");
        cores[1].reset();
        let mut fsync = Snapshot::default();
        cores[1].get(Stage::LogFsync).add_to(&mut fsync);
        assert_eq!(fsync.count(), 0);
    }
}
