//! Server statistics behind the four-letter words (`srvr`, `stat`, `mntr`, ...): per-core
//! counters and gauges, and what the pipeline core knows (followers of a leader).
//! Rules: every counter has one writer, its own core (relaxed atomics, no lock, nothing on
//! the request path waits; a client core's per-request counters are a plain load and store,
//! `add`/`sub`, no locked read-modify-write); any core may read them all to answer a four-letter word, and may
//! zero them for `srst` / `crst` (a lost increment then is harmless); readers accept values a
//! few microseconds stale.

use super::stage_latency::{Snapshot, Stage, StageHistograms};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// Adds `n` to a counter of this core's own (the only writer): a plain load and store, no
/// locked read-modify-write on the request path (each drains the store buffer, ~2% of a
/// request's CPU for the handful per request); a `srst` racing it may lose the reset.
pub fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

/// Takes `n` from a counter of this core's own, as `add`.
pub fn sub(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_sub(n), Relaxed);
}

/// One client core's numbers.
#[derive(Debug)]
pub struct CoreStats {
    /// Packets read from clients (ConnectRequests and pings included).
    pub received: AtomicU64,
    /// Packets written to clients (replies, ConnectResponses and watch events).
    pub sent: AtomicU64,
    pub connections: AtomicU64,
    /// Requests read and not yet answered: live, kept by the core as it queues and answers
    /// them (the other cores read it for globalOutstandingLimit).
    pub outstanding: AtomicU64,
    /// Watches set on this core (published by the core after each batch).
    pub watches: AtomicU64,
    /// Channel traffic, in channel messages, counted at each end by that end's core (the
    /// difference of the two ends is the channel's depth): core → pipeline, pipeline → core.
    pub up_sent: AtomicU64,
    pub up_received: AtomicU64,
    pub down_sent: AtomicU64,
    pub down_received: AtomicU64,
    /// Requests for the pipeline sent in `up_sent` channel messages (batching on the way up).
    pub up_items: AtomicU64,
    /// Committed batches applied by this core, and the items in them (batching on the way down).
    pub commit_batches: AtomicU64,
    pub commit_items: AtomicU64,
    latency_min_us: AtomicU64,
    latency_max_us: AtomicU64,
    latency_total_us: AtomicU64,
    latency_count: AtomicU64,
    /// The stages this core times (`stage_latency::Stage`: commit → core, reply → socket, reads).
    pub stages: StageHistograms,
}

impl Default for CoreStats {
    fn default() -> Self {
        CoreStats {
            received: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            outstanding: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            up_sent: AtomicU64::new(0),
            up_received: AtomicU64::new(0),
            down_sent: AtomicU64::new(0),
            down_received: AtomicU64::new(0),
            up_items: AtomicU64::new(0),
            commit_batches: AtomicU64::new(0),
            commit_items: AtomicU64::new(0),
            latency_min_us: AtomicU64::new(u64::MAX),
            latency_max_us: AtomicU64::new(0),
            latency_total_us: AtomicU64::new(0),
            latency_count: AtomicU64::new(0),
            stages: StageHistograms::default(),
        }
    }
}

impl CoreStats {
    pub fn count_received(&self) {
        add(&self.received, 1);
    }

    pub fn count_sent(&self) {
        add(&self.sent, 1);
    }

    /// A request was answered `latency` after it arrived.
    pub fn record_latency(&self, latency: std::time::Duration) {
        let us = latency.as_micros() as u64;
        if us < self.latency_min_us.load(Relaxed) {
            self.latency_min_us.store(us, Relaxed);
        }
        if us > self.latency_max_us.load(Relaxed) {
            self.latency_max_us.store(us, Relaxed);
        }
        add(&self.latency_total_us, us);
        add(&self.latency_count, 1);
    }

    /// `srst`: packet counts and latencies start over.
    fn reset_server_stats(&self) {
        self.received.store(0, Relaxed);
        self.sent.store(0, Relaxed);
        self.latency_min_us.store(u64::MAX, Relaxed);
        self.latency_max_us.store(0, Relaxed);
        self.latency_total_us.store(0, Relaxed);
        self.latency_count.store(0, Relaxed);
        self.stages.reset();
    }
}

/// Everything, shared by all cores of one server.
#[derive(Debug)]
pub struct Stats {
    pub started: Instant,
    pub cores: Vec<CoreStats>,
    /// Leader only: learners (followers and observers) connected, and those synced.
    pub learners: AtomicU64,
    pub synced_learners: AtomicU64,
    /// The tree as client core 0 last saw it (for the admin server, which has no replica).
    pub zxid: AtomicI64,
    pub znodes: AtomicU64,
    pub ephemerals: AtomicU64,
    pub sessions: AtomicU64,
    /// Sessions local to this member (localSessionsEnabled, read-only mode): the pipeline
    /// core publishes the count each tick.
    pub local_sessions: AtomicU64,
    pub data_bytes: AtomicI64,
    /// `ServerMode` as its index in `ServerMode::ALL`.
    pub mode: AtomicU8,
    /// Txn log fdatasyncs: count, total and longest in µs (the pipeline core publishes them).
    pub fsync_count: AtomicU64,
    pub fsync_total_us: AtomicU64,
    pub fsync_max_us: AtomicU64,
    /// Ensemble: ms from losing a leader (or starting) to serving again, the last time.
    pub election_time_ms: AtomicU64,
    pub elections: AtomicU64,
    /// Leader: proposals made, and their sizes in bytes (last/min/max; -1 before the first).
    pub proposals: AtomicU64,
    proposal_size_last: AtomicI64,
    proposal_size_min: AtomicI64,
    proposal_size_max: AtomicI64,
    /// Snapshots written: count, total and longest time in ms (the pipeline core's).
    pub snapshots: AtomicU64,
    pub snapshot_total_ms: AtomicU64,
    pub snapshot_max_ms: AtomicU64,
    /// The pipeline core: requests waiting in its inbox (after each round), and the txn log
    /// batches it wrote (each one fdatasync), with their txns and the largest batch.
    pub inbox_depth: AtomicU64,
    pub log_batches: AtomicU64,
    pub log_batch_txns: AtomicU64,
    pub log_batch_txns_max: AtomicU64,
    /// The stages the pipeline core times (`stage_latency::Stage`: → pipeline, prep,
    /// propose → commit, log fdatasync); written by the pipeline core only.
    pub pipeline_stages: StageHistograms,
}

impl Stats {
    /// Monotonic ms since the server started (the clock of `cons`' lresp).
    pub fn uptime_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    /// The leader proposed a txn of `bytes` (the pipeline core, the only writer).
    pub fn count_proposal(&self, bytes: usize) {
        let b = bytes as i64;
        self.proposals.fetch_add(1, Relaxed);
        self.proposal_size_last.store(b, Relaxed);
        let min = self.proposal_size_min.load(Relaxed);
        if min < 0 || b < min {
            self.proposal_size_min.store(b, Relaxed);
        }
        self.proposal_size_max.fetch_max(b, Relaxed);
    }

    /// Proposal sizes last/min/max in bytes, as `srvr` on a leader prints them.
    pub fn proposal_sizes(&self) -> (i64, i64, i64) {
        (
            self.proposal_size_last.load(Relaxed),
            self.proposal_size_min.load(Relaxed),
            self.proposal_size_max.load(Relaxed),
        )
    }

    /// The pipeline core wrote a txn log batch of `txns` txns.
    pub fn count_log_batch(&self, txns: usize) {
        self.log_batches.fetch_add(1, Relaxed);
        self.log_batch_txns.fetch_add(txns as u64, Relaxed);
        self.log_batch_txns_max.fetch_max(txns as u64, Relaxed);
    }

    /// A snapshot took `ms` to write (the pipeline core, the only writer).
    pub fn count_snapshot(&self, ms: u64) {
        self.snapshots.fetch_add(1, Relaxed);
        self.snapshot_total_ms.fetch_add(ms, Relaxed);
        self.snapshot_max_ms.fetch_max(ms, Relaxed);
    }

    /// The pipeline core publishes its txn log writer's fdatasync times.
    pub fn publish_syncs(&self, (count, total_us, max_us): (u64, u64, u64)) {
        self.fsync_count.store(count, Relaxed);
        self.fsync_total_us.store(total_us, Relaxed);
        self.fsync_max_us.store(max_us, Relaxed);
    }
}

/// Sums over every core, in ZooKeeper's units (latencies in ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Totals {
    pub received: u64,
    pub sent: u64,
    pub connections: u64,
    pub outstanding: u64,
    pub watches: u64,
    pub latency_min_ms: f64,
    pub latency_avg_ms: f64,
    pub latency_max_ms: f64,
}

impl Stats {
    pub fn new(cores: usize) -> Arc<Stats> {
        Arc::new(Stats {
            started: Instant::now(),
            cores: (0..cores).map(|_| CoreStats::default()).collect(),
            learners: AtomicU64::new(0),
            synced_learners: AtomicU64::new(0),
            zxid: AtomicI64::new(0),
            znodes: AtomicU64::new(0),
            ephemerals: AtomicU64::new(0),
            sessions: AtomicU64::new(0),
            local_sessions: AtomicU64::new(0),
            data_bytes: AtomicI64::new(0),
            mode: AtomicU8::new(0),
            fsync_count: AtomicU64::new(0),
            fsync_total_us: AtomicU64::new(0),
            fsync_max_us: AtomicU64::new(0),
            election_time_ms: AtomicU64::new(0),
            elections: AtomicU64::new(0),
            proposals: AtomicU64::new(0),
            proposal_size_last: AtomicI64::new(-1),
            proposal_size_min: AtomicI64::new(-1),
            proposal_size_max: AtomicI64::new(-1),
            snapshots: AtomicU64::new(0),
            snapshot_total_ms: AtomicU64::new(0),
            snapshot_max_ms: AtomicU64::new(0),
            inbox_depth: AtomicU64::new(0),
            log_batches: AtomicU64::new(0),
            log_batch_txns: AtomicU64::new(0),
            log_batch_txns_max: AtomicU64::new(0),
            pipeline_stages: StageHistograms::default(),
        })
    }

    pub fn totals(&self) -> Totals {
        let sum = |f: fn(&CoreStats) -> &AtomicU64| self.cores.iter().map(|c| f(c).load(Relaxed)).sum::<u64>();
        let count = sum(|c| &c.latency_count);
        // A core reset mid-record may show a count with no minimum yet: it has none to give.
        let min = self.cores.iter().map(|c| c.latency_min_us.load(Relaxed)).min().unwrap_or(u64::MAX);
        let max = self.cores.iter().map(|c| c.latency_max_us.load(Relaxed)).max().unwrap_or(0);
        Totals {
            received: sum(|c| &c.received),
            sent: sum(|c| &c.sent),
            connections: sum(|c| &c.connections),
            outstanding: sum(|c| &c.outstanding),
            watches: sum(|c| &c.watches),
            latency_min_ms: if count == 0 || min == u64::MAX { 0.0 } else { min as f64 / 1000.0 },
            latency_avg_ms: if count == 0 { 0.0 } else { sum(|c| &c.latency_total_us) as f64 / count as f64 / 1000.0 },
            latency_max_ms: max as f64 / 1000.0,
        }
    }

    /// Stage `s` over every core (merge on read).
    pub fn stage(&self, s: Stage) -> Snapshot {
        let mut snap = Snapshot::default();
        self.pipeline_stages.get(s).add_to(&mut snap);
        for c in &self.cores {
            c.stages.get(s).add_to(&mut snap);
        }
        snap
    }

    /// Every stage, merged over the cores, in `Stage::ALL`'s order.
    pub fn stages(&self) -> Vec<(Stage, Snapshot)> {
        Stage::ALL.iter().map(|&s| (s, self.stage(s))).collect()
    }

    /// `srst`: packet counts, latencies, stage histograms and (on a leader) proposal sizes
    /// start over.
    pub fn reset(&self) {
        for c in &self.cores {
            c.reset_server_stats();
        }
        self.pipeline_stages.reset();
        for s in [&self.proposal_size_last, &self.proposal_size_min, &self.proposal_size_max] {
            s.store(-1, Relaxed);
        }
    }
}

/// Bytes in the regular files directly in `dir` (what `dirs` reports).
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_the_cores_and_reset_starts_over() {
        let s = Stats::new(2);
        assert_eq!(s.totals().latency_min_ms, 0.0, "no request yet");
        s.cores[0].count_received();
        s.cores[1].count_received();
        s.cores[1].count_sent();
        s.cores[0].connections.store(3, Relaxed);
        s.cores[1].connections.store(4, Relaxed);
        s.cores[1].record_latency(std::time::Duration::from_millis(5));
        let t = s.totals();
        assert_eq!((t.received, t.sent, t.connections), (2, 1, 7));
        assert!(t.latency_min_ms >= 5.0 && t.latency_max_ms >= t.latency_min_ms && t.latency_avg_ms >= 5.0);
        s.cores[1].stages.get(Stage::Read).record_us_n(40, 2);
        s.pipeline_stages.get(Stage::Prep).record_us_n(3, 1);
        assert_eq!((s.stage(Stage::Read).count(), s.stage(Stage::Prep).count()), (2, 1));
        s.reset();
        let t = s.totals();
        assert_eq!((t.received, t.sent, t.connections, t.latency_max_ms), (0, 0, 7, 0.0));
        assert_eq!((s.stage(Stage::Read).count(), s.stage(Stage::Prep).count()), (0, 0), "srst zeroes the stages");
    }
}
