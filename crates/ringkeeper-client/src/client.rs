//! The application's handle: `Client`, its typed operations, and how watches and session
//! events reach the application (`OneShotWatch`, `PersistentWatch`, `SessionEvents`).
//! Rules: runtime-agnostic (futures only: the same `Client` serves glommio and tokio); talks to
//! its driver task only through bounded channels (`Command` in, a oneshot per call back);
//! every call returns `Result<_, KeeperError>` with ZooKeeper's codes; a handle whose driver is
//! gone answers with the dead session's error (SessionExpired, or AuthFailed), never a panic.
//! Cheap to clone; with the tokio driver it is Send + Sync.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;

use super::connect_string::{Chroot, ConnectStringError, HostPort};
use super::session::{SaslCredentials, SessionConfig, SESSION_TIMEOUT_MS_DEFAULT};
use super::types::*;
use ringkeeper_proto::connect::SESSION_PASSWD_LEN;
use ringkeeper_proto::opcode::OpCode;
use ringkeeper_proto::reply::{MultiReadResult, MultiResult, Response};
use ringkeeper_proto::request::Request;

/// Commands waiting for the driver (the handle's side of the bounded channel).
pub const COMMANDS_MAX: usize = 256;
/// Session events buffered for the application; beyond this, events are dropped (the state
/// is always readable with `Client::state`).
pub const SESSION_EVENTS_MAX: usize = 64;
/// Events buffered for one persistent watch; an application that falls further behind loses
/// the watch: its stream ends and the watcher is forgotten (add it again).
pub const PERSISTENT_WATCH_EVENTS_MAX: usize = 1_024;

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The session settings (timeout, read-only, limits, SASL, a session to resume).
    pub session: SessionConfig,
    /// How long `connect` waits for the first session before giving up with ConnectionLoss.
    pub connect_wait: Duration,
    /// Seed of the server order and reconnect jitter; `None` takes one from the clock.
    pub seed: Option<u64>,
    /// TLS to the servers (`tls::client_config` makes one from PEM files); `None` is plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            session: SessionConfig::default(),
            connect_wait: Duration::from_millis(u64::from(SESSION_TIMEOUT_MS_DEFAULT)),
            seed: None,
            tls: None,
        }
    }
}

impl ClientOptions {
    /// Speaks TLS to every server with this configuration.
    pub fn tls(mut self, config: Arc<rustls::ClientConfig>) -> ClientOptions {
        self.tls = Some(config);
        self
    }

    /// Authenticates every connection with SASL DIGEST-MD5 as this user (ZooKeeper's JAAS
    /// `Client` section): the session is connected only once the server accepted it, and a
    /// refusal ends the handle with AuthFailed.
    pub fn sasl_digest_md5(mut self, username: &str, password: &str) -> ClientOptions {
        self.session.sasl = Some(SaslCredentials { username: username.into(), password: password.into() });
        self
    }

    /// Accepts a read-only server (`readonlymode.enabled` members without a quorum) as the
    /// Java client's canBeReadOnly: the session is ConnectedReadOnly there, looks for a
    /// read-write server in the background and moves to it (SyncConnected).
    pub fn read_only(mut self, allowed: bool) -> ClientOptions {
        self.session.can_be_read_only = allowed;
        self
    }

    /// Asks for this session timeout, and waits as long for the first session in `connect`.
    pub fn session_timeout(mut self, timeout: Duration) -> ClientOptions {
        self.session.session_timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        self.connect_wait = timeout;
        self
    }
}

/// Why `connect` gave no client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// The connection string was refused.
    BadConnectString(ConnectStringError),
    /// No session within `connect_wait` (ConnectionLoss), or the session was refused
    /// (SessionExpired for a resumed session, AuthFailed).
    Keeper(KeeperError),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::BadConnectString(e) => write!(f, "{e}"),
            ConnectError::Keeper(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// Where a watcher's events go.
#[derive(Debug)]
pub(crate) enum WatchSink {
    OneShot(oneshot::Sender<WatchedEvent>),
    Persistent(async_channel::Sender<WatchedEvent>),
}

/// What the driver answers a request with.
#[derive(Debug)]
pub(crate) struct Completion {
    pub reply: oneshot::Sender<Result<Response>>,
    pub watch: Option<WatchSink>,
}

/// What a handle asks of its driver.
#[derive(Debug)]
pub(crate) enum Command {
    Request { req: Request, done: Completion },
    UpdateServerList { servers: Vec<HostPort>, done: oneshot::Sender<bool> },
}

/// What the handle knows of its session, kept current by the driver.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The handle's state.
    pub state: SessionState,
    /// The session id (0 before the first session).
    pub session_id: i64,
    /// The session password, to resume the session from another handle.
    pub password: [u8; SESSION_PASSWD_LEN],
    /// The session timeout the server granted, in milliseconds.
    pub negotiated_timeout_ms: u32,
    /// The largest zxid seen in a reply.
    pub last_zxid_seen: i64,
    /// The server of the current connection.
    pub server: Option<HostPort>,
    /// The chroot of the connection string (paths are relative to it).
    pub chroot: Chroot,
}

/// A watch set by one call: resolves with the one event that fires it. If the session ends
/// first, it resolves with a session event (EventType::None, Expired / AuthFailed / Closed).
#[derive(Debug)]
pub struct OneShotWatch {
    rx: oneshot::Receiver<WatchedEvent>,
}

impl Future for OneShotWatch {
    type Output = WatchedEvent;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WatchedEvent> {
        Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or_else(|_| WatchedEvent::session(KeeperState::Closed)))
    }
}

/// The events of a persistent (or persistent recursive) watch, until it is removed or the
/// session ends; see `PERSISTENT_WATCH_EVENTS_MAX`.
#[derive(Debug)]
pub struct PersistentWatch {
    rx: async_channel::Receiver<WatchedEvent>,
}

impl PersistentWatch {
    /// The next event; `None` once the watch is over.
    pub async fn next(&mut self) -> Option<WatchedEvent> {
        self.rx.recv().await.ok()
    }
}

/// The default watcher's events: session state changes (EventType::None).
#[derive(Debug)]
pub struct SessionEvents {
    rx: async_channel::Receiver<WatchedEvent>,
}

impl SessionEvents {
    pub(crate) fn new(rx: async_channel::Receiver<WatchedEvent>) -> SessionEvents {
        SessionEvents { rx }
    }

    /// The next session event; `None` once the driver has ended.
    pub async fn next(&mut self) -> Option<WatchedEvent> {
        self.rx.recv().await.ok()
    }
}

/// A ZooKeeper session handle. Clones share the session. Dropping every clone closes the
/// session.
///
/// Every call is an async method that resolves with the server's reply; calls made while the
/// session is reconnecting wait for the next connection. A multi is atomic:
///
/// ```no_run
/// use ringkeeper_client::{Client, CreateMode, KeeperError, Op, OPEN_ACL_UNSAFE};
///
/// async fn move_job(client: &Client, from: &str, to: &str) -> Result<(), KeeperError> {
///     let (data, stat) = client.get_data(from).await?;
///     client
///         .multi(vec![
///             Op::delete(from, stat.version),
///             Op::create(to, data, &OPEN_ACL_UNSAFE, CreateMode::Persistent),
///         ])
///         .await?;
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    commands: async_channel::Sender<Command>,
    info: Arc<Mutex<SessionInfo>>,
}

/// The answer a call gets when the reply has a shape its op never has (cannot happen with a
/// decoder that reads by opcode; kept as an error, not a panic).
fn unexpected<T>() -> Result<T> {
    Err(KeeperError::SystemError)
}

fn code(c: i32) -> KeeperError {
    KeeperError::from_code(c).unwrap_or(KeeperError::SystemError)
}

impl Client {
    pub(crate) fn new(commands: async_channel::Sender<Command>, info: Arc<Mutex<SessionInfo>>) -> Client {
        Client { commands, info }
    }

    /// A copy of what the handle knows of its session.
    pub fn info(&self) -> SessionInfo {
        match self.info.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The handle's session state now.
    pub fn state(&self) -> SessionState {
        self.info().state
    }

    /// The session id (0 before the first session).
    pub fn session_id(&self) -> i64 {
        self.info().session_id
    }

    /// The server the session is connected through, if any.
    pub fn connected_server(&self) -> Option<HostPort> {
        self.info().server
    }

    fn dead_error(&self) -> KeeperError {
        self.state().dead_error().unwrap_or(KeeperError::SessionExpired)
    }

    async fn call(&self, req: Request, watch: Option<WatchSink>) -> Result<Response> {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Request { req, done: Completion { reply, watch } };
        if self.commands.send(cmd).await.is_err() {
            return Err(self.dead_error());
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(self.dead_error()),
        }
    }

    /// A call whose watch is kept only when the server registered it.
    async fn call_watched(&self, req: Request) -> (Result<Response>, OneShotWatch) {
        let (tx, rx) = oneshot::channel();
        (self.call(req, Some(WatchSink::OneShot(tx))).await, OneShotWatch { rx })
    }

    fn create_request(
        path: &str,
        data: Bytes,
        acl: &[Acl],
        mode: CreateMode,
        stat: bool,
        ttl_ms: Option<i64>,
    ) -> Request {
        let opcode = match (mode, stat) {
            (CreateMode::Container, _) => OpCode::CreateContainer,
            (m, _) if m.is_ttl() => OpCode::CreateTtl,
            (_, true) => OpCode::Create2,
            (_, false) => OpCode::Create,
        };
        Request::Create {
            opcode,
            path: path.to_string(),
            data: Some(data),
            acl: Some(acl.to_vec()),
            flags: mode.flags(),
            ttl_ms: if opcode == OpCode::CreateTtl { ttl_ms.unwrap_or(0) } else { -1 },
        }
    }

    /// Creates a node; returns its path (with the sequence suffix for sequential modes).
    /// TTL modes need `create_ttl`.
    pub async fn create(&self, path: &str, data: impl Into<Bytes>, acl: &[Acl], mode: CreateMode) -> Result<String> {
        match self.call(Self::create_request(path, data.into(), acl, mode, false, None), None).await? {
            Response::Create { path } | Response::Create2 { path, .. } => Ok(path),
            _ => unexpected(),
        }
    }

    /// Creates a node and returns its path and Stat (op create2).
    pub async fn create2(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        acl: &[Acl],
        mode: CreateMode,
    ) -> Result<(String, Stat)> {
        match self.call(Self::create_request(path, data.into(), acl, mode, true, None), None).await? {
            Response::Create2 { path, stat } => Ok((path, stat)),
            _ => unexpected(),
        }
    }

    /// Creates a TTL node (mode PersistentWithTtl or PersistentSequentialWithTtl; the server
    /// must run with extended types enabled, else Unimplemented).
    pub async fn create_ttl(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        acl: &[Acl],
        mode: CreateMode,
        ttl: Duration,
    ) -> Result<(String, Stat)> {
        if !mode.is_ttl() {
            return Err(KeeperError::BadArguments);
        }
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        match self.call(Self::create_request(path, data.into(), acl, mode, true, Some(ttl_ms)), None).await? {
            Response::Create2 { path, stat } => Ok((path, stat)),
            _ => unexpected(),
        }
    }

    /// Creates a node whose data may be null (`None`, what Java's `create(path, null, …)`
    /// sends; a null node reads back as null, which zkCli prints as "null"), a TTL node when
    /// `ttl` is given (the mode must then be a TTL mode, and only then). Returns the path.
    pub async fn create_nullable(
        &self,
        path: &str,
        data: Option<Bytes>,
        acl: &[Acl],
        mode: CreateMode,
        ttl: Option<Duration>,
    ) -> Result<String> {
        if mode.is_ttl() != ttl.is_some() {
            return Err(KeeperError::BadArguments);
        }
        let ttl_ms = ttl.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
        let mut req = Self::create_request(path, Bytes::new(), acl, mode, ttl_ms.is_some(), ttl_ms);
        if let Request::Create { data: d, .. } = &mut req {
            *d = data;
        }
        match self.call(req, None).await? {
            Response::Create { path } | Response::Create2 { path, .. } => Ok(path),
            _ => unexpected(),
        }
    }

    /// Deletes a node if its version matches (`ANY_VERSION` for any).
    pub async fn delete(&self, path: &str, version: i32) -> Result<()> {
        self.call(Request::Delete { path: path.to_string(), version }, None).await.map(|_| ())
    }

    /// The node's Stat, or `None` if it does not exist.
    pub async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        match self.call(Request::Exists { path: path.to_string(), watch: false }, None).await {
            Ok(Response::Stat(s)) => Ok(Some(s)),
            Err(KeeperError::NoNode) => Ok(None),
            Ok(_) => unexpected(),
            Err(e) => Err(e),
        }
    }

    /// `exists` with a watch: fires on the node's creation, deletion or data change.
    pub async fn exists_w(&self, path: &str) -> Result<(Option<Stat>, OneShotWatch)> {
        let (r, w) = self.call_watched(Request::Exists { path: path.to_string(), watch: true }).await;
        match r {
            Ok(Response::Stat(s)) => Ok((Some(s), w)),
            Err(KeeperError::NoNode) => Ok((None, w)),
            Ok(_) => unexpected(),
            Err(e) => Err(e),
        }
    }

    /// The node's data (null data reads as empty) and Stat.
    pub async fn get_data(&self, path: &str) -> Result<(Bytes, Stat)> {
        match self.call(Request::GetData { path: path.to_string(), watch: false }, None).await? {
            Response::GetData { data, stat } => Ok((data.unwrap_or_default(), stat)),
            _ => unexpected(),
        }
    }

    /// `get_data` with a watch: fires on the node's data change or deletion.
    pub async fn get_data_w(&self, path: &str) -> Result<(Bytes, Stat, OneShotWatch)> {
        match self.call_watched(Request::GetData { path: path.to_string(), watch: true }).await {
            (Ok(Response::GetData { data, stat }), w) => Ok((data.unwrap_or_default(), stat, w)),
            (Ok(_), _) => unexpected(),
            (Err(e), _) => Err(e),
        }
    }

    /// `get_data` that tells null data (`None`) from empty data; with `watch`, the watch too
    /// (fires on the node's data change or deletion).
    pub async fn get_data_nullable(
        &self,
        path: &str,
        watch: bool,
    ) -> Result<(Option<Bytes>, Stat, Option<OneShotWatch>)> {
        let req = Request::GetData { path: path.to_string(), watch };
        let (reply, w) = if watch {
            let (r, w) = self.call_watched(req).await;
            (r, Some(w))
        } else {
            (self.call(req, None).await, None)
        };
        match reply? {
            Response::GetData { data, stat } => Ok((data, stat, w)),
            _ => unexpected(),
        }
    }

    /// Sets the node's data if its version matches (`ANY_VERSION` for any); the new Stat.
    pub async fn set_data(&self, path: &str, data: impl Into<Bytes>, version: i32) -> Result<Stat> {
        let req = Request::SetData { path: path.to_string(), data: Some(data.into()), version };
        match self.call(req, None).await? {
            Response::Stat(s) => Ok(s),
            _ => unexpected(),
        }
    }

    /// Asks the ensemble for a new membership (opcode 16, ZooKeeperAdmin's `reconfigure`):
    /// incremental (`joining` `server.N=…` lines and `leaving` sids, comma-separated) or bulk
    /// (`new_members`, the whole membership), from config version `from_config` (-1: any).
    /// Returns the new configuration's text and the Stat of `/zookeeper/config`.
    pub async fn reconfig(
        &self,
        joining: Option<&str>,
        leaving: Option<&str>,
        new_members: Option<&str>,
        from_config: i64,
    ) -> Result<(Bytes, Stat)> {
        let req = Request::Reconfig {
            joining: joining.map(str::to_string),
            leaving: leaving.map(str::to_string),
            new_members: new_members.map(str::to_string),
            cur_config_id: from_config,
        };
        match self.call(req, None).await? {
            Response::GetData { data, stat } => Ok((data.unwrap_or_default(), stat)),
            _ => unexpected(),
        }
    }

    /// The node's ACL and its Stat (op getACL).
    pub async fn get_acl(&self, path: &str) -> Result<(Vec<Acl>, Stat)> {
        match self.call(Request::GetAcl { path: path.to_string() }, None).await? {
            Response::GetAcl { acl, stat } => Ok((acl, stat)),
            _ => unexpected(),
        }
    }

    /// Sets the node's ACL if its ACL version (aversion) matches (`ANY_VERSION` for any).
    pub async fn set_acl(&self, path: &str, acl: &[Acl], aversion: i32) -> Result<Stat> {
        match self
            .call(Request::SetAcl { path: path.to_string(), acl: Some(acl.to_vec()), version: aversion }, None)
            .await?
        {
            Response::Stat(s) => Ok(s),
            _ => unexpected(),
        }
    }

    /// The names of the node's children (in no particular order).
    pub async fn get_children(&self, path: &str) -> Result<Vec<String>> {
        match self.call(Request::GetChildren { path: path.to_string(), watch: false }, None).await? {
            Response::Children(c) => Ok(c),
            _ => unexpected(),
        }
    }

    /// `get_children` with a watch: fires on a child's creation or deletion, or the node's
    /// deletion.
    pub async fn get_children_w(&self, path: &str) -> Result<(Vec<String>, OneShotWatch)> {
        match self.call_watched(Request::GetChildren { path: path.to_string(), watch: true }).await {
            (Ok(Response::Children(c)), w) => Ok((c, w)),
            (Ok(_), _) => unexpected(),
            (Err(e), _) => Err(e),
        }
    }

    /// The children and the node's Stat (op getChildren2).
    pub async fn get_children2(&self, path: &str) -> Result<(Vec<String>, Stat)> {
        match self.call(Request::GetChildren2 { path: path.to_string(), watch: false }, None).await? {
            Response::Children2 { children, stat } => Ok((children, stat)),
            _ => unexpected(),
        }
    }

    /// `get_children2` with a watch: fires on a child's creation or deletion, or the node's
    /// deletion.
    pub async fn get_children2_w(&self, path: &str) -> Result<(Vec<String>, Stat, OneShotWatch)> {
        match self.call_watched(Request::GetChildren2 { path: path.to_string(), watch: true }).await {
            (Ok(Response::Children2 { children, stat }), w) => Ok((children, stat, w)),
            (Ok(_), _) => unexpected(),
            (Err(e), _) => Err(e),
        }
    }

    /// Returns once the connected server has applied every write the leader had committed
    /// when it received the sync.
    pub async fn sync(&self, path: &str) -> Result<()> {
        self.call(Request::Sync { path: path.to_string() }, None).await.map(|_| ())
    }

    /// Runs the ops atomically; every op's result on success, the first error otherwise (use
    /// `try_multi` for the per-op results of a failed multi).
    pub async fn multi(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let results = self.try_multi(ops).await?;
        match results.iter().find_map(|r| match r {
            OpResult::Error(e) if *e != KeeperError::Ok => Some(*e),
            _ => None,
        }) {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }

    /// Runs the ops atomically and returns every op's result, also when the multi failed
    /// (then all are `OpResult::Error`: Ok before the failing op, its error, then
    /// RuntimeInconsistency). `Err` only for a failure of the call itself.
    pub async fn try_multi(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let reqs = ops
            .into_iter()
            .map(|op| match op {
                Op::Create { path, data, acl, mode, ttl_ms } => {
                    Self::create_request(&path, data, &acl, mode, false, ttl_ms)
                }
                Op::Delete { path, version } => Request::Delete { path, version },
                Op::SetData { path, data, version } => Request::SetData { path, data: Some(data), version },
                Op::Check { path, version } => Request::Check { path, version },
            })
            .collect();
        match self.call(Request::Multi(reqs), None).await? {
            Response::Multi(results) => Ok(results
                .into_iter()
                .map(|r| match r {
                    MultiResult::Create { path } => OpResult::Create { path, stat: None },
                    MultiResult::Create2 { path, stat } => OpResult::Create { path, stat: Some(stat) },
                    MultiResult::Delete => OpResult::Delete,
                    MultiResult::SetData { stat } => OpResult::SetData { stat },
                    MultiResult::Check => OpResult::Check,
                    MultiResult::Error(c) => OpResult::Error(code(c)),
                })
                .collect()),
            _ => unexpected(),
        }
    }

    /// Runs the reads together (op multiRead, 3.6+); each succeeds or fails on its own.
    pub async fn multi_read(&self, ops: Vec<ReadOp>) -> Result<Vec<ReadOpResult>> {
        let reqs = ops
            .into_iter()
            .map(|op| match op {
                ReadOp::GetData { path } => Request::GetData { path, watch: false },
                ReadOp::GetChildren { path } => Request::GetChildren { path, watch: false },
            })
            .collect();
        match self.call(Request::MultiRead(reqs), None).await? {
            Response::MultiRead(results) => Ok(results
                .into_iter()
                .map(|r| match r {
                    MultiReadResult::GetData { data, stat } => {
                        ReadOpResult::GetData { data: data.unwrap_or_default(), stat }
                    }
                    MultiReadResult::GetChildren { children } => ReadOpResult::GetChildren { children },
                    MultiReadResult::Error(c) => ReadOpResult::Error(code(c)),
                })
                .collect()),
            _ => unexpected(),
        }
    }

    /// Adds an identity to this session (e.g. scheme "digest", auth b"user:password"); it is
    /// presented again on every reconnect. A refused auth ends the session (AuthFailed).
    pub async fn add_auth(&self, scheme: &str, auth: impl Into<Bytes>) -> Result<()> {
        self.call(Request::Auth { auth_type: 0, scheme: scheme.to_string(), auth: auth.into() }, None).await.map(|_| ())
    }

    /// Adds a persistent (or persistent recursive) watch on `path` (the node need not exist);
    /// its events arrive on the returned stream until it is removed or the session ends.
    pub async fn add_watch(&self, path: &str, mode: AddWatchMode) -> Result<PersistentWatch> {
        let (tx, rx) = async_channel::bounded(PERSISTENT_WATCH_EVENTS_MAX);
        let req = Request::AddWatch { path: path.to_string(), mode: mode as i32 };
        self.call(req, Some(WatchSink::Persistent(tx))).await?;
        Ok(PersistentWatch { rx })
    }

    /// Removes this session's watches of type `watcher_type` on `path` on the server, then
    /// locally: each removed watcher gets its *WatchRemoved event. NoWatcher if none.
    pub async fn remove_watches(&self, path: &str, watcher_type: WatcherType) -> Result<()> {
        let req = Request::RemoveWatches { path: path.to_string(), watcher_type: watcher_type as i32 };
        self.call(req, None).await.map(|_| ())
    }

    /// Ok if the server holds a watch of type `watcher_type` on `path` for this session,
    /// NoWatcher otherwise.
    pub async fn check_watches(&self, path: &str, watcher_type: WatcherType) -> Result<()> {
        let req = Request::CheckWatches { path: path.to_string(), watcher_type: watcher_type as i32 };
        self.call(req, None).await.map(|_| ())
    }

    /// This session's ephemeral nodes whose paths start with `prefix` ("/" for all).
    pub async fn get_ephemerals(&self, prefix: &str) -> Result<Vec<String>> {
        match self.call(Request::GetEphemerals { prefix: prefix.to_string() }, None).await? {
            Response::Ephemerals(paths) => Ok(paths),
            _ => unexpected(),
        }
    }

    /// The number of descendants of `path` (itself not counted).
    pub async fn get_all_children_number(&self, path: &str) -> Result<i32> {
        match self.call(Request::GetAllChildrenNumber { path: path.to_string() }, None).await? {
            Response::AllChildrenNumber(n) => Ok(n),
            _ => unexpected(),
        }
    }

    /// The identities this connection holds (3.7+).
    pub async fn who_am_i(&self) -> Result<Vec<ClientInfo>> {
        match self.call(Request::WhoAmI, None).await? {
            Response::WhoAmI(infos) => {
                Ok(infos.into_iter().map(|(auth_scheme, user)| ClientInfo { auth_scheme, user }).collect())
            }
            _ => unexpected(),
        }
    }

    /// Replaces the server list (seed 002's rebalancing; the chroot of `connect_string` is
    /// ignored, as in Java). Returns whether the client dropped its connection to move.
    pub async fn update_server_list(&self, connect_string: &str) -> std::result::Result<bool, ConnectError> {
        let cs = super::connect_string::ConnectString::parse(connect_string).map_err(ConnectError::BadConnectString)?;
        let (done, rx) = oneshot::channel();
        if self.commands.send(Command::UpdateServerList { servers: cs.servers, done }).await.is_err() {
            return Err(ConnectError::Keeper(self.dead_error()));
        }
        rx.await.map_err(|_| ConnectError::Keeper(self.dead_error()))
    }

    /// Closes the session: the server deletes its ephemerals and the handle is dead
    /// (every later call: SessionExpired). Closing a dead handle is Ok.
    pub async fn close(&self) -> Result<()> {
        match self.call(Request::CloseSession, None).await {
            Ok(_) => Ok(()),
            Err(_) if !self.state().is_alive() => Ok(()),
            Err(e) => Err(e),
        }
    }
}
