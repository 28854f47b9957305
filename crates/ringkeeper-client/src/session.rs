//! The client's sans-IO session core (Java's `ClientCnxn` without its threads and sockets):
//! xids, the requests in flight, the watch registry, the session state machine, pings and
//! timeouts, reconnection with session id, password and last zxid, re-registration of
//! watches, the chroot both ways.
//! Rules: no socket, no clock, no randomness: the driver passes the time (`now_ms`, any
//! monotonic milliseconds) and the bytes read in, takes the bytes to write and the `Output`s
//! out, and the core's only randomness is the seeded `Rng` it was given; every bad byte from
//! a server drops the connection (ConnectionLoss for what was in flight) and reconnects,
//! never a panic; every queue is bounded (`pending_requests_max` user requests outstanding,
//! frames by `packet_size_max`); only `ringkeeper-proto` encodes or decodes.
//!
//! Timing, as the Java client: readTimeout = 2/3 of the negotiated session timeout (before
//! negotiation, of the requested one); a ping goes out after readTimeout/2 without sending
//! (at most every `PING_INTERVAL_MS_MAX`); nothing received for readTimeout drops the
//! connection; a connection attempt (TCP connect plus handshake) may take the session timeout
//! divided by the number of servers. After a dropped connection the next server is tried
//! after a random delay below `RECONNECT_JITTER_MS_MAX`; once every server has failed in a
//! row, the next round waits `RECONNECT_BACKOFF_MS`.
//!
//! Read-only (`can_be_read_only`), as the Java client: a read-only server's ConnectResponse
//! makes the session ConnectedReadOnly; while so, the core asks the driver to probe the next
//! server with `isro` (`Output::ProbeReadWrite`, first after `RW_PROBE_INTERVAL_MS_MIN`,
//! then twice as long each time up to `RW_PROBE_INTERVAL_MS_MAX`); a server answering `rw`
//! (`read_write_found`) takes the next connection. Until a read-write server has accepted it
//! once, the client asks for a new session on each connection (a read-only server's session
//! is local to it), so the move ends in SyncConnected with a new session id.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::connect_string::{Chroot, HostPort};
use super::host_provider::{HostProvider, Rng};
use super::types::{EventType, KeeperError, KeeperState, SessionState, WatchedEvent, WatcherType, TTL_MS_MAX};
use super::watches::{split_set_watches, WatchKind, WatchRegistry, WatcherId, SET_WATCHES_PACKET_BYTES_MAX_DEFAULT};
use ringkeeper_proto::connect::{decode_connect_response, encode_connect_request, ConnectRequest, SESSION_PASSWD_LEN};
use ringkeeper_proto::frame::{FrameDecoder, JUTE_MAX_BUFFER_DEFAULT_BYTES, LENGTH_PREFIX_BYTES};
use ringkeeper_proto::opcode::{
    add_watch_mode, create_flags, OpCode, XID_AUTH, XID_NOTIFICATION, XID_PING, XID_SET_WATCHES,
};
use ringkeeper_proto::path;
use ringkeeper_proto::reply::{decode_response, MultiReadResult, MultiResult, ReplyHeader, Response};
use ringkeeper_proto::request::{encode_request, Request};
use ringkeeper_proto::{JuteReader, WatcherEvent};

/// Session timeout asked for when the application does not say (kazoo's default).
pub const SESSION_TIMEOUT_MS_DEFAULT: u32 = 10_000;
/// User requests outstanding at once (queued before a connection, or in flight).
pub const PENDING_REQUESTS_MAX_DEFAULT: usize = 1_024;
/// Longest time without sending before a ping, whatever the session timeout (Java's 10 s).
pub const PING_INTERVAL_MS_MAX: u64 = 10_000;
/// Wait before a new round of connection attempts once every server failed in a row (Java's
/// spin delay).
pub const RECONNECT_BACKOFF_MS: u64 = 1_000;
/// Upper bound of the random delay before reconnecting after a dropped connection, so that
/// the clients of a failed server do not all arrive at the same instant.
pub const RECONNECT_JITTER_MS_MAX: u64 = 50;
/// While connected to a read-only server, the first probe of another server for read-write
/// (`isro`) comes after this; each later one waits twice as long as the last, up to
/// `RW_PROBE_INTERVAL_MS_MAX` (Java's minPingRwTimeout / maxPingRwTimeout).
pub const RW_PROBE_INTERVAL_MS_MIN: u64 = 100;
/// The longest wait between two read-write probes (Java's maxPingRwTimeout).
pub const RW_PROBE_INTERVAL_MS_MAX: u64 = 60_000;

/// What the application chooses about its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Requested session timeout; the server clamps it into its [min, max].
    pub session_timeout_ms: u32,
    /// Accept a read-only server (the session is then ConnectedReadOnly).
    pub can_be_read_only: bool,
    /// jute.maxbuffer of this client: the largest frame it sends or accepts. A request that
    /// would be larger fails with BadArguments without being sent.
    pub packet_size_max: usize,
    /// Largest setWatches2 payload when watches are re-registered (capped by
    /// `packet_size_max`).
    pub set_watches_packet_bytes_max: usize,
    /// User requests outstanding at once; the driver stops taking new ones at this count.
    pub pending_requests_max: usize,
    /// Resume an existing session (id, password) instead of creating one.
    pub resume: Option<(i64, [u8; SESSION_PASSWD_LEN])>,
    /// SASL DIGEST-MD5 on every connection (`crate::sasl`): the user name and password.
    pub sasl: Option<SaslCredentials>,
}

/// A SASL DIGEST-MD5 user (a JAAS `Client` section's `username` and `password`).
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// The user name.
    pub username: String,
    /// The password (never printed by `Debug`).
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslCredentials").field("username", &self.username).finish_non_exhaustive()
    }
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            session_timeout_ms: SESSION_TIMEOUT_MS_DEFAULT,
            can_be_read_only: false,
            packet_size_max: JUTE_MAX_BUFFER_DEFAULT_BYTES,
            set_watches_packet_bytes_max: SET_WATCHES_PACKET_BYTES_MAX_DEFAULT,
            pending_requests_max: PENDING_REQUESTS_MAX_DEFAULT,
            resume: None,
            sasl: None,
        }
    }
}

/// What the core asks of its driver, and tells its application, in order.
#[derive(Debug)]
pub enum Output<C> {
    /// Open a TCP connection to this server, then report `transport_connected` or
    /// `transport_closed`. There is no other transport at this point.
    Connect(HostPort),
    /// Close the current transport (or abandon the attempt); report nothing more about it.
    Disconnect,
    /// A request finished. `watcher` is the watcher its watch flag (or addWatch) registered.
    Reply {
        /// The caller's token of the request.
        token: C,
        /// The server's reply, or the error.
        result: Result<Response, KeeperError>,
        /// The watcher the request registered, if any.
        watcher: Option<WatcherId>,
    },
    /// An event for one registered watcher; `last` when the watcher is no longer registered
    /// (one-shot watchers after firing, removed watchers, every watcher when the session ends).
    Watch {
        /// The watcher.
        watcher: WatcherId,
        /// The event.
        event: WatchedEvent,
        /// True when the watcher is no longer registered.
        last: bool,
    },
    /// A session state change, for the default watcher.
    Session(WatchedEvent),
    /// Connected read-only: ask this server `isro` on a connection of its own (Java's
    /// pingRwServer) and report `read_write_found` if it answers `rw`. Nothing to report
    /// otherwise; the next probe is the core's to schedule.
    ProbeReadWrite(HostPort),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// No transport; connect to `server` at `at_ms`.
    Waiting {
        at_ms: u64,
        server: HostPort,
    },
    /// Connect asked for; `tcp_up` once the handshake (and whatever is pipelined behind it)
    /// has been written.
    Connecting {
        deadline_ms: u64,
        server: HostPort,
        tcp_up: bool,
    },
    Connected {
        server: HostPort,
        read_only: bool,
    },
    /// closeSession sent; waiting for its reply or the end of the connection.
    Closing {
        deadline_ms: u64,
    },
    Dead(SessionState),
}

/// What to do when a user request's reply arrives, besides answering it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum After {
    Nothing,
    /// Register a watcher on this client path: `on_ok` if the reply is a success, `on_no_node`
    /// if it is NoNode (exists on a missing node).
    Watch {
        path: String,
        on_ok: WatchKind,
        on_no_node: Option<WatchKind>,
    },
    RemoveWatches {
        path: String,
        watcher_type: WatcherType,
    },
}

#[derive(Debug)]
enum InFlightKind<C> {
    User {
        token: C,
        after: After,
    },
    SetWatches,
    /// A GetSASLRequest of this connection's exchange.
    Sasl,
    Close {
        token: C,
    },
}

#[derive(Debug)]
struct InFlight<C> {
    xid: i32,
    opcode: OpCode,
    kind: InFlightKind<C>,
}

/// A request waiting for a connection; paths already the server's.
#[derive(Debug)]
struct Queued<C> {
    req: Request,
    token: C,
    after: After,
}

/// A frame that breaks the protocol: the connection is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProtocolError;

/// The sans-IO session core: the driver feeds it bytes, commands and the time, and carries
/// out the `Output`s it returns. `C` is the caller's token for a request (its reply channel).
pub struct Session<C> {
    config: SessionConfig,
    chroot: Chroot,
    hosts: HostProvider,
    rng: Rng,
    phase: Phase,
    /// A transport exists (Connect emitted, no Disconnect since).
    transport: bool,
    ever_connected: bool,
    session_id: i64,
    passwd: [u8; SESSION_PASSWD_LEN],
    negotiated_ms: u32,
    last_zxid: i64,
    xid: i32,
    /// Every addAuth of this session, replayed on each connection.
    auth: Vec<(String, Bytes)>,
    /// One entry per auth packet awaiting its reply (replays have no token).
    auth_waiting: VecDeque<Option<C>>,
    in_flight: VecDeque<InFlight<C>>,
    queued: VecDeque<Queued<C>>,
    user_outstanding: usize,
    watches: WatchRegistry,
    decoder: FrameDecoder,
    inbuf: BytesMut,
    out: BytesMut,
    last_recv_ms: u64,
    last_send_ms: u64,
    outputs: VecDeque<Output<C>>,
    /// This connection's SASL exchange while it runs (from the ConnectResponse until the
    /// server's proof): nothing else is sent meanwhile, not even pings, and SyncConnected
    /// waits for its end.
    sasl: Option<ringkeeper_proto::digest_md5::Client>,
    /// A read-write server accepted this client once (Java's seenRwServerBefore): until
    /// then a connection asks for a new session (id 0), since a read-only server's session
    /// is local to it and unknown to the quorum.
    seen_read_write: bool,
    /// Connected read-only: when the next read-write probe goes out, and the wait after it.
    rw_probe: Option<(u64, u64)>,
}

impl<C> Session<C> {
    /// A handle for `servers` (at least one) under `chroot`. `seed` drives the server order
    /// and every later random choice. The first `Output::Connect` is ready at once.
    pub fn new(config: SessionConfig, servers: Vec<HostPort>, chroot: Chroot, seed: u64, now_ms: u64) -> Session<C> {
        let mut rng = Rng::new(seed);
        let hosts = HostProvider::new(servers, Rng::new(rng.next_u64()));
        let (session_id, passwd) = config.resume.unwrap_or((0, [0; SESSION_PASSWD_LEN]));
        let decoder = FrameDecoder::new(config.packet_size_max);
        let mut s = Session {
            config,
            chroot,
            hosts,
            rng,
            phase: Phase::Dead(SessionState::Connecting),
            transport: false,
            ever_connected: false,
            session_id,
            passwd,
            negotiated_ms: 0,
            last_zxid: 0,
            xid: 0,
            auth: Vec::new(),
            auth_waiting: VecDeque::new(),
            in_flight: VecDeque::new(),
            queued: VecDeque::new(),
            user_outstanding: 0,
            watches: WatchRegistry::new(),
            decoder,
            inbuf: BytesMut::new(),
            out: BytesMut::new(),
            last_recv_ms: now_ms,
            last_send_ms: now_ms,
            outputs: VecDeque::new(),
            sasl: None,
            seen_read_write: session_id != 0,
            rw_probe: None,
        };
        s.schedule_attempt(now_ms, 0);
        s.tick(now_ms);
        s
    }

    // ---- what the driver and the application read ------------------------------------------

    /// The session state now.
    pub fn state(&self) -> SessionState {
        match &self.phase {
            Phase::Waiting { .. } | Phase::Connecting { .. } if self.ever_connected => SessionState::Disconnected,
            Phase::Waiting { .. } | Phase::Connecting { .. } => SessionState::Connecting,
            Phase::Connected { read_only: false, .. } | Phase::Closing { .. } => SessionState::Connected,
            Phase::Connected { read_only: true, .. } => SessionState::ConnectedReadOnly,
            Phase::Dead(s) => *s,
        }
    }

    /// The session id (0 before the first connection).
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The session password (zeros before the first connection).
    pub fn session_password(&self) -> [u8; SESSION_PASSWD_LEN] {
        self.passwd
    }

    /// The timeout the server granted (0 before the first connection).
    pub fn negotiated_timeout_ms(&self) -> u32 {
        self.negotiated_ms
    }

    /// The largest zxid seen in a reply: sent as lastZxidSeen and setWatches2's relativeZxid.
    pub fn last_zxid_seen(&self) -> i64 {
        self.last_zxid
    }

    /// The server of the current session connection.
    pub fn connected_server(&self) -> Option<&HostPort> {
        match &self.phase {
            Phase::Connected { server, .. } => Some(server),
            _ => None,
        }
    }

    /// The chroot paths are relative to.
    pub fn chroot(&self) -> &Chroot {
        &self.chroot
    }

    /// The servers in the order they are tried.
    pub fn servers(&self) -> &[HostPort] {
        self.hosts.servers()
    }

    /// How many watchers are registered.
    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }

    /// Whether another user request may be submitted (else the driver waits for replies).
    pub fn can_submit(&self) -> bool {
        self.user_outstanding < self.config.pending_requests_max
    }

    /// The next `Output`, in order.
    pub fn poll_output(&mut self) -> Option<Output<C>> {
        self.outputs.pop_front()
    }

    /// Bytes to write to the transport.
    pub fn output_bytes(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of `output_bytes` were written.
    pub fn consume_output(&mut self, n: usize) {
        let _ = self.out.split_to(n.min(self.out.len()));
    }

    /// When `tick` must be called next, if ever.
    pub fn next_deadline(&self) -> Option<u64> {
        match &self.phase {
            Phase::Waiting { at_ms, .. } => Some(*at_ms),
            Phase::Connecting { deadline_ms, .. } | Phase::Closing { deadline_ms } => Some(*deadline_ms),
            Phase::Connected { .. } => {
                let idle =
                    (self.last_recv_ms + self.read_timeout_ms()).min(self.last_send_ms + self.ping_interval_ms());
                Some(self.rw_probe.map_or(idle, |(at, _)| idle.min(at)))
            }
            Phase::Dead(_) => None,
        }
    }

    fn timeout_basis_ms(&self) -> u64 {
        u64::from(if self.negotiated_ms > 0 { self.negotiated_ms } else { self.config.session_timeout_ms }).max(3)
    }

    /// Java's readTimeout: 2/3 of the session timeout.
    pub fn read_timeout_ms(&self) -> u64 {
        self.timeout_basis_ms() * 2 / 3
    }

    /// Idle sending time after which a ping goes out.
    pub fn ping_interval_ms(&self) -> u64 {
        (self.read_timeout_ms() / 2).clamp(1, PING_INTERVAL_MS_MAX)
    }

    /// Java's connectTimeout: the session timeout divided by the number of servers.
    pub fn connect_timeout_ms(&self) -> u64 {
        (self.timeout_basis_ms() / self.hosts.len().max(1) as u64).max(1)
    }

    // ---- inputs ------------------------------------------------------------------------------

    /// Time passed: connection attempts, read timeouts, pings, reconnect delays.
    pub fn tick(&mut self, now_ms: u64) {
        match self.phase.clone() {
            Phase::Waiting { at_ms, server } if now_ms >= at_ms => {
                self.transport = true;
                self.outputs.push_back(Output::Connect(server.clone()));
                let deadline_ms = now_ms + self.connect_timeout_ms();
                self.phase = Phase::Connecting { deadline_ms, server, tcp_up: false };
                self.last_recv_ms = now_ms;
            }
            Phase::Connecting { deadline_ms, .. } if now_ms >= deadline_ms => self.lose_connection(now_ms),
            Phase::Connected { .. } => {
                if now_ms >= self.last_recv_ms + self.read_timeout_ms() {
                    self.lose_connection(now_ms);
                    return;
                } else if self.sasl.is_none() && now_ms >= self.last_send_ms + self.ping_interval_ms() {
                    self.write_frame(XID_PING, &Request::Ping, now_ms);
                }
                if let Some((_, wait)) = self.rw_probe.filter(|(at, _)| now_ms >= *at) {
                    let (server, _) = self.hosts.next_server();
                    self.outputs.push_back(Output::ProbeReadWrite(server));
                    let next = (wait * 2).min(RW_PROBE_INTERVAL_MS_MAX);
                    self.rw_probe = Some((now_ms + wait, next));
                }
            }
            Phase::Closing { deadline_ms } if now_ms >= deadline_ms => self.end(SessionState::Closed),
            _ => {}
        }
    }

    /// The TCP connection asked for by `Output::Connect` is up: the handshake goes out, with
    /// the auth packets, the setWatches2 packets and every queued request pipelined behind it.
    pub fn transport_connected(&mut self, now_ms: u64) {
        let Phase::Connecting { deadline_ms, server, tcp_up: false } = self.phase.clone() else { return };
        self.phase = Phase::Connecting { deadline_ms, server, tcp_up: true };
        self.last_recv_ms = now_ms;
        let req = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: self.last_zxid,
            timeout_ms: i32::try_from(self.config.session_timeout_ms).unwrap_or(i32::MAX),
            session_id: if self.seen_read_write { self.session_id } else { 0 },
            passwd: Bytes::copy_from_slice(&self.passwd),
            read_only: Some(self.config.can_be_read_only),
        };
        encode_connect_request(&mut self.out, &req);
        if self.config.sasl.is_none() {
            self.send_behind_handshake(now_ms);
        }
    }

    /// What follows the handshake on a new connection: the auth packets, the setWatches2
    /// packets and every queued request (with SASL, once the exchange succeeded).
    fn send_behind_handshake(&mut self, now_ms: u64) {
        for (scheme, auth) in self.auth.clone() {
            let req = Request::Auth { auth_type: 0, scheme, auth };
            self.write_frame(XID_AUTH, &req, now_ms);
            self.auth_waiting.push_back(None);
        }
        let lists: Vec<(WatchKind, Vec<String>)> = [
            WatchKind::Data,
            WatchKind::Exist,
            WatchKind::Child,
            WatchKind::Persistent,
            WatchKind::PersistentRecursive,
        ]
        .into_iter()
        .map(|k| (k, self.watches.paths(k).iter().map(|p| self.chroot.to_server(p)).collect()))
        .collect();
        let limit = self.config.set_watches_packet_bytes_max.min(self.config.packet_size_max);
        for packet in split_set_watches(&lists, limit) {
            let req = packet.into_request(self.last_zxid);
            self.write_frame(XID_SET_WATCHES, &req, now_ms);
            self.in_flight.push_back(InFlight {
                xid: XID_SET_WATCHES,
                opcode: OpCode::SetWatches2,
                kind: InFlightKind::SetWatches,
            });
        }
        while let Some(q) = self.queued.pop_front() {
            self.send(q.req, q.token, q.after, now_ms);
        }
    }

    /// The transport failed to connect, reached end of file, or failed.
    pub fn transport_closed(&mut self, now_ms: u64) {
        if self.transport {
            self.transport = false;
            self.lose_connection(now_ms);
        }
    }

    /// Bytes read from the transport.
    pub fn receive(&mut self, data: &[u8], now_ms: u64) {
        let receiving = matches!(
            self.phase,
            Phase::Connecting { tcp_up: true, .. } | Phase::Connected { .. } | Phase::Closing { .. }
        );
        if !receiving || !self.transport {
            return;
        }
        self.last_recv_ms = now_ms;
        self.inbuf.extend_from_slice(data);
        loop {
            let frame = match self.decoder.next_frame(&mut self.inbuf) {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(_) => return self.lose_connection(now_ms),
            };
            if self.handle_frame(frame).is_err() {
                return self.lose_connection(now_ms);
            }
            if !self.transport {
                return;
            }
        }
    }

    /// Submits a request (client paths). Its answer comes as `Output::Reply` with `token`,
    /// possibly at once (a dead handle, an invalid path). Auth and CloseSession are handled
    /// here too (addAuth, close).
    pub fn submit(&mut self, req: Request, token: C, now_ms: u64) {
        self.user_outstanding += 1;
        if let Some(err) = self.refusal() {
            return self.complete(token, Err(err), None);
        }
        match req {
            Request::CloseSession => self.close(token, now_ms),
            Request::Auth { scheme, auth, .. } => {
                self.auth.push((scheme.clone(), auth.clone()));
                let req = Request::Auth { auth_type: 0, scheme, auth };
                if self.sendable() {
                    self.write_frame(XID_AUTH, &req, now_ms);
                    self.auth_waiting.push_back(Some(token));
                } else {
                    self.queued.push_back(Queued { req, token, after: After::Nothing });
                }
            }
            req => {
                let after = match after_reply(&req) {
                    Ok(a) => a,
                    Err(e) => return self.complete(token, Err(e), None),
                };
                let req = match self.to_server_request(req) {
                    Ok(r) => r,
                    Err(e) => return self.complete(token, Err(e), None),
                };
                if self.sendable() {
                    self.send(req, token, after, now_ms);
                } else {
                    self.queued.push_back(Queued { req, token, after });
                }
            }
        }
    }

    /// The application's receiver of this watcher is gone: forget it locally.
    pub fn forget_watcher(&mut self, id: WatcherId) {
        self.watches.forget(id);
    }

    /// Replaces the server list (seed 002). Returns whether the client drops its connection
    /// to move to another server (see `HostProvider::update`). The list must not be empty.
    pub fn update_server_list(&mut self, servers: Vec<HostPort>, now_ms: u64) -> bool {
        if servers.is_empty() || !self.state().is_alive() {
            return false;
        }
        let connected = self.connected_server().cloned();
        let moving = self.hosts.update(servers, connected.as_ref());
        if moving {
            match self.phase {
                Phase::Connected { .. } | Phase::Connecting { .. } => self.lose_connection(now_ms),
                Phase::Waiting { .. } => {
                    self.schedule_attempt(now_ms, 0);
                    self.tick(now_ms);
                }
                _ => {}
            }
        }
        moving
    }

    // ---- internals -----------------------------------------------------------------------

    fn refusal(&self) -> Option<KeeperError> {
        match self.phase {
            Phase::Dead(s) => s.dead_error(),
            Phase::Closing { .. } => Some(KeeperError::SessionExpired),
            _ => None,
        }
    }

    fn sendable(&self) -> bool {
        // With SASL, nothing is pipelined behind the handshake: requests wait for the exchange.
        self.sasl.is_none()
            && match self.phase {
                Phase::Connected { .. } => true,
                Phase::Connecting { tcp_up: true, .. } => self.config.sasl.is_none(),
                _ => false,
            }
    }

    /// The xid after the last one sent: 1 to 2^31-1, then 1 again (Java's rule).
    fn next_xid(&self) -> i32 {
        if self.xid == i32::MAX || self.xid < 1 {
            1
        } else {
            self.xid + 1
        }
    }

    /// Appends one request frame; false (nothing written) if it exceeds `packet_size_max`.
    fn write_frame(&mut self, xid: i32, req: &Request, now_ms: u64) -> bool {
        let start = self.out.len();
        encode_request(&mut self.out, xid, req);
        if self.out.len() - start - LENGTH_PREFIX_BYTES > self.config.packet_size_max {
            self.out.truncate(start);
            return false;
        }
        self.last_send_ms = now_ms;
        true
    }

    fn send(&mut self, req: Request, token: C, after: After, now_ms: u64) {
        if let Request::Auth { .. } = req {
            self.write_frame(XID_AUTH, &req, now_ms);
            self.auth_waiting.push_back(Some(token));
            return;
        }
        let xid = self.next_xid();
        if !self.write_frame(xid, &req, now_ms) {
            return self.complete(token, Err(KeeperError::BadArguments), None);
        }
        self.xid = xid;
        self.in_flight.push_back(InFlight { xid, opcode: req.opcode(), kind: InFlightKind::User { token, after } });
    }

    fn complete(&mut self, token: C, result: Result<Response, KeeperError>, watcher: Option<WatcherId>) {
        self.user_outstanding = self.user_outstanding.saturating_sub(1);
        self.outputs.push_back(Output::Reply { token, result, watcher });
    }

    fn close(&mut self, token: C, now_ms: u64) {
        match self.phase {
            Phase::Connected { .. } => {
                let xid = self.next_xid();
                self.xid = xid;
                self.write_frame(xid, &Request::CloseSession, now_ms);
                self.in_flight.push_back(InFlight {
                    xid,
                    opcode: OpCode::CloseSession,
                    kind: InFlightKind::Close { token },
                });
                self.phase = Phase::Closing { deadline_ms: now_ms + self.read_timeout_ms() };
            }
            _ => {
                // Not connected: nothing to tell a server; the session (if any) expires there.
                self.complete(token, Ok(Response::None), None);
                self.end(SessionState::Closed);
            }
        }
    }

    fn schedule_attempt(&mut self, now_ms: u64, delay_ms: u64) {
        let (server, back_off) = self.hosts.next_server();
        let at_ms = now_ms + delay_ms + if back_off { RECONNECT_BACKOFF_MS } else { 0 };
        self.phase = Phase::Waiting { at_ms, server };
    }

    fn drop_transport(&mut self) {
        self.rw_probe = None;
        if self.transport {
            self.transport = false;
            self.outputs.push_back(Output::Disconnect);
        }
        self.out.clear();
        self.inbuf.clear();
        self.decoder = FrameDecoder::new(self.config.packet_size_max);
        self.sasl = None;
    }

    /// Fails everything in flight or queued with `err` (the close token, if any, with Ok).
    fn fail_outstanding(&mut self, err: KeeperError) {
        while let Some(f) = self.in_flight.pop_front() {
            match f.kind {
                InFlightKind::User { token, .. } => self.complete(token, Err(err), None),
                InFlightKind::Close { token } => self.complete(token, Ok(Response::None), None),
                InFlightKind::SetWatches | InFlightKind::Sasl => {}
            }
        }
        while let Some(q) = self.queued.pop_front() {
            self.complete(q.token, Err(err), None);
        }
        while let Some(a) = self.auth_waiting.pop_front() {
            if let Some(token) = a {
                self.complete(token, Err(err), None);
            }
        }
    }

    /// The connection (or the attempt) is gone: ConnectionLoss for what was outstanding, and
    /// the next server after a short random delay.
    /// A probe found `server` read-write while this session is connected read-only: the
    /// connection goes (Disconnected, requests in flight fail with ConnectionLoss) and the
    /// next one is to that server (Java's RWServerFoundException). Ignored otherwise.
    pub fn read_write_found(&mut self, server: HostPort, now_ms: u64) {
        if !matches!(self.phase, Phase::Connected { read_only: true, .. }) {
            return;
        }
        self.drop_transport();
        self.fail_outstanding(KeeperError::ConnectionLoss);
        self.outputs.push_back(Output::Session(WatchedEvent::session(KeeperState::Disconnected)));
        self.phase = Phase::Waiting { at_ms: now_ms, server };
        self.tick(now_ms);
    }

    fn lose_connection(&mut self, now_ms: u64) {
        let was_connected = matches!(self.phase, Phase::Connected { .. });
        match self.phase {
            Phase::Closing { .. } => return self.end(SessionState::Closed),
            Phase::Dead(_) => return self.drop_transport(),
            _ => {}
        }
        self.drop_transport();
        self.fail_outstanding(KeeperError::ConnectionLoss);
        let delay = if was_connected {
            self.outputs.push_back(Output::Session(WatchedEvent::session(KeeperState::Disconnected)));
            self.rng.below(RECONNECT_JITTER_MS_MAX)
        } else {
            0
        };
        self.schedule_attempt(now_ms, delay);
        if delay == 0 {
            self.tick(now_ms);
        }
    }

    /// The handle dies: Expired, AuthFailed or Closed.
    fn end(&mut self, state: SessionState) {
        if matches!(self.phase, Phase::Dead(_)) {
            return;
        }
        self.phase = Phase::Dead(state);
        self.drop_transport();
        self.fail_outstanding(state.dead_error().unwrap_or(KeeperError::SessionExpired));
        let keeper_state = match state {
            SessionState::Expired => KeeperState::Expired,
            SessionState::AuthFailed => KeeperState::AuthFailed,
            _ => KeeperState::Closed,
        };
        self.outputs.push_back(Output::Session(WatchedEvent::session(keeper_state)));
        for watcher in self.watches.drain() {
            self.outputs.push_back(Output::Watch { watcher, event: WatchedEvent::session(keeper_state), last: true });
        }
    }

    fn handle_frame(&mut self, frame: Bytes) -> Result<(), ProtocolError> {
        if let Phase::Connecting { server, .. } = &self.phase {
            let server = server.clone();
            let resp = decode_connect_response(frame).map_err(|_| ProtocolError)?;
            if resp.timeout_ms <= 0 {
                self.end(SessionState::Expired);
                return Ok(());
            }
            self.session_id = resp.session_id;
            self.passwd = resp.passwd;
            self.negotiated_ms = resp.timeout_ms as u32;
            let read_only = resp.read_only == Some(true);
            self.phase = Phase::Connected { server, read_only };
            self.seen_read_write |= !read_only;
            self.rw_probe =
                read_only.then_some((self.last_recv_ms + RW_PROBE_INTERVAL_MS_MIN, RW_PROBE_INTERVAL_MS_MIN));
            self.ever_connected = true;
            self.hosts.on_connected();
            if let Some(creds) = self.config.sasl.clone() {
                let cnonce = format!("{:016x}{:016x}", self.rng.next_u64(), self.rng.next_u64());
                let exchange =
                    ringkeeper_proto::digest_md5::Client::zookeeper(&creds.username, &creds.password, cnonce);
                let first = exchange.initial_token();
                self.sasl = Some(exchange);
                self.send_sasl(first, self.last_recv_ms);
                return Ok(());
            }
            self.announce_connected();
            return Ok(());
        }
        let mut r = JuteReader::new(frame);
        let hdr = ReplyHeader::read(&mut r).map_err(|_| ProtocolError)?;
        match hdr.xid {
            XID_NOTIFICATION => self.notification(&mut r),
            XID_PING => Ok(()),
            XID_AUTH => {
                let waiting = self.auth_waiting.pop_front().ok_or(ProtocolError)?;
                let err = error_code(hdr.err)?;
                if let Some(token) = waiting {
                    let result = if err == KeeperError::Ok { Ok(Response::None) } else { Err(err) };
                    self.complete(token, result, None);
                }
                if err == KeeperError::AuthFailed {
                    self.end(SessionState::AuthFailed);
                }
                Ok(())
            }
            xid => {
                let front = self.in_flight.front().ok_or(ProtocolError)?;
                if front.xid != xid {
                    return Err(ProtocolError);
                }
                let err = error_code(hdr.err)?;
                let result = if err != KeeperError::Ok {
                    Err(err)
                } else {
                    let body = decode_response(front.opcode, r.into_rest()).map_err(|_| ProtocolError)?;
                    Ok(self.to_client_response(body)?)
                };
                let Some(done) = self.in_flight.pop_front() else { return Err(ProtocolError) };
                if hdr.zxid > self.last_zxid {
                    self.last_zxid = hdr.zxid;
                }
                match done.kind {
                    InFlightKind::SetWatches => {}
                    InFlightKind::Sasl => self.sasl_reply(result),
                    InFlightKind::Close { token } => {
                        self.complete(token, Ok(Response::None), None);
                        self.end(SessionState::Closed);
                    }
                    InFlightKind::User { token, after } => self.finish_user(token, result, after),
                }
                Ok(())
            }
        }
    }

    /// SyncConnected (or ConnectedReadOnly) for the connection just established.
    fn announce_connected(&mut self) {
        let read_only = matches!(self.phase, Phase::Connected { read_only: true, .. });
        let state = if read_only { KeeperState::ConnectedReadOnly } else { KeeperState::SyncConnected };
        self.outputs.push_back(Output::Session(WatchedEvent::session(state)));
    }

    fn send_sasl(&mut self, token: Vec<u8>, now_ms: u64) {
        let xid = self.next_xid();
        self.xid = xid;
        self.write_frame(xid, &Request::Sasl { token: Some(token.into()) }, now_ms);
        self.in_flight.push_back(InFlight { xid, opcode: OpCode::Sasl, kind: InFlightKind::Sasl });
    }

    /// The server's answer to a SASL token: the next token, or done (SyncConnected, and what
    /// waited goes out). A refusal, a null token (the server has no SASL: the user asked for
    /// it, so nothing goes on unauthenticated) or a server that fails its proof is AuthFailed,
    /// which ends the handle, as in the Java client.
    fn sasl_reply(&mut self, result: Result<Response, KeeperError>) {
        let now_ms = self.last_recv_ms;
        let step = match (result, self.sasl.as_mut()) {
            (Ok(Response::Sasl(Some(token))), Some(exchange)) => exchange.step(&token).ok(),
            _ => None,
        };
        match step {
            Some(ringkeeper_proto::digest_md5::ClientStep::Send(token)) => self.send_sasl(token, now_ms),
            Some(ringkeeper_proto::digest_md5::ClientStep::Done) => {
                self.sasl = None;
                self.announce_connected();
                self.send_behind_handshake(now_ms);
            }
            None => self.end(SessionState::AuthFailed),
        }
    }

    fn finish_user(&mut self, token: C, result: Result<Response, KeeperError>, after: After) {
        let mut watcher = None;
        match after {
            After::Nothing => {}
            After::Watch { path, on_ok, on_no_node } => {
                let kind = match &result {
                    Ok(_) => Some(on_ok),
                    Err(KeeperError::NoNode) => on_no_node,
                    Err(_) => None,
                };
                watcher = kind.map(|k| self.watches.register(k, &path));
            }
            After::RemoveWatches { path, watcher_type } => {
                if result.is_ok() {
                    for (id, event_type) in self.watches.remove(&path, watcher_type) {
                        let event = WatchedEvent {
                            event_type,
                            keeper_state: KeeperState::SyncConnected,
                            path: Some(path.clone()),
                        };
                        self.outputs.push_back(Output::Watch { watcher: id, event, last: true });
                    }
                }
            }
        }
        self.complete(token, result, watcher);
    }

    fn notification(&mut self, r: &mut JuteReader) -> Result<(), ProtocolError> {
        let ev = WatcherEvent::read(r).map_err(|_| ProtocolError)?;
        let event_type = EventType::from_wire(ev.event_type).ok_or(ProtocolError)?;
        let path = self.chroot.to_client(&ev.path);
        for d in self.watches.dispatch(event_type, &path) {
            let event = WatchedEvent { event_type, keeper_state: KeeperState::SyncConnected, path: Some(path.clone()) };
            self.outputs.push_back(Output::Watch { watcher: d.watcher, event, last: d.last });
        }
        Ok(())
    }

    /// Validates a request's paths as the Java client does and puts them under the chroot.
    fn to_server_request(&self, req: Request) -> Result<Request, KeeperError> {
        let p = |path: String| -> Result<String, KeeperError> {
            path::validate(&path).map_err(|_| KeeperError::BadArguments)?;
            Ok(self.chroot.to_server(&path))
        };
        Ok(match req {
            Request::Create { opcode, path, data, acl, flags, ttl_ms } => {
                let sequential = matches!(
                    flags,
                    create_flags::PERSISTENT_SEQUENTIAL
                        | create_flags::EPHEMERAL_SEQUENTIAL
                        | create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL
                );
                // Sequential paths are validated with the suffix's place taken by a digit.
                let check = if sequential { format!("{path}1") } else { path.clone() };
                path::validate(&check).map_err(|_| KeeperError::BadArguments)?;
                let ttl_mode =
                    matches!(flags, create_flags::PERSISTENT_WITH_TTL | create_flags::PERSISTENT_SEQUENTIAL_WITH_TTL);
                if ttl_mode != (opcode == OpCode::CreateTtl) || (ttl_mode && !(1..=TTL_MS_MAX).contains(&ttl_ms)) {
                    return Err(KeeperError::BadArguments);
                }
                Request::Create { opcode, path: self.chroot.to_server(&path), data, acl, flags, ttl_ms }
            }
            Request::Delete { path, version } => Request::Delete { path: p(path)?, version },
            Request::Exists { path, watch } => Request::Exists { path: p(path)?, watch },
            Request::GetData { path, watch } => Request::GetData { path: p(path)?, watch },
            Request::SetData { path, data, version } => Request::SetData { path: p(path)?, data, version },
            Request::GetAcl { path } => Request::GetAcl { path: p(path)? },
            Request::SetAcl { path, acl, version } => Request::SetAcl { path: p(path)?, acl, version },
            Request::GetChildren { path, watch } => Request::GetChildren { path: p(path)?, watch },
            Request::GetChildren2 { path, watch } => Request::GetChildren2 { path: p(path)?, watch },
            Request::Sync { path } => Request::Sync { path: p(path)? },
            Request::Check { path, version } => Request::Check { path: p(path)?, version },
            Request::Multi(ops) => {
                Request::Multi(ops.into_iter().map(|op| self.to_server_request(op)).collect::<Result<_, _>>()?)
            }
            Request::MultiRead(ops) => {
                Request::MultiRead(ops.into_iter().map(|op| self.to_server_request(op)).collect::<Result<_, _>>()?)
            }
            Request::AddWatch { path, mode } => Request::AddWatch { path: p(path)?, mode },
            Request::RemoveWatches { path, watcher_type } => Request::RemoveWatches { path: p(path)?, watcher_type },
            Request::CheckWatches { path, watcher_type } => Request::CheckWatches { path: p(path)?, watcher_type },
            Request::GetEphemerals { prefix } => Request::GetEphemerals { prefix: p(prefix)? },
            Request::GetAllChildrenNumber { path } => Request::GetAllChildrenNumber { path: p(path)? },
            Request::WhoAmI => Request::WhoAmI,
            // No path: the chroot does not apply.
            r @ Request::Reconfig { .. } => r,
            // Session-level packets are the core's own business.
            Request::Ping
            | Request::CloseSession
            | Request::Auth { .. }
            | Request::SetWatches { .. }
            | Request::SetWatches2 { .. }
            | Request::Sasl { .. } => return Err(KeeperError::BadArguments),
        })
    }

    /// Strips the chroot from the paths of a response; checks the error codes inside it.
    fn to_client_response(&self, resp: Response) -> Result<Response, ProtocolError> {
        let c = |p: String| self.chroot.to_client(&p);
        Ok(match resp {
            Response::Create { path } => Response::Create { path: c(path) },
            Response::Create2 { path, stat } => Response::Create2 { path: c(path), stat },
            Response::Sync { path } => Response::Sync { path: c(path) },
            Response::Ephemerals(paths) => Response::Ephemerals(paths.into_iter().map(c).collect()),
            Response::Multi(results) => Response::Multi(
                results
                    .into_iter()
                    .map(|r| {
                        Ok(match r {
                            MultiResult::Create { path } => MultiResult::Create { path: c(path) },
                            MultiResult::Create2 { path, stat } => MultiResult::Create2 { path: c(path), stat },
                            MultiResult::Error(code) => MultiResult::Error(error_code(code)?.code()),
                            other => other,
                        })
                    })
                    .collect::<Result<_, ProtocolError>>()?,
            ),
            Response::MultiRead(results) => {
                for r in &results {
                    if let MultiReadResult::Error(code) = r {
                        error_code(*code)?;
                    }
                }
                Response::MultiRead(results)
            }
            other => other,
        })
    }
}

/// A code ZooKeeper defines, or a protocol error.
fn error_code(code: i32) -> Result<KeeperError, ProtocolError> {
    KeeperError::from_code(code).ok_or(ProtocolError)
}

/// What the reply of `req` (client paths) must do to the watch registry.
fn after_reply(req: &Request) -> Result<After, KeeperError> {
    let watch = |path: &str, on_ok, on_no_node| After::Watch { path: path.to_string(), on_ok, on_no_node };
    Ok(match req {
        Request::Exists { path, watch: true } => watch(path, WatchKind::Data, Some(WatchKind::Exist)),
        Request::GetData { path, watch: true } => watch(path, WatchKind::Data, None),
        Request::GetChildren { path, watch: true } | Request::GetChildren2 { path, watch: true } => {
            watch(path, WatchKind::Child, None)
        }
        Request::AddWatch { path, mode } => match *mode {
            add_watch_mode::PERSISTENT => watch(path, WatchKind::Persistent, None),
            add_watch_mode::PERSISTENT_RECURSIVE => watch(path, WatchKind::PersistentRecursive, None),
            _ => return Err(KeeperError::BadArguments),
        },
        Request::RemoveWatches { path, watcher_type } => {
            After::RemoveWatches { path: path.clone(), watcher_type: watcher_type_of(*watcher_type)? }
        }
        Request::CheckWatches { watcher_type, .. } => {
            watcher_type_of(*watcher_type)?;
            After::Nothing
        }
        _ => After::Nothing,
    })
}

fn watcher_type_of(code: i32) -> Result<WatcherType, KeeperError> {
    use WatcherType::*;
    [Children, Data, Any, Persistent, PersistentRecursive]
        .into_iter()
        .find(|t| *t as i32 == code)
        .ok_or(KeeperError::BadArguments)
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
