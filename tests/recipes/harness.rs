//! What the recipe tests run against: a real ringkeeper server on a free 127.0.0.1 port with
//! its own temporary directory (killed and removed on drop), a TCP proxy in front of it that
//! can lose one create's reply or cut a client off, child processes killed on drop, and a
//! tokio runtime with a time limit per test.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use ringkeeper::client::driver::tokio::connect;
use ringkeeper::client::{Client, ClientOptions};

/// The server's tick: sessions may be as short as 2 ticks.
pub const TICK_MS: u64 = 100;
/// How long a whole test may take before it fails instead of hanging.
pub const TEST_TIME_MAX: Duration = Duration::from_secs(30);
/// Session timeout of the test clients (unless a test asks for another).
pub const SESSION: Duration = Duration::from_secs(5);
/// Session timeout of the clients a test lets expire: short, yet 20 ticks, so a client
/// starved of CPU for a moment does not lose its session by accident.
pub const SHORT_SESSION: Duration = Duration::from_millis(20 * TICK_MS);

static DIRS_MADE: AtomicU64 = AtomicU64::new(0);

fn temp_dir(what: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let n = DIRS_MADE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rk-recipes-{what}-{}-{n}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A ringkeeper server process.
pub struct Server {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Server {
    /// Starts a standalone server with `tickTime=TICK_MS` and waits until it accepts.
    pub fn start() -> Server {
        for _ in 0..5 {
            if let Some(s) = Server::try_start() {
                return s;
            }
        }
        panic!("no ringkeeper server started after 5 tries");
    }

    fn try_start() -> Option<Server> {
        let dir = temp_dir("server");
        let port = free_port();
        let cfg = dir.join("zoo.cfg");
        let data = dir.join("data");
        let log = dir.join("log");
        std::fs::create_dir_all(&data).ok()?;
        std::fs::create_dir_all(&log).ok()?;
        let text = format!(
            "tickTime={TICK_MS}\nminSessionTimeout={}\nmaxSessionTimeout=10000\ndataDir={}\ndataLogDir={}\n\
             clientPort={port}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nforceSync=no\npreAllocSize=1024\n\
             ringkeeper.clientCores=1\nringkeeper.cpuPinning=false\nadmin.enableServer=false\n",
            2 * TICK_MS,
            data.display(),
            log.display()
        );
        std::fs::write(&cfg, text).ok()?;
        let out = std::fs::File::create(dir.join("server.log")).ok()?;
        let err = out.try_clone().ok()?;
        let child = Command::new(env!("CARGO_BIN_EXE_ringkeeper"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn ringkeeper");
        let mut server = Server { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = server.child.try_wait() {
                return None; // e.g. the port was taken meanwhile: try another
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("ringkeeper did not listen on {port} within 10 s: {}", server.log());
    }

    pub fn hostport(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs a test body on a two-worker tokio runtime, failing it after `TEST_TIME_MAX`.
pub fn run<F: Future<Output = ()>>(body: F) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        tokio::time::timeout(TEST_TIME_MAX, body).await.expect("the test took too long");
    });
}

/// Starts a server and runs `body(host:port, port)` against it (see `run`); the server is
/// killed afterwards.
pub fn with_server<F, Fut>(body: F)
where
    F: FnOnce(String, u16) -> Fut,
    Fut: Future<Output = ()>,
{
    let server = Server::start();
    run(body(server.hostport(), server.port));
}

/// A session with `SESSION`'s timeout.
pub async fn client(hostport: &str) -> Client {
    client_with(hostport, SESSION).await
}

pub async fn client_with(hostport: &str, session: Duration) -> Client {
    let (c, _events) = connect(hostport, ClientOptions::default().session_timeout(session)).await.expect("connect");
    c
}

/// Waits (polling every 20 ms, at most 10 s) until `cond` holds.
pub async fn until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A child process killed (SIGKILL) and reaped on drop, its stdout read line by line.
pub struct ChildProcess {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildProcess {
    pub fn spawn(program: &Path, args: &[&str]) -> ChildProcess {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut buf = String::new();
            let mut r = std::io::BufReader::new(stdout);
            while std::io::BufRead::read_line(&mut r, &mut buf).map(|n| n > 0).unwrap_or(false) {
                if tx.send(buf.trim_end().to_string()).is_err() {
                    break;
                }
                buf.clear();
            }
        });
        ChildProcess { child, lines }
    }

    /// The rest of the first line (within `wait`) that starts with `prefix`.
    pub fn expect_line(&self, prefix: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(e) => panic!("no {prefix:?} line within {wait:?}: {e}"),
            }
        }
    }

    /// Whether a line starting with `prefix` arrives within `wait`.
    pub fn line_within(&self, prefix: &str, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if line.starts_with(prefix) {
                return true;
            }
        }
        false
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An example binary built next to the server binary (`cargo build --examples`, which `cargo
/// test` and `cargo nextest run` do for a whole-package run).
pub fn example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_ringkeeper"));
    let path = bin.parent().expect("target dir").join("examples").join(name);
    assert!(path.exists(), "{} is not built: run `cargo build --examples` first", path.display());
    path
}

/// Opcodes of the creates, as the proxy reads them in a request header.
const CREATE_OPS: [i32; 3] = [1, 15, 19];

#[derive(Default)]
struct ProxyState {
    /// Cut the connection that sends the next create, instead of passing its reply on.
    lose_next_create_reply: bool,
    /// Close every connection and accept none that stays open.
    cut_off: bool,
    /// Live connections (both halves), to close them when cut off.
    conns: Vec<(TcpStream, TcpStream)>,
}

/// A TCP proxy to a server that reads the ZooKeeper framing as it passes and can (a) let the
/// server apply one create but drop its reply and the connection — what a client sees when
/// its server fails right after a write — or (b) cut a client off from the server entirely.
pub struct Proxy {
    pub port: u16,
    state: Arc<Mutex<ProxyState>>,
    creates: Arc<AtomicU64>,
    replies_lost: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

/// Reads whole frames (4-byte big-endian length + body) from a stream.
fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = u32::from_be_bytes(len) as usize;
    let mut frame = len.to_vec();
    frame.resize(4 + n, 0);
    s.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

fn int_at(frame: &[u8], at: usize) -> Option<i32> {
    frame.get(at..at + 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

impl Proxy {
    pub fn start(server_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
        let port = listener.local_addr().expect("proxy address").port();
        let proxy = Proxy {
            port,
            state: Arc::default(),
            creates: Arc::default(),
            replies_lost: Arc::default(),
            stop: Arc::default(),
        };
        let (state, creates, lost, stop) =
            (proxy.state.clone(), proxy.creates.clone(), proxy.replies_lost.clone(), proxy.stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                if state.lock().expect("proxy state").cut_off {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", server_port)) else { continue };
                Proxy::pump(client, server, &state, &creates, &lost);
            }
        });
        proxy
    }

    fn pump(
        client: TcpStream,
        server: TcpStream,
        state: &Arc<Mutex<ProxyState>>,
        creates: &Arc<AtomicU64>,
        lost: &Arc<AtomicU64>,
    ) {
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { return };
        state.lock().expect("proxy state").conns.push((c2, s2));
        // The xid of the create whose reply is to be lost, once sent.
        let doomed: Arc<Mutex<Option<i32>>> = Arc::default();
        let (mut c_in, mut s_out) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
        let (st, cr, dm) = (state.clone(), creates.clone(), doomed.clone());
        thread::spawn(move || {
            let mut first = true;
            while let Some(frame) = read_frame(&mut c_in) {
                if !first {
                    let (xid, op) = (int_at(&frame, 4), int_at(&frame, 8));
                    if op.is_some_and(|op| CREATE_OPS.contains(&op)) {
                        cr.fetch_add(1, Ordering::SeqCst);
                        let mut s = st.lock().expect("proxy state");
                        if s.lose_next_create_reply {
                            s.lose_next_create_reply = false;
                            *dm.lock().expect("doomed") = xid;
                        }
                    }
                }
                first = false;
                if s_out.write_all(&frame).is_err() {
                    break;
                }
            }
            let _ = s_out.shutdown(Shutdown::Both);
        });
        let (mut s_in, mut c_out) = (server, client);
        let lost = lost.clone();
        thread::spawn(move || {
            let mut first = true;
            while let Some(frame) = read_frame(&mut s_in) {
                if !first && (*doomed.lock().expect("doomed")).is_some_and(|x| int_at(&frame, 4) == Some(x)) {
                    // The server has applied the create: drop its reply and the connection.
                    lost.fetch_add(1, Ordering::SeqCst);
                    break;
                }
                first = false;
                if c_out.write_all(&frame).is_err() {
                    break;
                }
            }
            let _ = c_out.shutdown(Shutdown::Both);
            let _ = s_in.shutdown(Shutdown::Both);
        });
    }

    pub fn hostport(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The next create through the proxy reaches the server, but its reply does not reach
    /// the client: the connection is closed instead.
    pub fn lose_next_create_reply(&self) {
        self.state.lock().expect("proxy state").lose_next_create_reply = true;
    }

    /// Creates that went through the proxy.
    pub fn creates(&self) -> u64 {
        self.creates.load(Ordering::SeqCst)
    }

    /// Create replies the proxy dropped.
    pub fn replies_lost(&self) -> u64 {
        self.replies_lost.load(Ordering::SeqCst)
    }

    /// Cuts every client of the proxy off from the server (`true`), or lets them back.
    pub fn cut_off(&self, cut: bool) {
        let mut s = self.state.lock().expect("proxy state");
        s.cut_off = cut;
        if cut {
            for (c, sv) in s.conns.drain(..) {
                let _ = c.shutdown(Shutdown::Both);
                let _ = sv.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut_off(true);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
