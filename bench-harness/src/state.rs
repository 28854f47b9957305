//! Large-state measurements (issue 13), driven by scripts/bench-state.sh against ringkeeper and
//! Apache ZooKeeper alike: `fill` loads N znodes of a given size spread over parents with many
//! requests in flight; `wait-read` times until a server answers a read of one znode (restart to
//! serving, a follower caught up); `writer` is a closed-loop writer (one write in flight) that
//! records the gaps between consecutive acknowledged writes (the pause a client sees), with
//! the acknowledgements and longest gap of each wall-clock second (`per_second`: unix second,
//! acks, longest gap ending in it, ms) so that a driver can tell phases apart.
//! Rules: every figure printed is measured; each command prints one JSON object on stdout
//! (progress goes to stderr); every wait has a deadline; nothing here knows which server it
//! talks to.

use crate::load::{self, PointSpec};
use bytes::Bytes;
use futures_lite::future;
use ringkeeper::client::connect_string::ConnectString;
use ringkeeper::client::driver::glommio::{block_on, connect};
use ringkeeper::client::{Client, ClientOptions, CreateMode, KeeperError, OPEN_ACL_UNSAFE};
use ringkeeper::proto::request::Request;
use ringkeeper::proto::OpCode;
use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Session timeout of the measuring clients.
pub const SESSION_TIMEOUT_MS: u64 = 10_000;
/// How long one wait-read attempt waits for a session and its reply, at first: a server that
/// accepts connections while it loads (ZooKeeper) may hold or drop a session attempt, so short
/// attempts bound the error of the measured time. The wait doubles every
/// `ATTEMPT_WAIT_DOUBLING` attempts, up to `ATTEMPT_WAIT_MS` (a slow server still gets read).
pub const ATTEMPT_WAIT_MS_MIN: u64 = 250;
pub const ATTEMPT_WAIT_DOUBLING: u64 = 20;
/// Longest wait of one attempt, and of closing a session.
pub const ATTEMPT_WAIT_MS: u64 = 10_000;
/// How long a closed port's connect(2) may take.
pub const PROBE_WAIT_MS: u64 = 500;
/// Gaps listed individually in the writer's result (the longest are always in max_gap_ms).
pub const GAPS_LISTED_MAX: usize = 200;

#[derive(clap::Args)]
pub struct FillArgs {
    /// One server (host:port); every connection goes to it.
    #[arg(long, default_value = "127.0.0.1:2181")]
    server: String,
    #[arg(long, default_value_t = 1_000_000)]
    znodes: u64,
    /// Parents the znodes are spread over (round robin).
    #[arg(long, default_value_t = 1_000)]
    parents: u64,
    /// Bytes of data per znode.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Top-level znode the parents live under.
    #[arg(long, default_value = "/rkstate")]
    root: String,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Creates each connection keeps in flight.
    #[arg(long, default_value_t = 250)]
    outstanding: usize,
    /// Znodes per round (each round's requests are built, sent, and all answered first).
    #[arg(long, default_value_t = 50_000)]
    batch: u64,
}

/// The path of znode `i` of a fill (`parents` > 0).
pub fn fill_path(root: &str, parents: u64, i: u64) -> String {
    format!("{root}/p{}/n{i}", i % parents)
}

fn create(path: String, data: Bytes) -> Request {
    Request::Create {
        opcode: OpCode::Create,
        path,
        data: Some(data),
        acl: Some(OPEN_ACL_UNSAFE.clone()),
        flags: 0,
        ttl_ms: -1,
    }
}

fn one_server(s: &str) -> Result<ringkeeper::client::HostPort, String> {
    let cs = ConnectString::parse(s).map_err(|e| format!("{s}: {e:?}"))?;
    match cs.servers.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!("{s}: give exactly one server")),
    }
}

pub fn fill(a: FillArgs) -> Result<(), String> {
    if a.parents == 0 || a.clients == 0 || a.outstanding == 0 || a.batch == 0 {
        return Err("--parents, --clients, --outstanding and --batch must be at least 1".into());
    }
    let spec = PointSpec {
        servers: vec![one_server(&a.server)?],
        spread: false,
        clients: a.clients,
        outstanding: a.outstanding,
        payload: Bytes::new(),
        znodes: 1,
        read_permille: 0,
        workload: crate::workload::Workload::GetSet,
        warmup: Duration::ZERO,
        measure: Duration::ZERO,
        threads: 1,
        pin: Vec::new(),
        session_timeout_ms: SESSION_TIMEOUT_MS as u32,
        seed: 1,
        rate_per_s: 0.0,
        tls: None,
        sasl: None,
    };
    let payload = Bytes::from(vec![b'v'; a.payload]);
    let t0 = Instant::now();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut rounds: Vec<Vec<Vec<Request>>> = vec![vec![vec![create(a.root.clone(), Bytes::new())]]];
    let parents: Vec<Request> = (0..a.parents).map(|p| create(format!("{}/p{p}", a.root), Bytes::new())).collect();
    rounds.push(split(parents, a.clients));
    let run = |scripts: Vec<Vec<Request>>, errors: &mut BTreeMap<String, u64>| -> Result<(), String> {
        let r = load::run_scripts(&PointSpec { clients: scripts.len(), ..spec.clone() }, scripts)?;
        for (k, v) in r.errors {
            *errors.entry(k).or_default() += v;
        }
        Ok(())
    };
    for scripts in rounds {
        run(scripts, &mut errors)?;
    }
    let mut next = 0u64;
    while next < a.znodes && errors.is_empty() {
        let end = (next + a.batch).min(a.znodes);
        let reqs = (next..end).map(|i| create(fill_path(&a.root, a.parents, i), payload.clone())).collect();
        run(split(reqs, a.clients), &mut errors)?;
        next = end;
        eprint!("\rfill: {next}/{} znodes, {:.1} s   ", a.znodes, t0.elapsed().as_secs_f64());
    }
    eprintln!();
    if !errors.is_empty() {
        return Err(format!("fill stopped after {next} znodes: errors {errors:?}"));
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "{{\"znodes\":{},\"parents\":{},\"payload_bytes\":{},\"seconds\":{s:.3},\"creates_per_s\":{:.0},\"last_path\":\"{}\"}}",
        a.znodes,
        a.parents,
        a.payload,
        a.znodes as f64 / s.max(1e-9),
        fill_path(&a.root, a.parents, a.znodes.saturating_sub(1))
    );
    Ok(())
}

/// Deals `reqs` round robin into `n` lists.
fn split(reqs: Vec<Request>, n: usize) -> Vec<Vec<Request>> {
    let mut out: Vec<Vec<Request>> = (0..n).map(|_| Vec::new()).collect();
    for (k, r) in reqs.into_iter().enumerate() {
        out[k % n].push(r);
    }
    out.retain(|v| !v.is_empty());
    out
}

#[derive(clap::Args)]
pub struct WaitReadArgs {
    #[arg(long, default_value = "127.0.0.1:2181")]
    server: String,
    #[arg(long)]
    path: String,
    #[arg(long, default_value_t = 300.0)]
    timeout_s: f64,
    /// Pause between attempts (the TCP port is probed this often while it is closed).
    #[arg(long, default_value_t = 20)]
    interval_ms: u64,
}

fn options(connect_wait_ms: u64) -> ClientOptions {
    let mut o = ClientOptions::default().session_timeout(Duration::from_millis(SESSION_TIMEOUT_MS));
    o.connect_wait = Duration::from_millis(connect_wait_ms);
    o
}

/// Races `f` against a timer of `ms`.
async fn within<T>(ms: u64, f: impl std::future::Future<Output = T>) -> Option<T> {
    future::or(async { Some(f.await) }, async {
        glommio::timer::sleep(Duration::from_millis(ms)).await;
        None
    })
    .await
}

pub fn wait_read(a: WaitReadArgs) -> Result<(), String> {
    let hp = one_server(&a.server)?;
    let addr = (hp.host.as_str(), hp.port)
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", a.server))?
        .next()
        .ok_or_else(|| format!("{} resolves to nothing", a.server))?;
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(a.timeout_s);
    let (server, path, interval) = (a.server.clone(), a.path.clone(), Duration::from_millis(a.interval_ms));
    let outcome = block_on(async move {
        let mut attempts = 0u64;
        let mut last = String::from("no attempt");
        while Instant::now() < deadline {
            // A closed port costs a connect(2), not a session attempt with its back-off.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(PROBE_WAIT_MS)).is_err() {
                glommio::timer::sleep(interval).await;
                continue;
            }
            let wait_ms = (ATTEMPT_WAIT_MS_MIN << (attempts / ATTEMPT_WAIT_DOUBLING).min(16)).min(ATTEMPT_WAIT_MS);
            attempts += 1;
            let got = within(wait_ms, async {
                let (client, _events) =
                    connect(&server, options(wait_ms)).await.map_err(|e| format!("connect: {e}"))?;
                let r = client.get_data(&path).await;
                Ok::<_, String>((client, r, t0.elapsed()))
            })
            .await;
            // The read's time is taken before the session is closed; closing is not timed.
            let got = match got {
                Some(Ok((client, r, at))) => {
                    let _ = within(ATTEMPT_WAIT_MS, client.close()).await;
                    Some(r.map(|_| at).map_err(|e| format!("getData: {e:?}")))
                }
                Some(Err(e)) => Some(Err(e)),
                None => None,
            };
            match got {
                Some(Ok(at)) => return Ok((at, attempts)),
                Some(Err(e)) => last = e,
                None => last = format!("no answer within {wait_ms} ms"),
            }
            eprintln!("wait-read: attempt {attempts} at {} ms: {last}", t0.elapsed().as_millis());
            glommio::timer::sleep(interval).await;
        }
        Err(format!("{path} not readable on {server} within {} s ({attempts} attempts; last: {last})", a.timeout_s))
    })
    .map_err(|e| e.to_string())?;
    let (took, attempts) = outcome?;
    println!("{{\"path\":\"{}\",\"ms\":{:.1},\"attempts\":{attempts}}}", a.path, took.as_secs_f64() * 1e3);
    Ok(())
}

#[derive(clap::Args)]
pub struct WriterArgs {
    /// One server (a leader, to measure what its writers see).
    #[arg(long, default_value = "127.0.0.1:2181")]
    server: String,
    /// The znode written (created if missing).
    #[arg(long, default_value = "/rkstate-writer")]
    path: String,
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Stop when this file exists (checked after each acknowledged write) ...
    #[arg(long)]
    stop_file: Option<PathBuf>,
    /// ... or after this many seconds at most.
    #[arg(long, default_value_t = 600.0)]
    duration_s: f64,
    /// Gaps at least this long are listed with their start time.
    #[arg(long, default_value_t = 100.0)]
    list_gaps_ms: f64,
}

fn unix_ms(base_unix_ms: f64, base: Instant, t: Instant) -> f64 {
    base_unix_ms + t.duration_since(base).as_secs_f64() * 1e3
}

pub fn writer(a: WriterArgs) -> Result<(), String> {
    let base = Instant::now();
    let base_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?.as_secs_f64() * 1e3;
    let deadline = base + Duration::from_secs_f64(a.duration_s);
    let payload = Bytes::from(vec![b'w'; a.payload]);
    let WriterArgs { server, path, stop_file, list_gaps_ms, .. } = a;
    let result = block_on(async move {
        let mut client: Option<Client> = None;
        let mut errors: BTreeMap<String, u64> = BTreeMap::new();
        let mut acks = 0u64;
        let mut gaps_ms: Vec<f64> = Vec::new();
        let mut listed: Vec<(f64, f64)> = Vec::new();
        // Unix second of an acknowledgement -> (acks, longest gap ending in it).
        let mut per_s: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
        let mut last_ack = Instant::now();
        let first = last_ack;
        loop {
            let now = Instant::now();
            if now >= deadline || stop_file.as_ref().is_some_and(|f| f.exists()) {
                break;
            }
            let left_ms = deadline.duration_since(now).as_millis() as u64;
            let c = match &client {
                Some(c) => c.clone(),
                None => match within(left_ms, connect(&server, options(ATTEMPT_WAIT_MS))).await {
                    Some(Ok((c, _events))) => {
                        match c.create(&path, Bytes::new(), &OPEN_ACL_UNSAFE, CreateMode::Persistent).await {
                            Ok(_) | Err(KeeperError::NodeExists) => {}
                            Err(e) => *errors.entry(format!("create: {e:?}")).or_default() += 1,
                        }
                        client = Some(c.clone());
                        c
                    }
                    Some(Err(e)) => {
                        *errors.entry(format!("connect: {e}")).or_default() += 1;
                        continue;
                    }
                    None => break,
                },
            };
            match within(left_ms, c.set_data(&path, payload.clone(), -1)).await {
                None => break,
                Some(Ok(_)) => {
                    let t = Instant::now();
                    let gap = t.duration_since(last_ack).as_secs_f64() * 1e3;
                    if acks > 0 {
                        gaps_ms.push(gap);
                        if gap >= list_gaps_ms && listed.len() < GAPS_LISTED_MAX {
                            listed.push((unix_ms(base_unix_ms, base, last_ack), gap));
                        }
                    }
                    let b = per_s.entry((unix_ms(base_unix_ms, base, t) / 1e3) as u64).or_default();
                    b.0 += 1;
                    if acks > 0 {
                        b.1 = b.1.max(gap);
                    }
                    acks += 1;
                    last_ack = t;
                }
                Some(Err(e)) => {
                    *errors.entry(format!("{e:?}")).or_default() += 1;
                    if matches!(e, KeeperError::SessionExpired | KeeperError::AuthFailed) {
                        client = None;
                    }
                }
            }
        }
        // A stall still going on at the end is a gap too.
        let end = Instant::now();
        if acks > 0 {
            let open = end.duration_since(last_ack).as_secs_f64() * 1e3;
            if open >= list_gaps_ms && listed.len() < GAPS_LISTED_MAX {
                listed.push((unix_ms(base_unix_ms, base, last_ack), open));
            }
            gaps_ms.push(open);
            let b = per_s.entry((unix_ms(base_unix_ms, base, end) / 1e3) as u64).or_default();
            b.1 = b.1.max(open);
        }
        if let Some(c) = client {
            let _ = within(ATTEMPT_WAIT_MS, c.close()).await;
        }
        (acks, errors, gaps_ms, listed, per_s, end.duration_since(first).as_secs_f64())
    })
    .map_err(|e| e.to_string())?;
    let (acks, errors, mut gaps, listed, per_s, seconds) = result;
    if acks == 0 {
        return Err(format!("no write acknowledged in {seconds:.1} s; errors {errors:?}"));
    }
    gaps.sort_by(f64::total_cmp);
    let q = |p: f64| gaps.get(((gaps.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
    let max = gaps.last().copied().unwrap_or(0.0);
    let errs: Vec<String> = errors.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    let list: Vec<String> = listed.iter().map(|(at, ms)| format!("[{at:.0},{ms:.1}]")).collect();
    let secs: Vec<String> = per_s.iter().map(|(s, (n, g))| format!("[{s},{n},{g:.1}]")).collect();
    println!(
        "{{\"acks\":{acks},\"seconds\":{seconds:.3},\"writes_per_s\":{:.1},\"max_gap_ms\":{max:.1},\"p50_gap_ms\":{:.2},\
         \"p99_gap_ms\":{:.2},\"p999_gap_ms\":{:.2},\"start_unix_ms\":{base_unix_ms:.0},\"errors\":{{{}}},\
         \"gaps_over_ms\":{list_gaps_ms},\"gaps\":[{}],\"per_second\":[{}]}}",
        acks as f64 / seconds.max(1e-9),
        q(0.5),
        q(0.99),
        q(0.999),
        errs.join(","),
        list.join(","),
        secs.join(",")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_paths_are_distinct_and_spread_evenly_over_the_parents() {
        let paths: Vec<String> = (0..10_000).map(|i| fill_path("/r", 1_000, i)).collect();
        let distinct: std::collections::BTreeSet<&String> = paths.iter().collect();
        assert_eq!(distinct.len(), paths.len());
        let mut per_parent: BTreeMap<&str, usize> = BTreeMap::new();
        for p in &paths {
            let parent = p.rsplit_once('/').map(|(a, _)| a).unwrap_or("");
            *per_parent.entry(parent).or_default() += 1;
        }
        assert_eq!(per_parent.len(), 1_000);
        assert!(per_parent.values().all(|&n| n == 10), "{per_parent:?}");
        assert_eq!(fill_path("/r", 1_000, 999_999), "/r/p999/n999999");
    }

    #[test]
    fn split_deals_every_request_in_order_and_leaves_no_empty_list() {
        let reqs: Vec<Request> = (0..5).map(|i| create(format!("/x{i}"), Bytes::new())).collect();
        let lists = split(reqs, 8);
        assert_eq!(lists.len(), 5);
        let lists = split((0..7).map(|i| create(format!("/y{i}"), Bytes::new())).collect(), 3);
        let paths: Vec<Vec<String>> = lists
            .iter()
            .map(|l| {
                l.iter()
                    .map(|r| match r {
                        Request::Create { path, .. } => path.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect()
            })
            .collect();
        assert_eq!(paths, vec![vec!["/y0", "/y3", "/y6"], vec!["/y1", "/y4"], vec!["/y2", "/y5"]]);
    }
}
