//! `ringkeeper-bench`: throughput-versus-read-ratio curves in the manner of the ZooKeeper
//! paper (Hunt et al., USENIX ATC 2010, §5) for any ZooKeeper-compatible server, the minimal
//! responder that measures the ceiling, the summary of a results directory, and the
//! large-state tools of scripts/bench-state.sh (fill, wait-read, writer), and the TCP delay
//! line scripts/netns.sh puts in front of ensemble members (delay-relay).
//! Rules: options have the paper's defaults (up to 100 requests outstanding per client, 1 KiB
//! payloads, read share 0..100 % in steps of 10); every number printed or written comes from
//! a measured point; a point whose errors exceed `--max-error-share` fails the run.

mod host_cpu;
mod load;
mod relay;
mod report;
mod responder;
mod state;
mod workload;

use clap::{Parser, Subcommand};
use ringkeeper::client::connect_string::ConnectString;
use ringkeeper::client::SaslCredentials;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use workload::Workload;

#[derive(Parser)]
#[command(name = "ringkeeper-bench", about = "Throughput vs read ratio for ZooKeeper-compatible servers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sweep the read share against a server or an ensemble.
    Run(RunArgs),
    /// A minimal responder: canned replies, no state (the harness's ceiling).
    Responder {
        #[arg(long, default_value = "127.0.0.1:2199")]
        listen: std::net::SocketAddr,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// CPUs to pin the executors to (comma-separated); none: unpinned.
        #[arg(long, value_delimiter = ',')]
        pin: Vec<usize>,
        #[arg(long, default_value_t = 1024)]
        payload: usize,
    },
    /// The log disk's fdatasync latency: append `bytes` and fdatasync, `count` times. With
    /// `--direct`, the txn log's two ways instead, alternating on one zero-filled file through
    /// glommio: an O_DIRECT write then a blocking fdatasync, and an O_DIRECT|O_DSYNC write whose
    /// completion is the sync (4 KiB blocks).
    Fsync {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 500)]
        count: usize,
        #[arg(long, default_value_t = 1024)]
        bytes: usize,
        #[arg(long)]
        direct: bool,
        /// Removes a file of this many MiB (written and synced first) 100 ms after the syncs
        /// start, on another thread, as a purge would: what a removal costs the syncs of the
        /// file being appended (on ext4 mounted with `discard`, a lot: docs/benchmarks.md).
        #[arg(long, default_value_t = 0, conflicts_with = "direct")]
        delete_mib: u64,
    },
    /// Load N znodes spread over parents, many creates in flight (memory / restart bench).
    Fill(state::FillArgs),
    /// Time until a server answers a getData of a path (restart to serving, catch-up).
    WaitRead(state::WaitReadArgs),
    /// Closed-loop writer recording the gaps between consecutive acknowledged writes.
    Writer(state::WriterArgs),
    /// A TCP delay line: forwards LISTEN to FORWARD holding bytes for a one-way delay (+ jitter)
    /// each way, order kept, bounded buffers (scripts/netns.sh without netem).
    DelayRelay(relay::RelayArgs),
    /// Summary table and SVG plots of a results directory.
    Report {
        dir: PathBuf,
        #[arg(long, value_enum, default_value_t = Workload::GetSet)]
        workload: Workload,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Connection string: host:port[,host:port...].
    #[arg(long, default_value = "127.0.0.1:2181")]
    servers: String,
    /// Every connection to the first server (default: spread over all, as in the paper).
    #[arg(long)]
    pinned: bool,
    /// Client connections (sessions).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Requests each client keeps outstanding.
    #[arg(long, default_value_t = 100)]
    outstanding: usize,
    /// Bytes of data per setData / create (and of the pre-created znodes).
    #[arg(long, default_value_t = 1024)]
    payload: usize,
    /// Znodes created before the sweep (reads and writes pick among them).
    #[arg(long, default_value_t = 1000)]
    znodes: u64,
    /// Read shares in percent.
    #[arg(long, value_delimiter = ',', default_value = "0,10,20,30,40,50,60,70,80,90,100")]
    ratios: Vec<f64>,
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    #[arg(long, default_value_t = 5.0)]
    measure_s: f64,
    #[arg(long, value_enum, default_value_t = Workload::GetSet)]
    workload: Workload,
    /// Load executors (glommio), each pinned to a CPU of --pin if given.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long, value_delimiter = ',')]
    pin: Vec<usize>,
    #[arg(long, default_value_t = 10_000)]
    session_timeout_ms: u32,
    /// Names the server and setup in the results: <server>-<setup>, e.g. ringkeeper-standalone.
    #[arg(long, default_value = "server-standalone")]
    label: String,
    /// Results directory (results.csv appended, <label>.json and <label>.md written).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Fail when errors exceed this share of a point's completed requests.
    #[arg(long, default_value_t = 0.01)]
    max_error_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Speak TLS to the servers, trusting the CA certificates in this PEM file.
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// The client certificate chain and key (one PEM file, ZooKeeper's PEM key store).
    #[arg(long, value_name = "PEM", requires = "tls_ca")]
    tls_cert: Option<PathBuf>,
    /// Authenticate every connection with SASL DIGEST-MD5 as USER:PASSWORD (the server's JAAS
    /// `Server` section has `user_USER="PASSWORD"`); the set-up then creates the znodes with
    /// the ACL `sasl:USER:cdrwa`, so every read and write is checked against that id.
    #[arg(long, value_name = "USER:PASSWORD")]
    sasl: Option<String>,
    /// Do not create the znodes (they exist from an earlier run).
    #[arg(long)]
    skip_setup: bool,
    /// Open loop at this many requests per second (all clients together) instead of keeping
    /// --outstanding in flight; latency counts from each request's scheduled time.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Open loop at --rate-share of the closed-loop throughput that --rate-label reached at
    /// the same read share, as recorded in this results directory.
    #[arg(long, requires = "rate_label")]
    rate_from: Option<PathBuf>,
    #[arg(long)]
    rate_label: Option<String>,
    #[arg(long, default_value_t = 0.5)]
    rate_share: f64,
}

/// The open-loop rate of the point at `pct` (0: closed loop).
fn rate_for(a: &RunArgs, recorded: &[report::Row], pct: f64) -> Result<f64, String> {
    let (Some(dir), Some(label)) = (&a.rate_from, &a.rate_label) else { return Ok(a.rate) };
    recorded
        .iter()
        .find(|r| {
            &r.label == label
                && r.workload == a.workload.name()
                && r.target_rate == 0.0
                && (r.read_pct - pct).abs() < 1e-9
        })
        .map(|r| r.ops_per_s * a.rate_share)
        .ok_or_else(|| format!("{} has no closed-loop point of {label} at read {pct}%", dir.display()))
}

fn run(a: RunArgs) -> Result<(), String> {
    let cs = ConnectString::parse(&a.servers).map_err(|e| format!("--servers: {e:?}"))?;
    if a.clients == 0 || a.outstanding == 0 {
        return Err("--clients and --outstanding must be at least 1".into());
    }
    if a.ratios.iter().any(|r| !(0.0..=100.0).contains(r)) {
        return Err("--ratios are percentages from 0 to 100".into());
    }
    let sasl = match &a.sasl {
        None => None,
        Some(s) => match s.split_once(':') {
            Some((user, password)) if !user.is_empty() => {
                Some(SaslCredentials { username: user.to_string(), password: password.to_string() })
            }
            _ => return Err("--sasl takes USER:PASSWORD".into()),
        },
    };
    let base = load::PointSpec {
        servers: cs.servers,
        spread: !a.pinned,
        clients: a.clients,
        outstanding: a.outstanding,
        payload: bytes::Bytes::from(vec![b'p'; a.payload]),
        znodes: a.znodes.max(1),
        read_permille: 0,
        workload: a.workload,
        warmup: Duration::from_secs_f64(a.warmup_s),
        measure: Duration::from_secs_f64(a.measure_s),
        threads: a.threads,
        pin: a.pin.clone(),
        session_timeout_ms: a.session_timeout_ms,
        seed: a.seed,
        rate_per_s: 0.0,
        tls: match &a.tls_ca {
            None => None,
            Some(ca) => Some(Arc::new(
                ringkeeper::tls::client::client_config(ca, a.tls_cert.as_deref().map(|c| (c, c)), true)
                    .map_err(|e| format!("TLS: {e}"))?,
            )),
        },
        sasl,
    };
    if !a.skip_setup {
        eprintln!("set-up: {} znodes of {} bytes", base.znodes, a.payload);
        load::setup(&base)?;
    }
    let recorded = match &a.rate_from {
        Some(dir) => report::read_rows(dir).map_err(|e| format!("{}: {e}", dir.display()))?,
        None => Vec::new(),
    };
    let mut rows = Vec::new();
    for &pct in &a.ratios {
        let rate_per_s = rate_for(&a, &recorded, pct)?;
        let spec = load::PointSpec { read_permille: (pct * 10.0).round() as u32, rate_per_s, ..base.clone() };
        let progress = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (progress, stop, label) = (progress.clone(), stop.clone(), a.label.clone());
            let total_s = a.warmup_s + a.measure_s;
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                let mut last = 0;
                while !stop.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(500));
                    let now = progress.load(Relaxed);
                    eprint!(
                        "\r{label} read {pct:>5.1}%  {:>5.1}/{total_s:.0} s  {:>10.0} ops/s   ",
                        t0.elapsed().as_secs_f64(),
                        (now - last) as f64 * 2.0
                    );
                    let _ = std::io::stderr().flush();
                    last = now;
                }
            })
        };
        let result = load::run_point(&spec, &progress);
        stop.store(true, Relaxed);
        let _ = ticker.join();
        eprint!("\r");
        let result = result?;
        let row = report::Row::from_result(
            &a.label,
            a.workload.name(),
            pct,
            a.clients,
            a.outstanding,
            a.payload,
            rate_per_s,
            &result,
        );
        eprintln!(
            "{} read {:>5.1}%: {:>10.0} ops/s  p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms  \
             conn p99 median {:.2} worst {:.2} ms ({:.2}x)  host steal {} CPU-s/s  errors {}{}",
            a.label,
            pct,
            row.ops_per_s,
            row.p50_ms,
            row.p99_ms,
            row.p999_ms,
            row.max_ms,
            row.conn_p99_median_ms,
            row.conn_p99_worst_ms,
            row.conn_p99_spread,
            row.host_steal_per_s.map_or("?".to_string(), |v| format!("{v:.3}")),
            row.errors,
            if result.errors.is_empty() { String::new() } else { format!(" {:?}", result.errors) }
        );
        let too_many = row.errors as f64 > a.max_error_share * (result.completed.max(1) as f64);
        rows.push(row);
        if too_many || result.completed == 0 {
            if let Some(dir) = &a.out {
                let _ = report::write_run(dir, &a.label, &rows);
            }
            return Err(format!("read {pct}%: {} completed, errors {:?}", result.completed, result.errors));
        }
    }
    println!("{}", report::markdown(&rows));
    if let Some(dir) = &a.out {
        report::write_run(dir, &a.label, &rows).map_err(|e| format!("writing results to {}: {e}", dir.display()))?;
    }
    Ok(())
}

/// Appends `bytes` then fdatasyncs, `count` times, in a scratch file under `dir`; with
/// `delete_mib`, a file that size is removed beside the syncs (see `Command::Fsync`).
fn fsync(dir: &std::path::Path, count: usize, bytes: usize, delete_mib: u64) -> Result<(), String> {
    let doomed = dir.join("rk-bench-doomed.tmp");
    // Whatever happens below, the doomed file does not outlive the run.
    let _cleanup = RemovedOnDrop(doomed.clone());
    if delete_mib > 0 {
        write_doomed(&doomed, delete_mib)?;
    }
    let path = dir.join("rk-bench-fsync.tmp");
    let start = std::time::Instant::now();
    let removal = (delete_mib > 0).then(|| start_removal(doomed, start)).transpose()?;
    let synced = sync_appends(&path, count, bytes, start);
    let _ = std::fs::remove_file(&path);
    let removal = removal.map(|r| r.join().map_err(|_| "the removal thread panicked".to_string()).and_then(|r| r));
    let synced = match (synced, &removal) {
        (Err(e), Some(Err(removing))) => Err(format!("{e}; and {removing}")),
        (synced, _) => synced,
    };
    let Synced { histogram: h, longest_ended_s, last_ended_s } = synced?;
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "fdatasync of {bytes} B appends in {}: n={} p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        dir.display(),
        h.len(),
        ms(0.5),
        ms(0.99),
        h.max() as f64 / 1000.0
    );
    if let Some(removal) = removal {
        let (from, until) = removal?;
        println!(
            "removal of {delete_mib} MiB beside the syncs: from {from:.3} s to {until:.3} s into the run; \
             the longest sync ended at {longest_ended_s:.3} s, the last at {last_ended_s:.3} s"
        );
        if from > last_ended_s {
            println!("(the removal started after the last sync: raise --count)");
        }
    }
    Ok(())
}

/// What `sync_appends` measured: the syncs' latencies, and when the longest and the last
/// ended (seconds from the start).
struct Synced {
    histogram: hdrhistogram::Histogram<u64>,
    longest_ended_s: f64,
    last_ended_s: f64,
}

/// Appends `bytes` then fdatasyncs, `count` times, to a new file at `path`.
fn sync_appends(
    path: &std::path::Path,
    count: usize,
    bytes: usize,
    start: std::time::Instant,
) -> Result<Synced, String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let block = vec![b'f'; bytes];
    let mut histogram = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let (mut longest_us, mut longest_ended_s) = (0, 0.0);
    for _ in 0..count.max(1) {
        let t = std::time::Instant::now();
        f.write_all(&block).and_then(|_| f.sync_data()).map_err(|e| format!("{}: {e}", path.display()))?;
        let us = (t.elapsed().as_micros() as u64).max(1);
        let _ = histogram.record(us);
        if us > longest_us {
            (longest_us, longest_ended_s) = (us, start.elapsed().as_secs_f64());
        }
    }
    Ok(Synced { histogram, longest_ended_s, last_ended_s: start.elapsed().as_secs_f64() })
}

/// Bytes in a MiB.
const MIB_BYTES: usize = 1 << 20;

/// How long after the syncs start `--delete-mib`'s removal starts.
const REMOVAL_DELAY_MS: u64 = 100;

/// Writes `mib` MiB to a new file at `path` and syncs it.
fn write_doomed(path: &std::path::Path, mib: u64) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(fail)?;
    let mib_block = vec![b'd'; MIB_BYTES];
    for _ in 0..mib {
        f.write_all(&mib_block).map_err(fail)?;
    }
    f.sync_all().map_err(fail)
}

/// A removal beside the syncs: when it started and ended, in seconds from the syncs' start.
type Removal = std::thread::JoinHandle<Result<(f64, f64), String>>;

/// Removes `doomed` on a thread of its own, `REMOVAL_DELAY_MS` after `start`.
fn start_removal(doomed: PathBuf, start: std::time::Instant) -> Result<Removal, String> {
    let thread = std::thread::Builder::new().name("rk-bench-removal".into());
    thread
        .spawn(move || {
            std::thread::sleep(Duration::from_millis(REMOVAL_DELAY_MS).saturating_sub(start.elapsed()));
            let from = start.elapsed().as_secs_f64();
            std::fs::remove_file(&doomed).map_err(|e| format!("removing {}: {e}", doomed.display()))?;
            Ok((from, start.elapsed().as_secs_f64()))
        })
        .map_err(|e| format!("starting the removal thread: {e}"))
}

/// A file removed when this goes out of scope, if it is still there.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The txn log's durable write both ways (see `Command::Fsync`), `count` of each, alternating.
fn fsync_direct(dir: &std::path::Path, count: usize) -> Result<(), String> {
    use glommio::io::OpenOptions;
    use std::os::fd::AsRawFd;
    const BLOCK_BYTES: usize = 4096;
    const FILE_BLOCKS: usize = 2048;
    let path = dir.join("rk-bench-fsync-direct.tmp");
    let shown = path.display().to_string();
    let work = move || async move {
        let err = |e: &dyn std::fmt::Display| format!("{shown}: {e}");
        // As the server's txn log does: off glommio's poll ring unless the disk polls.
        if let Some(dir) = path.parent() {
            ringkeeper::server::disk_poll::keep_off_poll_ring_unless_it_polls(dir).await;
        }
        let mut options = OpenOptions::new();
        options.create(true).truncate(true).read(true).write(true);
        let plain = options.dma_open(&path).await.map_err(|e| err(&e))?;
        for b in 0..FILE_BLOCKS {
            let buf = plain.alloc_dma_buffer(BLOCK_BYTES);
            plain.write_at(buf, (b * BLOCK_BYTES) as u64).await.map_err(|e| err(&e))?;
        }
        plain.fdatasync().await.map_err(|e| err(&e))?;
        let mut options = OpenOptions::new();
        options.read(true).write(true).custom_flags(libc::O_DSYNC);
        let dsync = options.dma_open(&path).await.map_err(|e| err(&e))?;
        let histogram = || hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string());
        let (mut then_sync, mut write_through) = (histogram()?, histogram()?);
        for i in 0..count.max(1) {
            let at = ((i * 2) % FILE_BLOCKS * BLOCK_BYTES) as u64;
            let t = std::time::Instant::now();
            plain.write_at(plain.alloc_dma_buffer(BLOCK_BYTES), at).await.map_err(|e| err(&e))?;
            // SAFETY: the fd belongs to the open file.
            if unsafe { libc::fdatasync(plain.as_raw_fd()) } != 0 {
                return Err(err(&std::io::Error::last_os_error()));
            }
            let _ = then_sync.record((t.elapsed().as_micros() as u64).max(1));
            let t = std::time::Instant::now();
            dsync.write_at(dsync.alloc_dma_buffer(BLOCK_BYTES), at + BLOCK_BYTES as u64).await.map_err(|e| err(&e))?;
            let _ = write_through.record((t.elapsed().as_micros() as u64).max(1));
        }
        let _ = dsync.close().await;
        let _ = plain.close().await;
        let _ = std::fs::remove_file(&path);
        Ok::<_, String>((then_sync, write_through))
    };
    let (then_sync, write_through) = glommio::LocalExecutorBuilder::default()
        .spawn(work)
        .map_err(|e| e.to_string())?
        .join()
        .map_err(|e| e.to_string())??;
    for (name, h) in [("O_DIRECT write + fdatasync", then_sync), ("O_DIRECT|O_DSYNC write", write_through)] {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{name} of 4 KiB in {}: n={} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
            dir.display(),
            h.len(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            h.max() as f64 / 1000.0
        );
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Run(a) => run(a),
        Command::Responder { listen, threads, pin, payload } => responder::run(listen, threads, &pin, payload),
        Command::Fsync { dir, count, bytes, direct: false, delete_mib } => fsync(&dir, count, bytes, delete_mib),
        Command::Fsync { dir, count, direct: true, .. } => fsync_direct(&dir, count),
        Command::Fill(a) => state::fill(a),
        Command::WaitRead(a) => state::wait_read(a),
        Command::Writer(a) => state::writer(a),
        Command::DelayRelay(a) => relay::run(a),
        Command::Report { dir, workload } => report::write_summary(&dir, workload.name(), "")
            .map(|text| println!("{text}"))
            .map_err(|e| format!("{}: {e}", dir.display())),
    };
    if let Err(e) = r {
        eprintln!("ringkeeper-bench: {e}");
        std::process::exit(1);
    }
}
