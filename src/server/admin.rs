//! The HTTP admin server (`admin.enableServer`, `admin.serverAddress`, `admin.serverPort`):
//! `/commands` and `/commands/<name>` with JSON as ZooKeeper's AdminServer gives it, and
//! `/metrics` in Prometheus text format with ZooKeeper's metric names plus per-core ones.
//! It runs on threads of its own with blocking std sockets (an accept thread, and a short-lived
//! thread per connection, at most `ADMIN_CONNECTIONS_MAX`), and reads only the statistics the
//! cores publish (`stats.rs`), so it adds no work to the request path.
//! Rules: GET only; a request head over `ADMIN_REQUEST_BYTES_MAX`, or not complete within
//! `ADMIN_READ_TIMEOUT_MS` in all, is refused; connections over the limit are closed at once;
//! shutdown waits only for the accept thread; nothing here changes data (like ZooKeeper's,
//! the only command with an effect is `stat_reset`).

use super::four_letter::{version, ZOOKEEPER_COMPAT_VERSION};
use super::messages::ServerMode;
use super::stats::{dir_bytes, CoreStats, Stats};
use crate::config::Config;
use crate::json::json_string;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The largest request head (request line and headers) the admin server reads.
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// How long a client may take to send its whole request head, and to take the reply.
pub const ADMIN_READ_TIMEOUT_MS: u64 = 2_000;
/// Admin connections served at once; more are closed unanswered.
pub const ADMIN_CONNECTIONS_MAX: usize = 16;
/// How often the accept loop looks at the shutdown flag.
const ADMIN_POLL_MS: u64 = 100;

/// Commands and their ZooKeeper aliases (the four-letter word), as `/commands` lists them.
const COMMANDS: &[(&str, &str)] = &[
    ("configuration", "conf"),
    ("dirs", "dirs"),
    ("environment", "envi"),
    ("is_read_only", "isro"),
    ("monitor", "mntr"),
    ("ruok", "ruok"),
    ("server_stats", "srvr"),
    ("stat_reset", "srst"),
];

/// Binds the admin port and serves it on a new thread until `shutdown`. A port that cannot
/// be bound is a warning, not a reason to stop serving clients (as in ZooKeeper).
pub fn start(config: Arc<Config>, stats: Arc<Stats>, shutdown: Arc<AtomicBool>) -> Option<std::thread::JoinHandle<()>> {
    let listener = match TcpListener::bind(config.admin_addr) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "admin server: cannot listen on {}: {e}; continuing without it (set admin.serverPort, or \
                 admin.enableServer=false)",
                config.admin_addr
            );
            return None;
        }
    };
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("admin server: {e}; continuing without it");
        return None;
    }
    tracing::info!("admin server on http://{}/commands and /metrics", config.admin_addr);
    let active = Arc::new(AtomicUsize::new(0));
    let spawned = std::thread::Builder::new().name("rk-admin".into()).spawn(move || {
        while !shutdown.load(Relaxed) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if active.fetch_add(1, Relaxed) >= ADMIN_CONNECTIONS_MAX {
                        active.fetch_sub(1, Relaxed);
                        tracing::debug!(
                            "admin server: {ADMIN_CONNECTIONS_MAX} connections busy; closing one from {peer}"
                        );
                        continue;
                    }
                    let (config, stats, done) = (config.clone(), stats.clone(), active.clone());
                    let worker = std::thread::Builder::new().name("rk-admin-conn".into()).spawn(move || {
                        if let Err(e) = handle(stream, &config, &stats) {
                            tracing::debug!("admin request from {peer} failed: {e}");
                        }
                        done.fetch_sub(1, Relaxed);
                    });
                    if let Err(e) = worker {
                        active.fetch_sub(1, Relaxed);
                        tracing::warn!("admin server: cannot start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(ADMIN_POLL_MS))
                }
                Err(e) => {
                    tracing::warn!("admin server: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(ADMIN_POLL_MS));
                }
            }
        }
    });
    spawned.map_err(|e| tracing::warn!("admin server: cannot start its thread: {e}")).ok()
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

/// Reads one request head; None if it is too large (the reply is already sent).
fn read_head(stream: &mut TcpStream) -> io::Result<Option<String>> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_millis(ADMIN_READ_TIMEOUT_MS)))?;
    let deadline = Instant::now() + Duration::from_millis(ADMIN_READ_TIMEOUT_MS);
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > ADMIN_REQUEST_BYTES_MAX {
            respond(stream, "431 Request Header Fields Too Large", "text/plain", "request too large\n")?;
            return Ok(None);
        }
        // One deadline for the whole head: a client trickling bytes gets no more time.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            respond(stream, "408 Request Timeout", "text/plain", "request too slow\n")?;
            return Ok(None);
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                respond(stream, "408 Request Timeout", "text/plain", "request too slow\n")?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

fn handle(mut stream: TcpStream, config: &Config, stats: &Stats) -> io::Result<()> {
    let Some(head) = read_head(&mut stream)? else { return Ok(()) };
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET is served\n");
    }
    let path = target.split('?').next().unwrap_or("");
    match path.trim_end_matches('/') {
        "/metrics" => respond(&mut stream, "200 OK", "text/plain; version=0.0.4", &metrics(stats)),
        "/commands" => respond(&mut stream, "200 OK", "text/html", &command_list()),
        p => match p.strip_prefix("/commands/").and_then(|name| command(name, config, stats)) {
            Some(json) => respond(&mut stream, "200 OK", "application/json", &json),
            None => {
                let body = format!("{{\"error\":{}}}\n", json_string(&format!("Unknown path or command: {path}")));
                respond(&mut stream, "404 Not Found", "application/json", &body)
            }
        },
    }
}

fn command_list() -> String {
    let mut out = String::from("<html><body><h1>ringkeeper admin commands</h1><ul>\n");
    for (name, alias) in COMMANDS {
        let _ = writeln!(out, "<li><a href=\"/commands/{name}\">{name}</a> ({alias})</li>");
    }
    out.push_str("</ul><p><a href=\"/metrics\">/metrics</a> (Prometheus)</p></body></html>\n");
    out
}

/// The JSON of one command (by name or four-letter alias), or None if there is no such one.
fn command(name: &str, config: &Config, stats: &Stats) -> Option<String> {
    let (name, _) = COMMANDS.iter().find(|(n, a)| *n == name || *a == name)?;
    let mode = ServerMode::from_index(stats.mode.load(Relaxed));
    let t = stats.totals();
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut field = |k: &str, v: String| fields.push((k.to_string(), v));
    let q = json_string;
    match *name {
        "ruok" => {}
        "is_read_only" => field("read_only", "false".into()),
        "stat_reset" => stats.reset(),
        "dirs" => {
            field("datadir_size", dir_bytes(&config.data_dir).to_string());
            field("logdir_size", dir_bytes(&config.data_log_dir).to_string());
        }
        "environment" => {
            field("zookeeper.version", q(&version()));
            field("os.arch", q(std::env::consts::ARCH));
            field("ringkeeper.clientCores", config.client_cores.to_string());
        }
        "configuration" => {
            field("client_port", config.client_port.to_string());
            field("data_dir", q(&config.data_dir.display().to_string()));
            field("data_log_dir", q(&config.data_log_dir.display().to_string()));
            field("tick_time", config.tick_time_ms.to_string());
            field("max_client_cnxns", config.max_client_cnxns.to_string());
            field("min_session_timeout", config.min_session_timeout_ms.to_string());
            field("max_session_timeout", config.max_session_timeout_ms.to_string());
            field("server_id", config.servers.len().min(1).to_string());
        }
        "server_stats" | "monitor" => {
            field("version", q(&version()));
            field("server_state", q(mode.name()));
            field("read_only", "false".into());
            field("avg_latency", format!("{:.4}", t.latency_avg_ms));
            field("max_latency", (t.latency_max_ms as u64).to_string());
            field("min_latency", (t.latency_min_ms as u64).to_string());
            field("packets_received", t.received.to_string());
            field("packets_sent", t.sent.to_string());
            field("num_alive_connections", t.connections.to_string());
            field("outstanding_requests", t.outstanding.to_string());
            field("znode_count", stats.znodes.load(Relaxed).to_string());
            field("watch_count", t.watches.to_string());
            field("ephemerals_count", stats.ephemerals.load(Relaxed).to_string());
            field("approximate_data_size", stats.data_bytes.load(Relaxed).to_string());
            field("last_zxid", stats.zxid.load(Relaxed).to_string());
            if mode == ServerMode::Leader {
                field("learners", stats.learners.load(Relaxed).to_string());
                field("synced_followers", stats.synced_learners.load(Relaxed).to_string());
            }
        }
        _ => return None,
    }
    let mut out = String::from("{");
    for (k, v) in &fields {
        let _ = write!(out, "\"{k}\":{v},");
    }
    let _ = write!(out, "\"command\":\"{name}\",\"error\":null}}");
    out.push('\n');
    Some(out)
}

/// A per-core metric: name, Prometheus type, and how to read it from a core's counters.
type CoreMetric = (&'static str, &'static str, fn(&CoreStats) -> u64);

/// Prometheus text exposition: ZooKeeper's metric names, then ringkeeper's per-core ones.
pub fn metrics(stats: &Stats) -> String {
    let t = stats.totals();
    let mode = ServerMode::from_index(stats.mode.load(Relaxed));
    let mut out = String::new();
    let syncs = stats.fsync_count.load(Relaxed);
    let gauges: [(&str, &str, &str, String); 20] = [
        (
            "elections",
            "counter",
            "times this member started serving after an election",
            stats.elections.load(Relaxed).to_string(),
        ),
        ("fsynctime_count", "counter", "txn log fdatasyncs", syncs.to_string()),
        (
            "fsynctime_sum",
            "counter",
            "total fdatasync time, ms",
            format!("{:.3}", stats.fsync_total_us.load(Relaxed) as f64 / 1000.0),
        ),
        (
            "fsynctime_max",
            "gauge",
            "longest fdatasync, ms",
            format!("{:.3}", stats.fsync_max_us.load(Relaxed) as f64 / 1000.0),
        ),
        (
            "election_time",
            "gauge",
            "ms from losing a leader to serving again, last election",
            stats.election_time_ms.load(Relaxed).to_string(),
        ),
        ("znode_count", "gauge", "znodes in the tree", stats.znodes.load(Relaxed).to_string()),
        ("watch_count", "gauge", "watches set", t.watches.to_string()),
        ("ephemerals_count", "gauge", "ephemeral znodes", stats.ephemerals.load(Relaxed).to_string()),
        ("approximate_data_size", "gauge", "bytes of znode data and paths", stats.data_bytes.load(Relaxed).to_string()),
        ("num_alive_connections", "gauge", "client connections", t.connections.to_string()),
        ("outstanding_requests", "gauge", "requests read and not yet answered", t.outstanding.to_string()),
        ("packets_received", "counter", "packets read from clients", t.received.to_string()),
        ("packets_sent", "counter", "packets written to clients", t.sent.to_string()),
        ("min_latency", "gauge", "fastest request, ms", (t.latency_min_ms as u64).to_string()),
        ("avg_latency", "gauge", "mean request latency, ms", format!("{:.4}", t.latency_avg_ms)),
        ("max_latency", "gauge", "slowest request, ms", (t.latency_max_ms as u64).to_string()),
        ("uptime", "gauge", "ms since start", stats.started.elapsed().as_millis().to_string()),
        ("last_zxid", "gauge", "the last applied zxid", stats.zxid.load(Relaxed).to_string()),
        ("learners", "gauge", "learners connected to this leader", stats.learners.load(Relaxed).to_string()),
        (
            "synced_followers",
            "gauge",
            "learners in sync with this leader",
            stats.synced_learners.load(Relaxed).to_string(),
        ),
    ];
    for (name, kind, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    let _ = writeln!(out, "# HELP server_state 1 for the mode this server is in\n# TYPE server_state gauge");
    for m in ServerMode::ALL {
        let _ = writeln!(out, "server_state{{state=\"{}\"}} {}", m.name(), u8::from(m == mode));
    }
    let _ = writeln!(
        out,
        "# HELP zookeeper_version_info the ZooKeeper version implemented\n# TYPE zookeeper_version_info gauge"
    );
    let _ = writeln!(out, "zookeeper_version_info{{version=\"{ZOOKEEPER_COMPAT_VERSION}\"}} 1");
    let per_core: [CoreMetric; 5] = [
        ("ringkeeper_core_connections", "gauge", |c| c.connections.load(Relaxed)),
        ("ringkeeper_core_packets_received", "counter", |c| c.received.load(Relaxed)),
        ("ringkeeper_core_packets_sent", "counter", |c| c.sent.load(Relaxed)),
        ("ringkeeper_core_outstanding_requests", "gauge", |c| c.outstanding.load(Relaxed)),
        ("ringkeeper_core_watch_count", "gauge", |c| c.watches.load(Relaxed)),
    ];
    for (name, kind, get) in per_core {
        let _ = writeln!(out, "# HELP {name} per client core\n# TYPE {name} {kind}");
        for (i, c) in stats.cores.iter().enumerate() {
            let _ = writeln!(out, "{name}{{core=\"{i}\"}} {}", get(c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_metrics_read_the_published_stats() {
        let stats = Stats::new(2);
        stats.znodes.store(42, Relaxed);
        stats.cores[1].connections.store(3, Relaxed);
        stats.mode.store(ServerMode::Leader.index(), Relaxed);
        stats.learners.store(2, Relaxed);
        let c = Config::embedded_default();
        let m = command("mntr", &c, &stats).unwrap();
        assert!(m.starts_with("{\"version\":\"3.8.0-ringkeeper-"), "{m}");
        for part in
            ["\"server_state\":\"leader\"", "\"znode_count\":42", "\"num_alive_connections\":3", "\"learners\":2"]
        {
            assert!(m.contains(part), "{part} in {m}");
        }
        assert!(m.ends_with("\"command\":\"monitor\",\"error\":null}\n"));
        assert_eq!(command("ruok", &c, &stats).unwrap(), "{\"command\":\"ruok\",\"error\":null}\n");
        assert!(command("wchc", &c, &stats).is_none());
        let p = metrics(&stats);
        for line in [
            "znode_count 42",
            "num_alive_connections 3",
            "server_state{state=\"leader\"} 1",
            "server_state{state=\"follower\"} 0",
            "ringkeeper_core_connections{core=\"1\"} 3",
            "# TYPE packets_received counter",
        ] {
            assert!(p.lines().any(|l| l == line), "{line} in\n{p}");
        }
    }
}
