//! The load: connections driven by the library's sans-IO session core
//! (`ringkeeper::client::session::Session`) on glommio executors, each connection keeping up to
//! `outstanding` requests in flight; a point is a warm-up then a measured window.
//! Rules: latency is measured from submit to reply, only for requests submitted after the
//! warm-up and answered inside the window; every connection stops at the window's end and
//! closes its session (waiting at most `CLOSE_WAIT_MS`); errors are counted by ZooKeeper's
//! name, never hidden.

use crate::workload::{setup_acl, setup_requests, Generator, Workload};
use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use ringkeeper::client::connect_string::{Chroot, HostPort};
use ringkeeper::client::driver::tls_stream::{wrap, MaybeTls};
use ringkeeper::client::session::{Output, Session, SessionConfig};
use ringkeeper::client::types::KeeperState;
use ringkeeper::client::SaslCredentials;
use ringkeeper::proto::request::Request;
use ringkeeper::proto::ErrorCode;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a connection waits for its closeSession reply at the end of a point.
pub const CLOSE_WAIT_MS: u64 = 1_000;
/// Bytes read from a socket per read call.
pub const READ_CHUNK_BYTES: usize = 256 * 1024;
/// A read waits at most this long, so that pings and the end of the window are seen.
pub const READ_WAIT_MS: u64 = 100;
/// Shortest read wait in open-loop mode (the next scheduled send is sooner than this).
pub const READ_WAIT_US_MIN: u64 = 1_000;
/// Highest latency the histograms track, µs (longer ones are clamped to it).
pub const LATENCY_US_MAX: u64 = 60_000_000;
/// Token of the closeSession request.
const CLOSE_TOKEN: u64 = u64::MAX;

/// Everything one point needs.
#[derive(Debug, Clone)]
pub struct PointSpec {
    pub servers: Vec<HostPort>,
    /// Connection i goes to server i mod n (false: every connection to the first server).
    pub spread: bool,
    pub clients: usize,
    pub outstanding: usize,
    pub payload: Bytes,
    pub znodes: u64,
    pub read_permille: u32,
    pub workload: Workload,
    pub warmup: Duration,
    pub measure: Duration,
    pub threads: usize,
    /// CPUs the executors are pinned to (executor t on pin[t mod len]); empty: unpinned.
    pub pin: Vec<usize>,
    pub session_timeout_ms: u32,
    pub seed: u64,
    /// Open loop: requests per second over all clients, each sent at its scheduled time
    /// (latency counts from then, so a slow server is not excused by the load waiting for
    /// it); 0: closed loop, every client keeps `outstanding` in flight.
    pub rate_per_s: f64,
    /// TLS to the servers (`--tls-ca`, `--tls-cert`); None: plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL DIGEST-MD5 on every connection (`--sasl`); the set-up's znodes are then that
    /// user's alone (`workload::setup_acl`).
    pub sasl: Option<SaslCredentials>,
}

/// What one point measured.
#[derive(Debug, Clone)]
pub struct PointResult {
    /// Requests answered successfully inside the window.
    pub completed: u64,
    pub errors: BTreeMap<String, u64>,
    /// Latencies of the completed requests, µs.
    pub latency_us: Histogram<u64>,
    /// Watch events received inside the window (the watch workload).
    pub events: u64,
    pub seconds: f64,
    /// Connections that were dropped and re-established during the point.
    pub reconnects: u64,
    /// Each connection's own p99, µs, for the connections of the load that completed
    /// requests inside the window (fairness: `fairness`).
    pub conn_p99_us: Vec<u64>,
    /// CPU-seconds per second the hypervisor stole from this machine during the window (all
    /// CPUs together; `host_cpu`), None where it could not be read.
    pub host_steal_per_s: Option<f64>,
}

impl PointResult {
    fn empty() -> PointResult {
        PointResult {
            completed: 0,
            errors: BTreeMap::new(),
            latency_us: Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("histogram bounds are valid"),
            events: 0,
            seconds: 0.0,
            reconnects: 0,
            conn_p99_us: Vec::new(),
            host_steal_per_s: None,
        }
    }

    /// One connection's result is complete: its histogram holds only its own requests, so
    /// its p99 is that connection's (kept when merged with others).
    fn seal_connection(&mut self) {
        if self.completed > 0 {
            self.conn_p99_us.push(self.latency_us.value_at_quantile(0.99));
        }
    }

    /// The spread of the connections' p99s: (the median connection's, the worst
    /// connection's), µs; None without a measured connection. With an even count the median
    /// is the lower of the two middle ones.
    pub fn fairness(&self) -> Option<(u64, u64)> {
        let mut p99s = self.conn_p99_us.clone();
        p99s.sort_unstable();
        let worst = *p99s.last()?;
        Some((p99s[(p99s.len() - 1) / 2], worst))
    }

    fn merge(&mut self, other: PointResult) {
        self.completed += other.completed;
        for (k, v) in other.errors {
            *self.errors.entry(k).or_default() += v;
        }
        let _ = self.latency_us.add(&other.latency_us);
        self.events += other.events;
        self.reconnects += other.reconnects;
        self.conn_p99_us.extend(other.conn_p99_us);
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

fn resolve(hp: &HostPort) -> Result<SocketAddr, String> {
    (hp.host.as_str(), hp.port)
        .to_socket_addrs()
        .map_err(|e| format!("{}:{}: {e}", hp.host, hp.port))?
        .next()
        .ok_or_else(|| format!("{}:{} resolves to nothing", hp.host, hp.port))
}

/// The window of one point, in µs since the point's start.
#[derive(Debug, Clone, Copy)]
struct Window {
    t0: Instant,
    from_us: u64,
    to_us: u64,
}

impl Window {
    fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }
}

/// What a connection does.
enum Job {
    /// The measured load.
    Load(Generator),
    /// Send these requests (set-up), `outstanding` at a time.
    Script(Vec<Request>),
}

/// Runs one connection until the window ends (or its script is done), then closes its session.
async fn connection(
    server: HostPort,
    mut job: Job,
    spec: Rc<PointSpec>,
    window: Window,
    progress: Arc<AtomicU64>,
) -> PointResult {
    let mut result = PointResult::empty();
    let addr = match resolve(&server) {
        Ok(a) => a,
        Err(e) => {
            result.errors.insert(format!("resolve: {e}"), 1);
            return result;
        }
    };
    let config = SessionConfig {
        session_timeout_ms: spec.session_timeout_ms,
        pending_requests_max: spec.outstanding.max(1) + 2,
        sasl: spec.sasl.clone(),
        ..SessionConfig::default()
    };
    let mut session: Session<u64> = Session::new(config, vec![server], Chroot::none(), spec.seed, window.now_ms());
    let mut stream: Option<MaybeTls<TcpStream>> = None;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut in_flight = 0usize;
    let mut connected_once = false;
    let mut closing_since: Option<Instant> = None;
    let mut script_next = 0usize;
    // Open loop: this connection's share of the rate, its sends spread over the interval.
    let interval_us = if spec.rate_per_s > 0.0 { spec.clients as f64 * 1e6 / spec.rate_per_s } else { 0.0 };
    let conn_index = match &job {
        Job::Load(g) => g.conn(),
        Job::Script(_) => 0,
    };
    let mut next_send_us = interval_us * conn_index as f64 / spec.clients.max(1) as f64;
    if let Job::Load(g) = &job {
        if g.is_watcher() {
            session.submit(g.watch_request(), 0, window.now_ms());
            in_flight += 1;
        }
    }
    loop {
        // One clock read per round (and after each wait): the replies handled and the requests
        // sent in a round share it.
        let mut now_us = window.now_us();
        session.tick(now_us / 1000);
        while let Some(out) = session.poll_output() {
            match out {
                Output::Connect(server) => match connect(addr, &server, spec.tls.clone()).await {
                    Ok(s) => {
                        stream = Some(s);
                        if connected_once {
                            result.reconnects += 1;
                        }
                        connected_once = true;
                        now_us = window.now_us();
                        session.transport_connected(now_us / 1000);
                    }
                    Err(e) => {
                        *result.errors.entry(format!("connect: {e}")).or_default() += 1;
                        now_us = window.now_us();
                        session.transport_closed(now_us / 1000);
                    }
                },
                Output::Disconnect => stream = None,
                Output::Reply { token: CLOSE_TOKEN, .. } => return result,
                Output::Reply { token, result: r, .. } => {
                    in_flight = in_flight.saturating_sub(1);
                    let now = now_us;
                    let counted = token >= window.from_us && now <= window.to_us;
                    match r {
                        Ok(_) => {
                            if counted {
                                result.completed += 1;
                                let _ = result.latency_us.record((now - token).clamp(1, LATENCY_US_MAX));
                                progress.fetch_add(1, Relaxed);
                            }
                        }
                        // The set-up tolerates what an earlier run left.
                        Err(ErrorCode::NodeExists) if matches!(job, Job::Script(_)) => {}
                        Err(e) => {
                            if counted || matches!(job, Job::Script(_)) {
                                *result.errors.entry(format!("{e:?}")).or_default() += 1;
                            }
                        }
                    }
                }
                Output::Watch { .. } => {
                    let now = now_us;
                    if now >= window.from_us && now <= window.to_us {
                        result.events += 1;
                    }
                    if let Job::Load(g) = &job {
                        if closing_since.is_none() {
                            session.submit(g.watch_request(), now_us, now_us / 1000);
                            in_flight += 1;
                        }
                    }
                }
                Output::Session(ev) => {
                    if matches!(ev.keeper_state, KeeperState::Expired | KeeperState::AuthFailed | KeeperState::Closed) {
                        *result.errors.entry(format!("session {:?}", ev.keeper_state)).or_default() += 1;
                        return result;
                    }
                }
                // Load sessions never ask for read-only, so they are never asked to probe.
                Output::ProbeReadWrite(_) => {}
            }
        }
        let done = match &job {
            Job::Load(_) => now_us >= window.to_us,
            Job::Script(reqs) => script_next >= reqs.len() && in_flight == 0,
        };
        match closing_since {
            None if done => {
                closing_since = Some(Instant::now());
                session.submit(Request::CloseSession, CLOSE_TOKEN, now_us / 1000);
            }
            Some(t) if t.elapsed() >= Duration::from_millis(CLOSE_WAIT_MS) => return result,
            _ => {}
        }
        if closing_since.is_none() {
            match &mut job {
                Job::Load(g) if !g.is_watcher() && interval_us > 0.0 => {
                    let now = now_us as f64;
                    while next_send_us <= now && in_flight < spec.outstanding && session.can_submit() {
                        let (_, req) = g.next();
                        session.submit(req, next_send_us as u64, now_us / 1000);
                        next_send_us += interval_us;
                        in_flight += 1;
                    }
                }
                Job::Load(g) if !g.is_watcher() => {
                    while in_flight < spec.outstanding && session.can_submit() {
                        let (_, req) = g.next();
                        session.submit(req, now_us, now_us / 1000);
                        in_flight += 1;
                    }
                }
                Job::Script(reqs) => {
                    while in_flight < spec.outstanding && script_next < reqs.len() && session.can_submit() {
                        session.submit(reqs[script_next].clone(), now_us, now_us / 1000);
                        script_next += 1;
                        in_flight += 1;
                    }
                }
                Job::Load(_) => {}
            }
        }
        let Some(s) = stream.as_mut() else {
            glommio::timer::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let pending = session.output_bytes().len();
        if pending > 0 {
            if s.write_all(session.output_bytes()).await.is_err() || s.flush().await.is_err() {
                stream = None;
                session.transport_closed(window.now_ms());
                continue;
            }
            session.consume_output(pending);
        }
        if interval_us > 0.0 {
            let wait_us =
                (next_send_us - window.now_us() as f64).clamp(READ_WAIT_US_MIN as f64, READ_WAIT_MS as f64 * 1e3);
            let _ = s.tcp().set_read_timeout(Some(Duration::from_micros(wait_us as u64)));
        }
        match s.read(&mut buf).await {
            Ok(0) => {
                stream = None;
                session.transport_closed(window.now_ms());
            }
            Ok(n) => session.receive(&buf[..n], window.now_ms()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {}
            Err(_) => {
                stream = None;
                session.transport_closed(window.now_ms());
            }
        }
    }
}

/// How long a TLS handshake may take.
const TLS_HANDSHAKE_WAIT_MS: u64 = 10_000;

/// A connection to `addr` (TCP_NODELAY, reads waiting at most READ_WAIT_MS), TLS over it
/// when `tls` is set.
async fn connect(
    addr: std::net::SocketAddr,
    server: &HostPort,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> std::io::Result<MaybeTls<TcpStream>> {
    let s = TcpStream::connect(addr).await.map_err(std::io::Error::from)?;
    let _ = s.set_nodelay(true);
    // The TLS handshake may wait on a server far longer than one read round.
    let _ = s.set_read_timeout(Some(Duration::from_millis(TLS_HANDSHAKE_WAIT_MS)));
    let s = wrap(s, server, tls).await?;
    let _ = s.tcp().set_read_timeout(Some(Duration::from_millis(READ_WAIT_MS)));
    Ok(s)
}

/// Runs `jobs` (connection index → job) on `spec.threads` executors; merges their results.
fn run_jobs(
    spec: &PointSpec,
    jobs: Vec<(usize, JobSpec)>,
    window: Window,
    progress: &Arc<AtomicU64>,
) -> Result<PointResult, String> {
    let threads = spec.threads.max(1);
    let mut per_thread: Vec<Vec<(usize, JobSpec)>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, j) in jobs {
        per_thread[i % threads].push((i, j));
    }
    let mut handles = Vec::new();
    for (t, jobs) in per_thread.into_iter().enumerate() {
        if jobs.is_empty() {
            continue;
        }
        let placement = match spec.pin.get(t % spec.pin.len().max(1)) {
            Some(&cpu) if !spec.pin.is_empty() => Placement::Fixed(cpu),
            _ => Placement::Unbound,
        };
        let (spec, progress) = (Rc::new(spec.clone()), progress.clone());
        let spec_send = (*spec).clone();
        let h = LocalExecutorBuilder::new(placement)
            .name(&format!("rk-bench-{t}"))
            .spawn(move || async move {
                let spec = Rc::new(spec_send);
                let merged = Rc::new(RefCell::new(PointResult::empty()));
                let mut tasks = Vec::new();
                for (i, job) in jobs {
                    let server = if spec.spread {
                        spec.servers[i % spec.servers.len()].clone()
                    } else {
                        spec.servers[0].clone()
                    };
                    let job = match job {
                        JobSpec::Load => Job::Load(Generator::new(
                            spec.workload,
                            spec.read_permille,
                            spec.znodes,
                            spec.payload.clone(),
                            i,
                            spec.seed ^ (i as u64).wrapping_mul(0x1000_0000_01B3),
                        )),
                        JobSpec::Script(reqs) => Job::Script(reqs),
                    };
                    let (spec, progress, merged) = (spec.clone(), progress.clone(), merged.clone());
                    tasks.push(glommio::spawn_local(async move {
                        let mut r = connection(server, job, spec, window, progress).await;
                        r.seal_connection();
                        merged.borrow_mut().merge(r);
                    }));
                }
                for t in tasks {
                    t.await;
                }
                Rc::try_unwrap(merged).map(|m| m.into_inner()).unwrap_or_else(|_| PointResult::empty())
            })
            .map_err(|e| format!("cannot start a load executor: {e}"))?;
        drop(spec);
        handles.push(h);
    }
    let mut total = PointResult::empty();
    for h in handles {
        total.merge(h.join().map_err(|e| format!("a load executor failed: {e}"))?);
    }
    total.seconds = (window.to_us - window.from_us) as f64 / 1e6;
    Ok(total)
}

#[derive(Debug, Clone)]
enum JobSpec {
    Load,
    Script(Vec<Request>),
}

/// Creates the znodes the workloads use, over a few connections.
pub fn setup(spec: &PointSpec) -> Result<(), String> {
    let acl = setup_acl(spec.sasl.as_ref().map(|c| c.username.as_str()));
    let reqs = setup_requests(spec.znodes, &spec.payload, &acl);
    let (root, nodes) = reqs.split_at(1);
    let conns = spec.clients.clamp(1, 8);
    let never = Window { t0: Instant::now(), from_us: u64::MAX, to_us: u64::MAX };
    let progress = Arc::new(AtomicU64::new(0));
    let one = PointSpec { threads: 1, ..spec.clone() };
    let r = run_jobs(&one, vec![(0, JobSpec::Script(root.to_vec()))], never, &progress)?;
    let mut jobs: Vec<(usize, JobSpec)> = (0..conns).map(|c| (c, JobSpec::Script(Vec::new()))).collect();
    for (k, req) in nodes.iter().enumerate() {
        if let JobSpec::Script(v) = &mut jobs[k % conns].1 {
            v.push(req.clone());
        }
    }
    let r2 = run_jobs(&one, jobs, never, &progress)?;
    let errors: u64 = r.error_count() + r2.error_count();
    if errors > 0 {
        let mut all = r.errors;
        all.extend(r2.errors);
        return Err(format!("set-up failed: {all:?}"));
    }
    Ok(())
}

/// Runs each request list on a connection of its own (`spec.outstanding` in flight per
/// connection, every connection to the first server unless `spec.spread`), until all are
/// answered; NodeExists is tolerated, every other error is counted.
pub fn run_scripts(spec: &PointSpec, scripts: Vec<Vec<Request>>) -> Result<PointResult, String> {
    let never = Window { t0: Instant::now(), from_us: u64::MAX, to_us: u64::MAX };
    let jobs = scripts.into_iter().enumerate().map(|(i, s)| (i, JobSpec::Script(s))).collect();
    run_jobs(spec, jobs, never, &Arc::new(AtomicU64::new(0)))
}

/// Runs one point: warm-up, then the measured window.
pub fn run_point(spec: &PointSpec, progress: &Arc<AtomicU64>) -> Result<PointResult, String> {
    let t0 = Instant::now();
    let from_us = spec.warmup.as_micros() as u64;
    let window = Window { t0, from_us, to_us: from_us + spec.measure.as_micros() as u64 };
    let jobs = (0..spec.clients).map(|i| (i, JobSpec::Load)).collect();
    let steal = crate::host_cpu::StealSampler::start(t0 + spec.warmup, t0 + spec.warmup + spec.measure);
    let mut result = run_jobs(spec, jobs, window, progress);
    let host_steal_per_s = steal.finish();
    if let Ok(r) = &mut result {
        r.host_steal_per_s = host_steal_per_s;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_connection(latencies_us: &[u64]) -> PointResult {
        let mut r = PointResult::empty();
        for &us in latencies_us {
            r.completed += 1;
            r.latency_us.record(us).expect("in bounds");
        }
        r.seal_connection();
        r
    }

    #[test]
    fn fairness_is_the_median_and_the_worst_connections_p99() {
        let mut total = PointResult::empty();
        assert_eq!(total.fairness(), None);
        // p99 of 100 samples 1..=100 ms is 99 ms; a connection with nothing measured counts not.
        for scale in [1u64, 3, 2, 5] {
            let lat: Vec<u64> = (1..=100).map(|i| i * 1000 * scale).collect();
            total.merge(one_connection(&lat));
        }
        total.merge(one_connection(&[]));
        let (median, worst) = total.fairness().expect("measured");
        let near = |a: u64, b: u64| a.abs_diff(b) * 1000 <= b; // hdrhistogram's 3 digits
        assert!(near(median, 2 * 99_000), "lower middle of 99, 198, 297, 495 ms: {median}");
        assert!(near(worst, 5 * 99_000), "{worst}");
        assert_eq!(total.conn_p99_us.len(), 4);
    }
}
