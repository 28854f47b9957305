//! The HTTP admin server (`admin.enableServer`, `admin.serverAddress`, `admin.serverPort`):
//! `/commands` and `/commands/<name>` with JSON as ZooKeeper's AdminServer gives it, and
//! `/metrics` in Prometheus text format with ZooKeeper's metric names plus per-core ones.
//! HTTP is hyper's (HTTP/1, one request per connection) on a current-thread tokio runtime of
//! its own thread (never a glommio core): idle or slow connections cost no thread, and the
//! commands run on a bounded pool of blocking threads (`ADMIN_BLOCKING_THREADS_MAX`). It reads
//! the statistics the cores publish (`stats.rs`); the commands that list connections, watches
//! or sessions ask client core 0 over a bridge (a bounded queue and a doorbell socket), which
//! collects them like a four-letter word does (`inspect.rs`). Nothing else reaches the
//! request path.
//! `snapshot` and `restore` (ZooKeeper 3.9's, `admin_transfer.rs`) stream a snapshot out and
//! take one in.
//! Rules: GET only (else 405), but for `restore` which is POST only; a request head over `ADMIN_REQUEST_BYTES_MAX` gets 431, one not
//! complete within `ADMIN_READ_TIMEOUT_MS` 408; a connection lives `ADMIN_CONNECTION_MS_MAX`
//! at most (a `snapshot` or `restore` `admin_transfer::ADMIN_TRANSFER_MS_MAX`); connections
//! over `ADMIN_CONNECTIONS_MAX` are closed at once; shutdown waits only for the accept loop;
//! nothing here changes data but `restore` (which the pipeline core carries out, in order) and
//! `stat_reset`. With `admin.forceHttps` / `admin.portUnification` (the
//! `ssl.quorum.*` stores, as ZooKeeper's JettyAdminServer) connections are TLS (tokio-rustls),
//! the handshake within `ADMIN_READ_TIMEOUT_MS`; a unified port tells TLS by the first byte;
//! stores that cannot be used leave no admin server, never a plain one.

use super::admin_auth;
use super::admin_transfer::{self as transfer, AdminBody, Answer, Limiters};
use super::four_letter::{version, ZOOKEEPER_COMPAT_VERSION};
use super::inspect::{ConnInfo, Inspect, Inspected};
use super::messages::ServerMode;
use super::stage_latency::{bucket_upper_us, Snapshot, Stage};
use super::stats::{dir_bytes, CoreStats, Stats};
use crate::config::Config;
use crate::proto::Acl;
use crate::tree::DataTree;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// The largest request head (request line and headers) the admin server reads (hyper's
/// smallest buffer limit; a larger head gets 431).
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 * 1024;
/// How long a client may take to send its whole request head (then 408).
pub const ADMIN_READ_TIMEOUT_MS: u64 = 2_000;
/// How long one connection may last in all (its request, the command, taking the reply).
pub const ADMIN_CONNECTION_MS_MAX: u64 = 10_000;
/// Admin connections open at once; more are closed unanswered. An open connection costs
/// a few KiB and no thread, and lives `ADMIN_CONNECTION_MS_MAX` at most.
pub const ADMIN_CONNECTIONS_MAX: usize = 1024;
/// Threads running commands (they read files, and may wait for the client cores).
pub const ADMIN_BLOCKING_THREADS_MAX: usize = 4;
/// The first byte of a TLS handshake record: how a unified admin port
/// (`admin.portUnification`) tells HTTPS from HTTP.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// How often the accept loop looks at the shutdown flag.
const ADMIN_POLL_MS: u64 = 100;

/// Commands and their ZooKeeper aliases (the four-letter word), as `/commands` lists them.
const COMMANDS: &[(&str, &str)] = &[
    ("configuration", "conf"),
    ("connection_stat_reset", "crst"),
    ("connections", "cons"),
    ("dirs", "dirs"),
    ("dump", "dump"),
    ("environment", "envi"),
    ("is_read_only", "isro"),
    ("monitor", "mntr"),
    ("ruok", "ruok"),
    ("server_stats", "srvr"),
    ("stat_reset", "srst"),
    ("stats", "stat"),
    ("watch_summary", "wchs"),
    ("watches", "wchc"),
    ("watches_by_path", "wchp"),
];

/// Inspections the admin server may have queued for client core 0 at once.
pub const ADMIN_INSPECTIONS_QUEUED_MAX: usize = 4;

/// An admin command's question for client core 0, and where the answer goes.
pub enum Ask {
    /// Collect an inspection from every core (the commands that list things).
    Inspect { what: Inspect, reply: SyncSender<Arc<Inspected>> },
    /// The root znode's ACL in core 0's current tree (admin authorization).
    RootAcl { reply: SyncSender<Arc<[Acl]>> },
    /// Core 0's current tree, the committed root it answers reads from (`snapshot`).
    Tree { reply: SyncSender<DataTree> },
    /// Relay to the pipeline core: make `tree` the server's tree (`restore`).
    Restore { tree: Box<DataTree>, reply: SyncSender<Result<i64, String>> },
}

/// The admin side of the bridge to client core 0, for the commands that list connections,
/// watches and sessions: a bounded queue of questions, and a socket that rings core 0's
/// event loop (which cannot wait on a std channel).
pub struct Inspector {
    asks: SyncSender<Ask>,
    doorbell: UnixStream,
}

/// Client core 0's side of the bridge: it reads the doorbell, then takes the questions.
pub struct InspectorEnd {
    pub asks: Receiver<Ask>,
    pub doorbell: UnixStream,
}

/// A connected pair of bridge ends.
pub fn inspector() -> io::Result<(Inspector, InspectorEnd)> {
    let (a, b) = UnixStream::pair()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(ADMIN_INSPECTIONS_QUEUED_MAX);
    Ok((Inspector { asks: tx, doorbell: a }, InspectorEnd { asks: rx, doorbell: b }))
}

impl Inspector {
    /// Every core's report on `what`; None if the cores are busy or do not answer in time.
    pub fn ask(&self, what: Inspect) -> Option<Arc<Inspected>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Ask::Inspect { what, reply: tx })?;
        rx.recv_timeout(Duration::from_millis(ADMIN_READ_TIMEOUT_MS)).ok()
    }

    /// The root's ACL; None if core 0 is busy or does not answer in time.
    pub fn root_acl(&self) -> Option<Arc<[Acl]>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Ask::RootAcl { reply: tx })?;
        rx.recv_timeout(Duration::from_millis(ADMIN_READ_TIMEOUT_MS)).ok()
    }

    /// An O(1) clone of the committed tree core 0 answers from; None if it does not answer.
    pub fn committed_tree(&self) -> Option<DataTree> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Ask::Tree { reply: tx })?;
        rx.recv_timeout(Duration::from_millis(ADMIN_READ_TIMEOUT_MS)).ok()
    }

    /// Has the pipeline core make `tree` the server's tree: the zxid it took, or why not;
    /// None if nothing answered within `wait`.
    pub fn restore(&self, tree: DataTree, wait: Duration) -> Option<Result<i64, String>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.send(Ask::Restore { tree: Box::new(tree), reply: tx })?;
        rx.recv_timeout(wait).ok()
    }

    fn send(&self, ask: Ask) -> Option<()> {
        self.asks.try_send(ask).ok()?;
        (&self.doorbell).write_all(&[1]).ok()
    }
}

/// Binds the admin port and serves it on a new thread until `shutdown`. A port that cannot
/// be bound is a warning, not a reason to stop serving clients (as in ZooKeeper).
pub fn start(
    config: Arc<Config>,
    stats: Arc<Stats>,
    inspector: Option<Inspector>,
    shutdown: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let inspector = inspector.map(Arc::new);
    let listener = match std::net::TcpListener::bind(config.admin_addr) {
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(ADMIN_BLOCKING_THREADS_MAX)
        .thread_name("rk-admin-work")
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("admin server: cannot start its runtime: {e}; continuing without it");
            return None;
        }
    };
    let tls = match &config.admin_tls {
        None => None,
        // The stores are read on this (non-core) thread; one that cannot be used leaves no
        // admin server rather than a plain one.
        Some(t) => match crate::tls::server_config(&t.stores) {
            Ok(c) => Some(AdminTls { config: Arc::new(c), unified: t.port_unification }),
            Err(e) => {
                tracing::error!("admin server: HTTPS asked for, but the ssl.quorum.* stores cannot be used ({e}); continuing without the admin server");
                return None;
            }
        },
    };
    let scheme = match &tls {
        None => "http",
        Some(t) if t.unified => "https (and http: admin.portUnification)",
        Some(_) => "https",
    };
    tracing::info!("admin server on {scheme}://{}/commands and /metrics", config.admin_addr);
    let limiters = Limiters::new(&config);
    let app = Arc::new(App { config, stats, inspector, tls, limiters });
    let spawned = std::thread::Builder::new().name("rk-admin".into()).spawn(move || {
        runtime.block_on(accept_loop(listener, app, shutdown));
        // Connections still open and commands still running are abandoned, not awaited.
        runtime.shutdown_background();
    });
    spawned.map_err(|e| tracing::warn!("admin server: cannot start its thread: {e}")).ok()
}

/// What a request needs.
struct App {
    config: Arc<Config>,
    stats: Arc<Stats>,
    inspector: Option<Arc<Inspector>>,
    tls: Option<AdminTls>,
    /// `snapshot` and `restore`, one per interval each.
    limiters: Limiters,
}

impl App {
    /// The request's caller, for the transfer commands.
    fn caller<'a>(&'a self, authorization: Option<&'a str>, peer: IpAddr) -> transfer::Caller<'a> {
        let (config, limiters, inspector) = (&*self.config, &self.limiters, self.inspector.as_deref());
        transfer::Caller { config, limiters, inspector, authorization, peer }
    }
}

/// HTTPS on the admin port: the rustls configuration of the `ssl.quorum.*` stores, and
/// whether plain HTTP is taken too.
struct AdminTls {
    config: Arc<rustls::ServerConfig>,
    unified: bool,
}

async fn accept_loop(listener: std::net::TcpListener, app: Arc<App>, shutdown: Arc<AtomicBool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("admin server: {e}; continuing without it");
            return;
        }
    };
    let active = Arc::new(AtomicUsize::new(0));
    while !shutdown.load(Relaxed) {
        let poll = async {
            tokio::time::sleep(Duration::from_millis(ADMIN_POLL_MS)).await;
            None
        };
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, poll).await;
        match accepted {
            None => {}
            Some(Ok((stream, peer))) => {
                if active.fetch_add(1, Relaxed) >= ADMIN_CONNECTIONS_MAX {
                    active.fetch_sub(1, Relaxed);
                    tracing::debug!("admin server: {ADMIN_CONNECTIONS_MAX} connections open; closing one from {peer}");
                    continue;
                }
                let (app, active) = (app.clone(), active.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve_connection(stream, peer.ip(), app).await {
                        tracing::debug!("admin connection from {peer}: {e}");
                    }
                    active.fetch_sub(1, Relaxed);
                });
            }
            Some(Err(e)) => {
                tracing::warn!("admin server: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(ADMIN_POLL_MS)).await;
            }
        }
    }
}

/// How a connection ended.
enum Ended {
    Served,
    HeadTimeout,
    Timeout,
}

/// Serves one connection: over TLS when the admin port speaks HTTPS (the handshake within
/// `ADMIN_READ_TIMEOUT_MS`; on a unified port only when the first byte opens one).
async fn serve_connection(stream: tokio::net::TcpStream, peer: IpAddr, app: Arc<App>) -> io::Result<()> {
    let Some(tls) = &app.tls else { return serve_http(stream, peer, app).await };
    if tls.unified {
        let mut first = [0u8; 1];
        let peeked = tokio::time::timeout(Duration::from_millis(ADMIN_READ_TIMEOUT_MS), stream.peek(&mut first)).await;
        match peeked {
            Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
            Ok(Ok(1)) => return serve_http(stream, peer, app).await,
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "no first byte in time")),
        }
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
    let handshake = tokio::time::timeout(Duration::from_millis(ADMIN_READ_TIMEOUT_MS), acceptor.accept(stream)).await;
    let stream = match handshake {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(io::Error::other(format!("TLS handshake failed: {e}"))),
        Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "no TLS handshake in time")),
    };
    serve_hyper(stream, None, peer, app).await
}

/// Serves one plain connection; its 408 is written on a second handle of the socket.
async fn serve_http(stream: tokio::net::TcpStream, peer: IpAddr, app: Arc<App>) -> io::Result<()> {
    let std_stream = stream.into_std()?;
    let spare = std_stream.try_clone()?;
    let stream = tokio::net::TcpStream::from_std(std_stream)?;
    serve_hyper(stream, Some(spare), peer, app).await
}

/// Serves one connection (one request: no keep-alive) with hyper, within the deadlines: the
/// request head within `ADMIN_READ_TIMEOUT_MS` (else 408, written on `spare`, a second handle
/// of a plain socket since hyper owns the first; over TLS the connection is just closed), the
/// whole exchange within `ADMIN_CONNECTION_MS_MAX`.
async fn serve_hyper<S>(stream: S, spare: Option<std::net::TcpStream>, peer: IpAddr, app: Arc<App>) -> io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let arrived = Arc::new(AtomicBool::new(false));
    let long = Arc::new(AtomicBool::new(false));
    let service = {
        let (arrived, long) = (arrived.clone(), long.clone());
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            long.store(transfer::is_transfer(req.uri().path()), Relaxed);
            arrived.store(true, Relaxed);
            let app = app.clone();
            async move { Ok::<_, std::convert::Infallible>(respond(app, peer, req).await) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(ADMIN_REQUEST_BYTES_MAX)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let served = async {
        let r = conn.await;
        (Ended::Served, r.err())
    };
    let deadlines = async {
        tokio::time::sleep(Duration::from_millis(ADMIN_READ_TIMEOUT_MS)).await;
        if !arrived.load(Relaxed) {
            return (Ended::HeadTimeout, None);
        }
        let total_ms = if long.load(Relaxed) { transfer::ADMIN_TRANSFER_MS_MAX } else { ADMIN_CONNECTION_MS_MAX };
        tokio::time::sleep(Duration::from_millis(total_ms - ADMIN_READ_TIMEOUT_MS)).await;
        (Ended::Timeout, None)
    };
    match futures_lite::future::or(served, deadlines).await {
        (Ended::Served, None) => Ok(()),
        (Ended::Served, Some(e)) => Err(io::Error::other(e)),
        (Ended::HeadTimeout, _) => {
            // Best effort: the socket is non-blocking and this reply is small.
            if let Some(spare) = &spare {
                let _ = (&*spare).write_all(&plain_reply("408 Request Timeout", "request too slow\n"));
            }
            Err(io::Error::new(io::ErrorKind::TimedOut, "request head not complete in time"))
        }
        (Ended::Timeout, _) => Err(io::Error::new(io::ErrorKind::TimedOut, "exchange not complete in time")),
    }
}

/// A whole HTTP/1.1 reply with a plain-text body, for when hyper no longer holds the socket.
fn plain_reply(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn reply(status: u16, content_type: &str, body: impl Into<AdminBody>) -> hyper::Response<AdminBody> {
    let mut r = hyper::Response::new(body.into());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The reply to one request. Commands read files and may wait for the client cores, so they
/// run on the runtime's bounded pool of blocking threads, never on its event loop.
async fn respond(
    app: Arc<App>,
    peer: IpAddr,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<AdminBody> {
    let path = req.uri().path().to_string();
    let command = path.trim_end_matches('/').strip_prefix("/commands/").unwrap_or("");
    let restoring = transfer::RESTORE_NAMES.contains(&command);
    match (req.method(), restoring) {
        (&hyper::Method::POST, true) | (&hyper::Method::GET, false) => {}
        (_, true) => return reply(405, "text/plain", String::from("restore takes a POST\n")),
        (_, false) => return reply(405, "text/plain", String::from("only GET is served (and POST for restore)\n")),
    }
    // The one header read: X-Forwarded-For and the like are never looked at.
    let authorization = match req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        // Not text: authenticates nobody (a header that cannot be a scheme and credentials).
        Some(Err(_)) => Some(String::from("\u{0}")),
    };
    if transfer::SNAPSHOT_NAMES.contains(&command) {
        let query = req.uri().query().map(str::to_string);
        let answer = tokio::task::spawn_blocking(move || {
            transfer::snapshot(&app.caller(authorization.as_deref(), peer), query.as_deref())
        })
        .await;
        return answered(answer);
    }
    if restoring {
        // The checks first: a refused caller's body is never read.
        let checked = {
            let app = app.clone();
            let authorization = authorization.clone();
            tokio::task::spawn_blocking(move || transfer::admit_restore(&app.caller(authorization.as_deref(), peer)))
                .await
        };
        match checked {
            Ok(Ok(())) => {}
            Ok(Err(refusal)) => return answered(Ok(refusal)),
            Err(e) => return reply(500, "text/plain", format!("{e}\n")),
        }
        let body = transfer::read_body(req.into_body()).await;
        let answer = tokio::task::spawn_blocking(move || transfer::restore(app.inspector.as_deref(), body, peer)).await;
        return answered(answer);
    }
    let answer = tokio::task::spawn_blocking(move || route(&app, &path, authorization.as_deref(), peer)).await;
    match answer {
        Ok((status, content_type, body)) => reply(status, content_type, body),
        Err(e) => reply(500, "text/plain", format!("{e}\n")),
    }
}

/// The response of a transfer command run on the blocking pool.
fn answered(answer: Result<Answer, tokio::task::JoinError>) -> hyper::Response<AdminBody> {
    match answer {
        Ok(a) => {
            let mut r = reply(a.status, a.content_type, a.body);
            for (name, value) in a.headers {
                if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
                    r.headers_mut().insert(name, v);
                }
            }
            r
        }
        Err(e) => reply(500, "text/plain", format!("{e}\n")),
    }
}

fn route(app: &App, path: &str, authorization: Option<&str>, peer: IpAddr) -> (u16, &'static str, String) {
    let (config, stats, inspector) = (&*app.config, &*app.stats, app.inspector.as_deref());
    match path.trim_end_matches('/') {
        "/metrics" => (200, "text/plain; version=0.0.4", metrics(stats, config)),
        "/commands" => (200, "text/html", command_list()),
        p => match p.strip_prefix("/commands/").and_then(|name| {
            if let Err((status, body)) = admit(name, config, inspector, authorization, peer) {
                return Some(Err((status, body)));
            }
            command(name, config, stats, inspector).map(Ok)
        }) {
            Some(Err((status, body))) => (status, "application/json", body),
            Some(Ok(json)) => (200, "application/json", json),
            None => {
                let body = format!("{}\n", json!({"error": format!("Unknown path or command: {path}")}));
                (404, "application/json", body)
            }
        },
    }
}

/// May this request run command `name`? A command that lists sessions, connections or
/// watches runs if its alias is whitelisted, or for a caller whose `Authorization` header
/// holds every permission of `admin_auth::ADMIN_AUTH_PERMS` on `/` (`admin_auth`); the others
/// are open, as in ZooKeeper. Err is the status and JSON body of the refusal.
fn admit(
    name: &str,
    config: &Config,
    inspector: Option<&Inspector>,
    authorization: Option<&str>,
    peer: IpAddr,
) -> Result<(), (u16, String)> {
    let Some((primary, alias)) = COMMANDS.iter().find(|(n, a)| *n == name || *a == name) else {
        return Ok(());
    };
    if !admin_auth::protected(alias) || super::four_letter::whitelisted(config, alias) {
        return Ok(());
    }
    authorize_caller(config, inspector, authorization, peer).map_err(|(status, message)| {
        tracing::info!("admin server: {primary} refused to {peer}: {message}");
        (status, format!("{}\n", json!({"command": primary, "error": message})))
    })
}

/// Does the caller's `Authorization` hold every permission bit of
/// `admin_auth::ADMIN_AUTH_PERMS` on `/` (`admin_auth`)? Err is the status and message.
pub fn authorize_caller(
    config: &Config,
    inspector: Option<&Inspector>,
    authorization: Option<&str>,
    peer: IpAddr,
) -> Result<(), (u16, &'static str)> {
    let denied = |d: admin_auth::Denied| (d.status(), d.message());
    let ids = admin_auth::authenticate(authorization, peer, config.super_digest.as_deref()).map_err(denied)?;
    let Some(root_acl) = inspector.and_then(|i| i.root_acl()) else {
        return Err((503, "the client cores did not answer in time"));
    };
    admin_auth::authorize(&root_acl, &ids, admin_auth::ADMIN_AUTH_PERMS).map_err(denied)
}

fn command_list() -> String {
    let mut out = String::from("<html><body><h1>ringkeeper admin commands</h1><ul>\n");
    for (name, alias) in COMMANDS {
        let _ = writeln!(out, "<li><a href=\"/commands/{name}\">{name}</a> ({alias})</li>");
    }
    out.push_str("<li><a href=\"/commands/snapshot\">snapshot</a> (snap; auth)</li>\n");
    out.push_str("<li>restore (rest; POST a snapshot; auth)</li>\n");
    out.push_str("</ul><p><a href=\"/metrics\">/metrics</a> (Prometheus)</p></body></html>\n");
    out
}

/// The JSON of one command (by name or four-letter alias), or None if there is no such one.
fn command(name: &str, config: &Config, stats: &Stats, inspector: Option<&Inspector>) -> Option<String> {
    let (name, alias) = COMMANDS.iter().find(|(n, a)| *n == name || *a == name)?;
    let inspected = match super::inspect::Inspect::for_word(alias) {
        Some(what) => match inspector.and_then(|i| i.ask(what)) {
            Some(i) => Some(i),
            None => {
                let reply = json!({"command": name, "error": "the client cores did not answer in time"});
                return Some(format!("{reply}\n"));
            }
        },
        None => None,
    };
    let nothing = Inspected::default();
    let ins = inspected.as_deref().unwrap_or(&nothing);
    let mode = ServerMode::from_index(stats.mode.load(Relaxed));
    let t = stats.totals();
    let mut fields = Map::new();
    let mut field = |k: &str, v: Value| {
        fields.insert(k.to_string(), v);
    };
    match *name {
        "ruok" => {}
        "is_read_only" => field("read_only", json!(mode == ServerMode::ReadOnly)),
        "stat_reset" => stats.reset(),
        "dirs" => {
            field("datadir_size", json!(dir_bytes(&config.data_dir)));
            field("logdir_size", json!(dir_bytes(&config.data_log_dir)));
        }
        "environment" => {
            field("zookeeper.version", json!(version()));
            field("os.arch", json!(std::env::consts::ARCH));
            field("ringkeeper.clientCores", json!(config.client_cores));
        }
        "configuration" => {
            field("client_port", json!(config.client_port));
            field("data_dir", json!(config.data_dir.display().to_string()));
            field("data_log_dir", json!(config.data_log_dir.display().to_string()));
            field("tick_time", json!(config.tick_time_ms));
            field("max_client_cnxns", json!(config.max_client_cnxns));
            field("min_session_timeout", json!(config.min_session_timeout_ms));
            field("max_session_timeout", json!(config.max_session_timeout_ms));
            field("server_id", json!(config.servers.len().min(1)));
        }
        "connection_stat_reset" => {}
        "connections" => {
            field("connections", Value::Array(ins.conns().map(|c| conn_json(c, false)).collect()));
            field("secure_connections", json!([]));
        }
        "stats" => {
            field("version", json!(version()));
            field("read_only", json!(mode == ServerMode::ReadOnly));
            field("server_stats", server_stats_json(stats, mode));
            field("node_count", json!(stats.znodes.load(Relaxed)));
            field("connections", Value::Array(ins.conns().map(|c| conn_json(c, true)).collect()));
            field("secure_connections", json!([]));
        }
        "dump" => {
            let sets = ins.session_sets.as_deref().unwrap_or_default();
            let expiry: Map<String, Value> = sets.iter().map(|(at, ids)| (at.to_string(), json!(ids))).collect();
            field("expiry_time_to_session_ids", Value::Object(expiry));
            let ephemerals: Map<String, Value> = ins
                .reports
                .iter()
                .flat_map(|r| r.ephemerals.iter())
                .map(|(id, paths)| (id.to_string(), json!(paths)))
                .collect();
            field("session_id_to_ephemeral_paths", Value::Object(ephemerals));
        }
        "watch_summary" | "watches" | "watches_by_path" => {
            let (by_path, by_session) = super::four_letter::data_watches(ins);
            match *name {
                "watch_summary" => {
                    field("num_connections", json!(by_session.len()));
                    field("num_paths", json!(by_path.len()));
                    field("num_total_watches", json!(by_session.values().map(|p| p.len()).sum::<usize>()));
                }
                "watches" => field(
                    "session_id_to_watched_paths",
                    Value::Object(by_session.iter().map(|(s, paths)| (s.to_string(), json!(paths))).collect()),
                ),
                _ => field(
                    "path_to_session_ids",
                    Value::Object(by_path.iter().map(|(p, sessions)| (p.to_string(), json!(sessions))).collect()),
                ),
            }
        }
        "server_stats" | "monitor" => {
            field("version", json!(version()));
            field("server_state", json!(mode.name()));
            field("read_only", json!(mode == ServerMode::ReadOnly));
            field("avg_latency", latency_json(t.latency_avg_ms));
            field("max_latency", json!(t.latency_max_ms as u64));
            field("min_latency", json!(t.latency_min_ms as u64));
            field("packets_received", json!(t.received));
            field("packets_sent", json!(t.sent));
            field("num_alive_connections", json!(t.connections));
            field("outstanding_requests", json!(t.outstanding));
            field("znode_count", json!(stats.znodes.load(Relaxed)));
            field("watch_count", json!(t.watches));
            field("ephemerals_count", json!(stats.ephemerals.load(Relaxed)));
            field("global_sessions", json!(stats.sessions.load(Relaxed)));
            field("local_sessions", json!(stats.local_sessions.load(Relaxed)));
            field("approximate_data_size", json!(stats.data_bytes.load(Relaxed)));
            field("last_zxid", json!(stats.zxid.load(Relaxed)));
            if mode == ServerMode::Leader {
                field("learners", json!(stats.learners.load(Relaxed)));
                field("synced_followers", json!(stats.synced_learners.load(Relaxed)));
            }
        }
        _ => return None,
    }
    fields.insert("command".into(), json!(name));
    fields.insert("error".into(), Value::Null);
    Some(format!("{}\n", Value::Object(fields)))
}

/// A mean latency in ms, to 4 decimals as ZooKeeper's reports round it.
fn latency_json(ms: f64) -> Value {
    json!((ms * 10_000.0).round() / 10_000.0)
}

/// One connection as ZooKeeper's AdminServer lists it (ServerCnxn.getConnectionInfo).
fn conn_json(c: &ConnInfo, brief: bool) -> Value {
    let mut f = json!({
        "remote_socket_address": c.remote.to_string(),
        "interest_ops": u8::from(c.session_id != 0),
        "outstanding_requests": c.queued,
        "packets_received": c.received,
        "packets_sent": c.sent,
    });
    if !brief {
        let more = json!({
            "session_id": c.session_id,
            "last_operation": c.last_op,
            "established": c.established_ms,
            "session_timeout": c.timeout_ms,
            "last_cxid": c.last_cxid,
            "last_zxid": c.last_zxid,
            "last_response_time": c.last_response_ms,
            "last_latency": c.last_latency_ms,
            "min_latency": c.min_latency_ms,
            "avg_latency": c.avg_latency_ms,
            "max_latency": c.max_latency_ms,
        });
        if let (Some(f), Value::Object(m)) = (f.as_object_mut(), more) {
            f.extend(m);
        }
    }
    f
}

/// ZooKeeper's ServerStats as the AdminServer's `stats` nests it.
fn server_stats_json(stats: &Stats, mode: ServerMode) -> Value {
    let t = stats.totals();
    json!({
        "packets_sent": t.sent,
        "packets_received": t.received,
        "max_latency": t.latency_max_ms as u64,
        "min_latency": t.latency_min_ms as u64,
        "avg_latency": latency_json(t.latency_avg_ms),
        "num_alive_client_connections": t.connections,
        "outstanding_requests": t.outstanding,
        "server_state": mode.name(),
        "last_processed_zxid": stats.zxid.load(Relaxed),
    })
}

/// A per-core metric: name, Prometheus type, and how to read it from a core's counters.
type CoreMetric = (&'static str, &'static str, fn(&CoreStats) -> u64);

/// Prometheus text exposition: ZooKeeper's metric names, then ringkeeper's per-core ones.
pub fn metrics(stats: &Stats, config: &Config) -> String {
    let t = stats.totals();
    let mode = ServerMode::from_index(stats.mode.load(Relaxed));
    let mut out = String::new();
    let syncs = stats.fsync_count.load(Relaxed);
    let [inbox, batches, batch_txns, batch_max] =
        [&stats.inbox_depth, &stats.log_batches, &stats.log_batch_txns, &stats.log_batch_txns_max]
            .map(|a| a.load(Relaxed).to_string());
    let gauges: Vec<(&str, &str, &str, String)> = vec![
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
        ("global_sessions", "gauge", "sessions open in the ensemble", stats.sessions.load(Relaxed).to_string()),
        (
            "local_sessions",
            "gauge",
            "sessions local to this member (localSessionsEnabled, read-only mode)",
            stats.local_sessions.load(Relaxed).to_string(),
        ),
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
        ("proposal_count", "counter", "txns this member proposed as leader", stats.proposals.load(Relaxed).to_string()),
        ("snapshottime_count", "counter", "snapshots written", stats.snapshots.load(Relaxed).to_string()),
        ("snapshottime_sum", "counter", "total snapshot time, ms", stats.snapshot_total_ms.load(Relaxed).to_string()),
        ("snapshottime_max", "gauge", "longest snapshot, ms", stats.snapshot_max_ms.load(Relaxed).to_string()),
        ("ringkeeper_pipeline_inbox_depth", "gauge", "requests waiting for the pipeline core", inbox),
        ("ringkeeper_log_batches", "counter", "txn log batches written (one fdatasync each)", batches),
        ("ringkeeper_log_batch_txns", "counter", "txns in those batches", batch_txns),
        ("ringkeeper_log_batch_txns_max", "gauge", "txns in the largest batch", batch_max),
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
    if config.is_ensemble() {
        let voters = config.servers.iter().filter(|s| !s.observer).count();
        let _ = writeln!(out, "# HELP quorum_size voting members\n# TYPE quorum_size gauge\nquorum_size {voters}");
    }
    let per_core: [CoreMetric; 11] = [
        ("ringkeeper_core_connections", "gauge", |c| c.connections.load(Relaxed)),
        ("ringkeeper_core_packets_received", "counter", |c| c.received.load(Relaxed)),
        ("ringkeeper_core_packets_sent", "counter", |c| c.sent.load(Relaxed)),
        ("ringkeeper_core_outstanding_requests", "gauge", |c| c.outstanding.load(Relaxed)),
        ("ringkeeper_core_watch_count", "gauge", |c| c.watches.load(Relaxed)),
        ("ringkeeper_core_to_pipeline_depth", "gauge", |c| {
            c.up_sent.load(Relaxed).saturating_sub(c.up_received.load(Relaxed))
        }),
        ("ringkeeper_core_from_pipeline_depth", "gauge", |c| {
            c.down_sent.load(Relaxed).saturating_sub(c.down_received.load(Relaxed))
        }),
        ("ringkeeper_core_to_pipeline_messages", "counter", |c| c.up_sent.load(Relaxed)),
        ("ringkeeper_core_to_pipeline_requests", "counter", |c| c.up_items.load(Relaxed)),
        ("ringkeeper_core_commit_batches", "counter", |c| c.commit_batches.load(Relaxed)),
        ("ringkeeper_core_commit_items", "counter", |c| c.commit_items.load(Relaxed)),
    ];
    for (name, kind, get) in per_core {
        let _ = writeln!(out, "# HELP {name} per client core\n# TYPE {name} {kind}");
        for (i, c) in stats.cores.iter().enumerate() {
            let _ = writeln!(out, "{name}{{core=\"{i}\"}} {}", get(c));
        }
    }
    stage_histograms(&mut out, &stats.stages());
    out
}

/// The stage histograms (`stage_latency`) as one Prometheus histogram labelled by stage,
/// in seconds: every bucket (cumulative, the same edges at every scrape), `_sum`, `_count`.
fn stage_histograms(out: &mut String, stages: &[(Stage, Snapshot)]) {
    const NAME: &str = "ringkeeper_stage_latency_seconds";
    let _ = writeln!(
        out,
        "# HELP {NAME} time of each stage of a request: core_to_pipeline, prep, propose_to_commit (leader), \
         forward_to_commit (follower), \
         log_fsync (a log batch's write and fdatasync), commit_to_core, reply_to_socket (writes); read\n\
         # TYPE {NAME} histogram"
    );
    for (stage, snap) in stages {
        let name = stage.name();
        let mut cumulative = 0u64;
        for (i, n) in snap.buckets.iter().enumerate() {
            cumulative += n;
            let le = bucket_upper_us(i).map_or("+Inf".to_string(), |us| (us as f64 / 1e6).to_string());
            let _ = writeln!(out, "{NAME}_bucket{{stage=\"{name}\",le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{NAME}_sum{{stage=\"{name}\"}} {}", snap.sum_us as f64 / 1e6);
        let _ = writeln!(out, "{NAME}_count{{stage=\"{name}\"}} {cumulative}");
    }
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
        let m = command("mntr", &c, &stats, None).unwrap();
        assert!(m.starts_with("{\"version\":\"3.8.0-ringkeeper-"), "{m}");
        for part in
            ["\"server_state\":\"leader\"", "\"znode_count\":42", "\"num_alive_connections\":3", "\"learners\":2"]
        {
            assert!(m.contains(part), "{part} in {m}");
        }
        assert!(m.ends_with("\"command\":\"monitor\",\"error\":null}\n"));
        assert_eq!(command("ruok", &c, &stats, None).unwrap(), "{\"command\":\"ruok\",\"error\":null}\n");
        assert!(command("nope", &c, &stats, None).is_none());
        let wchc = command("wchc", &c, &stats, None).unwrap();
        assert!(wchc.contains("\"error\":\"the client cores did not answer in time\""), "{wchc}");
        stats.pipeline_stages.get(Stage::Prep).record_us_n(3, 2);
        stats.cores[1].stages.get(Stage::Prep).record_us_n(9, 1);
        let p = metrics(&stats, &c);
        for line in [
            "# TYPE ringkeeper_stage_latency_seconds histogram",
            "ringkeeper_stage_latency_seconds_bucket{stage=\"prep\",le=\"0.000003\"} 0",
            "ringkeeper_stage_latency_seconds_bucket{stage=\"prep\",le=\"0.000004\"} 2",
            "ringkeeper_stage_latency_seconds_bucket{stage=\"prep\",le=\"0.00001\"} 3",
            "ringkeeper_stage_latency_seconds_bucket{stage=\"prep\",le=\"+Inf\"} 3",
            "ringkeeper_stage_latency_seconds_sum{stage=\"prep\"} 0.000015",
            "ringkeeper_stage_latency_seconds_count{stage=\"prep\"} 3",
            "ringkeeper_stage_latency_seconds_count{stage=\"log_fsync\"} 0",
        ] {
            assert!(p.lines().any(|l| l == line), "{line} in\n{p}");
        }
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
