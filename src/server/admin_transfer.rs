//! The admin commands that move a whole tree (ZooKeeper 3.9's `snapshot` and `restore`):
//! `GET /commands/snapshot[?streaming=true|false]` sends a consistent snapshot of the committed
//! tree in ringkeeper's own snapshot format (the bytes a `snapshot.<zxid>` file holds), with
//! ZooKeeper's headers `last_zxid` (`0x…`) and `snapshot_size`; `POST /commands/restore` takes
//! such a snapshot as the request body and makes it the server's tree (`pipeline::restore`
//! says how it is made durable). Both need an `Authorization` whose ids hold every permission
//! bit on `/` (`admin_auth`, never the 4lw whitelist), can be turned off
//! (`zookeeper.admin.snapshot.enabled`, `zookeeper.admin.restore.enabled`: 503) and are
//! rate-limited, one per `zookeeper.admin.rateLimiterIntervalInMS` each (429).
//! Rules: the checks run in ZooKeeper's order (auth, enabled, rate limit, then the work); the
//! snapshot is the root client core 0 answers from (a commit-batch boundary: exact at its
//! zxid), encoded twice on a blocking thread (once to count its size for the header, once into
//! a bounded queue of `SNAPSHOT_CHUNK_BYTES` chunks the response body takes), so memory is a
//! few chunks whatever the tree; a restore body over `RESTORE_BODY_BYTES_MAX` is refused (413)
//! before it is all read, and one that is not a valid snapshot (checksums, structure) changes
//! nothing (400).

use super::admin::Inspector;
use crate::config::Config;
use crate::storage::snapshot::{decode_snapshot, SnapshotEncoder};
use crate::tree::DataTree;
use hyper::body::{Body, Bytes, Frame};
use serde_json::json;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Bytes of snapshot encoded into one chunk of the response body.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Chunks encoded ahead of the client reading them.
pub const SNAPSHOT_CHUNKS_QUEUED_MAX: usize = 4;
/// The largest snapshot `restore` takes as its request body.
pub const RESTORE_BODY_BYTES_MAX: u64 = 1 << 30;
/// How long a `snapshot` or `restore` exchange may last in all (the other commands get
/// `admin::ADMIN_CONNECTION_MS_MAX`).
pub const ADMIN_TRANSFER_MS_MAX: u64 = 10 * 60 * 1000;
/// How long `restore` waits for the pipeline core to have made the restored tree durable.
pub const RESTORE_WAIT_MS_MAX: u64 = 5 * 60 * 1000;

/// The two commands, by name and ZooKeeper alias.
pub const SNAPSHOT_NAMES: [&str; 2] = ["snapshot", "snap"];
pub const RESTORE_NAMES: [&str; 2] = ["restore", "rest"];

/// True for a request path that is one of these commands (it gets the longer deadline).
pub fn is_transfer(path: &str) -> bool {
    path.trim_end_matches('/')
        .strip_prefix("/commands/")
        .is_some_and(|n| SNAPSHOT_NAMES.contains(&n) || RESTORE_NAMES.contains(&n))
}

/// ZooKeeper's RateLimiter(1, interval): one permit per interval, the first one at once.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    last: Mutex<Option<Instant>>,
}

impl RateLimiter {
    pub fn new(interval_ms: u64) -> RateLimiter {
        RateLimiter { interval: Duration::from_millis(interval_ms), last: Mutex::new(None) }
    }

    /// Takes the permit if the interval has passed since the last one taken.
    pub fn allow(&self) -> bool {
        let mut last = match self.last.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now = Instant::now();
        match *last {
            Some(t) if now.saturating_duration_since(t) < self.interval => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }
}

/// The two commands' limiters (one each, as ZooKeeper's).
#[derive(Debug)]
pub struct Limiters {
    pub snapshot: RateLimiter,
    pub restore: RateLimiter,
}

impl Limiters {
    pub fn new(config: &Config) -> Limiters {
        Limiters {
            snapshot: RateLimiter::new(config.admin_rate_limit_interval_ms),
            restore: RateLimiter::new(config.admin_rate_limit_interval_ms),
        }
    }
}

/// An admin response body: whole, or snapshot chunks as they are encoded.
pub enum AdminBody {
    Full(Option<Bytes>),
    Chunks(Pin<Box<async_channel::Receiver<io::Result<Bytes>>>>),
}

impl From<String> for AdminBody {
    fn from(s: String) -> AdminBody {
        AdminBody::Full(Some(Bytes::from(s)))
    }
}

impl Body for AdminBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            AdminBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            AdminBody::Chunks(rx) => {
                futures_lite::Stream::poll_next(rx.as_mut(), cx).map(|c| c.map(|r| r.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, AdminBody::Full(None))
    }
}

/// A command's answer: status, headers, content type, body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub content_type: &'static str,
    pub body: AdminBody,
}

impl Answer {
    fn json(status: u16, command: &str, error: Option<&str>) -> Answer {
        let body = format!("{}\n", json!({"command": command, "error": error}));
        Answer { status, headers: Vec::new(), content_type: "application/json", body: body.into() }
    }
}

/// Who asks, and what the admin server has to answer with.
pub struct Caller<'a> {
    pub config: &'a Config,
    pub limiters: &'a Limiters,
    pub inspector: Option<&'a Inspector>,
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// The TCP peer's address.
    pub peer: IpAddr,
}

/// The checks both commands start with, in ZooKeeper's order: the caller holds every
/// permission bit on `/` (401/403), the command is enabled (503), the rate limit (429).
fn admit(command: &str, enabled: bool, limiter: &RateLimiter, c: &Caller) -> Result<(), Answer> {
    let (config, inspector, authorization, peer) = (c.config, c.inspector, c.authorization, c.peer);
    if let Err((status, message)) = super::admin::authorize_caller(config, inspector, authorization, peer) {
        tracing::info!("admin server: {command} refused to {peer}: {message}");
        return Err(Answer::json(status, command, Some(message)));
    }
    if !enabled {
        tracing::warn!("admin server: {command} refused to {peer}: the command is disabled");
        return Err(Answer::json(503, command, Some("the command is disabled")));
    }
    if !limiter.allow() {
        tracing::warn!("admin server: {command} refused to {peer}: rate limited");
        return Err(Answer::json(429, command, Some("rate limited")));
    }
    Ok(())
}

/// `snapshot`: runs on a blocking thread of the admin runtime; the encoding of a streamed
/// snapshot goes on in another (`spawn_chunks`).
pub fn snapshot(c: &Caller, query: Option<&str>) -> Answer {
    let (command, peer) = (SNAPSHOT_NAMES[0], c.peer);
    if let Err(refusal) = admit(command, c.config.admin_snapshot_enabled, &c.limiters.snapshot, c) {
        return refusal;
    }
    // ZooKeeper: `streaming` defaults to true; any value but "true" (any case) is false.
    let streaming = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .rfind(|(k, _)| *k == "streaming")
        .is_none_or(|(_, v)| v.eq_ignore_ascii_case("true"));
    let Some(tree) = c.inspector.and_then(|i| i.committed_tree()) else {
        return Answer::json(503, command, Some("the client cores did not answer in time"));
    };
    let size = snapshot_size(&tree);
    let zxid = tree.last_zxid();
    tracing::info!("admin server: snapshot at zxid {zxid:#x} ({size} bytes) for {peer}, streaming: {streaming}");
    let headers = vec![("last_zxid", format!("0x{zxid:x}")), ("snapshot_size", size.to_string())];
    if !streaming {
        let mut a = Answer::json(200, command, None);
        a.headers = headers;
        return a;
    }
    let mut headers = headers;
    headers.push(("content-length", size.to_string()));
    Answer { status: 200, headers, content_type: "application/octet-stream", body: spawn_chunks(tree) }
}

/// The bytes the snapshot of `tree` takes (one encoding pass, a chunk of memory).
fn snapshot_size(tree: &DataTree) -> u64 {
    let mut enc = SnapshotEncoder::new(tree);
    let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK_BYTES);
    let mut size = 0u64;
    loop {
        buf.clear();
        let done = enc.next_chunk(&mut buf, SNAPSHOT_CHUNK_BYTES);
        size += buf.len() as u64;
        if done {
            return size;
        }
    }
}

/// Encodes `tree` on a new blocking thread into a bounded queue the body reads; a client that
/// goes away closes the queue and the encoding stops.
fn spawn_chunks(tree: DataTree) -> AdminBody {
    let (tx, rx) = async_channel::bounded(SNAPSHOT_CHUNKS_QUEUED_MAX);
    let spawned = std::thread::Builder::new().name("rk-admin-snap".into()).spawn(move || {
        let mut enc = SnapshotEncoder::new(&tree);
        loop {
            let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK_BYTES + SNAPSHOT_CHUNK_BYTES / 4);
            let done = enc.next_chunk(&mut buf, SNAPSHOT_CHUNK_BYTES);
            if tx.send_blocking(Ok(Bytes::from(buf))).is_err() || done {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        let (tx, rx) = async_channel::bounded(1);
        let _ = tx.try_send(Err(io::Error::other(format!("cannot start the snapshot encoder: {e}"))));
        return AdminBody::Chunks(Box::pin(rx));
    }
    AdminBody::Chunks(Box::pin(rx))
}

/// What `restore` found wrong with its request before anything was changed.
#[derive(Debug)]
pub enum BodyError {
    /// Over `RESTORE_BODY_BYTES_MAX` (by Content-Length or as read).
    TooLarge,
    /// The connection failed while the body was read.
    Read(String),
}

/// Reads a request body of at most `RESTORE_BODY_BYTES_MAX` bytes.
pub async fn read_body(mut body: hyper::body::Incoming) -> Result<Vec<u8>, BodyError> {
    if body.size_hint().lower() > RESTORE_BODY_BYTES_MAX {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(out),
            Some(Err(e)) => return Err(BodyError::Read(e.to_string())),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    if out.len() as u64 + data.len() as u64 > RESTORE_BODY_BYTES_MAX {
                        return Err(BodyError::TooLarge);
                    }
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

/// `restore`'s checks, before its body is read (a refused caller's body is never read).
pub fn admit_restore(c: &Caller) -> Result<(), Answer> {
    admit(RESTORE_NAMES[0], c.config.admin_restore_enabled, &c.limiters.restore, c)?;
    if c.config.is_ensemble() {
        // Checked after the others: an unauthenticated caller learns nothing.
        return Err(Answer::json(409, RESTORE_NAMES[0], Some(super::ensemble::RESTORE_IN_ENSEMBLE)));
    }
    Ok(())
}

/// `restore` of an admitted request whose body was read: decodes it (400 if it is not a
/// snapshot) and has the pipeline core make it the tree; the answer carries the zxid it took
/// (`last_zxid`, as ZooKeeper's).
pub fn restore(inspector: Option<&Inspector>, body: Result<Vec<u8>, BodyError>, peer: IpAddr) -> Answer {
    let command = RESTORE_NAMES[0];
    let bytes = match body {
        Ok(b) if b.is_empty() => return Answer::json(400, command, Some("no snapshot in the request body")),
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            let why = format!("the snapshot is over {RESTORE_BODY_BYTES_MAX} bytes");
            return Answer::json(413, command, Some(&why));
        }
        Err(BodyError::Read(e)) => return Answer::json(400, command, Some(&format!("reading the body: {e}"))),
    };
    let tree = match decode_snapshot(&bytes) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("admin server: restore from {peer} refused: not a snapshot: {e}");
            return Answer::json(400, command, Some(&format!("not a ringkeeper snapshot: {e}")));
        }
    };
    drop(bytes);
    let (nodes, from_zxid) = (tree.node_count(), tree.last_zxid());
    tracing::info!("admin server: restore from {peer}: a snapshot at zxid {from_zxid:#x} with {nodes} nodes");
    let Some(inspector) = inspector else {
        return Answer::json(503, command, Some("the client cores did not answer in time"));
    };
    match inspector.restore(tree, Duration::from_millis(RESTORE_WAIT_MS_MAX)) {
        None => Answer::json(503, command, Some("the server did not answer in time")),
        Some(Err(why)) => Answer::json(500, command, Some(&why)),
        Some(Ok(zxid)) => {
            let body = format!("{}\n", json!({"command": command, "error": null, "last_zxid": zxid}));
            Answer { status: 200, headers: Vec::new(), content_type: "application/json", body: body.into() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_gives_one_permit_per_interval() {
        let l = RateLimiter::new(60_000);
        assert!(l.allow());
        assert!(!l.allow());
        let open = RateLimiter::new(0);
        assert!(open.allow() && open.allow());
    }

    #[test]
    fn transfer_paths_are_recognized() {
        for p in ["/commands/snapshot", "/commands/snap/", "/commands/restore", "/commands/rest"] {
            assert!(is_transfer(p), "{p}");
        }
        for p in ["/commands/ruok", "/metrics", "/commands/snapshots", "/snapshot"] {
            assert!(!is_transfer(p), "{p}");
        }
    }

    #[test]
    fn the_counted_size_is_the_encoded_size() {
        let mut t = DataTree::new();
        let acl: std::sync::Arc<[crate::proto::Acl]> = std::sync::Arc::from(Vec::new());
        for i in 0..200 {
            t.create_node(&format!("/n{i}"), Some(Bytes::from(vec![7u8; 9_000])), acl.clone(), 0, 1, 0);
        }
        assert_eq!(snapshot_size(&t), crate::storage::snapshot::encode_snapshot(&t).len() as u64);
    }
}
