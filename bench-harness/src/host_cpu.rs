//! The CPU time the hypervisor stole from this machine during a measured window, from
//! `/proc/stat`'s `steal` column: on a shared VM a window whose servers lost CPU to other
//! tenants measures the host, not the server, and the report marks it (`report.rs`).
//! Rules: read twice per window, at its start and at its end, by a thread of its own (never
//! from the load's executors); a machine without `/proc/stat` or its column measures nothing
//! (`None`), which the report shows as unknown, never as zero.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sampler's longest sleep, so a stopped point ends it soon.
const SAMPLER_SLEEP_MS_MAX: u64 = 50;

/// The `steal` ticks (USER_HZ) summed over all CPUs: the eighth number of `/proc/stat`'s
/// `cpu ` line (user nice system idle iowait irq softirq steal ...).
pub fn steal_ticks(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

fn read_steal_ticks() -> Option<u64> {
    steal_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// USER_HZ, the unit of `/proc/stat`.
fn ticks_per_s() -> Option<u64> {
    // SAFETY: sysconf reads a constant of the system.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (t > 0).then_some(t as u64)
}

/// Stolen CPU-seconds per second (all CPUs together) between two readings `seconds` apart.
pub fn steal_per_s(before: u64, after: u64, ticks_per_s: u64, seconds: f64) -> Option<f64> {
    (after >= before && ticks_per_s > 0 && seconds > 0.0)
        .then(|| (after - before) as f64 / ticks_per_s as f64 / seconds)
}

/// A thread that reads the steal column at `start` and at `end`; `finish` gives the window's
/// steal per second, or None if the window did not run to its end or nothing could be read.
pub struct StealSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Option<f64>>,
}

impl StealSampler {
    pub fn start(start: Instant, end: Instant) -> StealSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let sleep_until = move |t: Instant| -> bool {
            loop {
                // The time first: a window that has ended is read even if `finish` came first.
                let now = Instant::now();
                if now >= t {
                    return true;
                }
                if stopped.load(Relaxed) {
                    return false;
                }
                std::thread::sleep((t - now).min(Duration::from_millis(SAMPLER_SLEEP_MS_MAX)));
            }
        };
        let thread = std::thread::spawn(move || {
            if !sleep_until(start) {
                return None;
            }
            let (before, from) = (read_steal_ticks()?, Instant::now());
            if !sleep_until(end) {
                return None;
            }
            let after = read_steal_ticks()?;
            steal_per_s(before, after, ticks_per_s()?, from.elapsed().as_secs_f64())
        });
        StealSampler { stop, thread }
    }

    /// The window's steal; stops the thread at once if the window has not ended yet (a point
    /// that failed early), else waits for its reading at the end.
    pub fn finish(self) -> Option<f64> {
        self.stop.store(true, Relaxed);
        self.thread.join().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steal_column_is_the_eighth_number_of_the_cpu_line() {
        let text = "cpu  4705 356 584 3699 23 0 12 77 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n";
        assert_eq!(steal_ticks(text), Some(77));
        assert_eq!(steal_ticks("cpu0 1 2 3 4 5 6 7 8\n"), None, "only the all-CPU line counts");
        assert_eq!(steal_ticks("cpu  1 2 3 4 5 6 7\n"), None, "a kernel without the column");
        assert_eq!(steal_per_s(100, 150, 100, 2.0), Some(0.25));
        assert_eq!(steal_per_s(150, 100, 100, 2.0), None, "a counter that went back measures nothing");
    }

    #[test]
    fn a_window_stopped_before_its_end_measures_nothing() {
        let now = Instant::now();
        let s = StealSampler::start(now, now + Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        assert_eq!(s.finish(), None);
        assert!(t.elapsed() < Duration::from_secs(5), "finish stops the sampler");
        if read_steal_ticks().is_some() {
            let now = Instant::now();
            let s = StealSampler::start(now, now + Duration::from_millis(100));
            std::thread::sleep(Duration::from_millis(300));
            assert!(s.finish().is_some_and(|v| (0.0..=1024.0).contains(&v)), "a whole window reads");
        }
    }
}
