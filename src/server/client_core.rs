//! A client core: owns its connections and the watch index of its connections, and reads from
//! the root of the one committed tree that came with the last commit batch (read-copy-update:
//! the pipeline core applies every txn once; this core applies none). Reads are answered here;
//! writes, syncs and connects go to the pipeline core; committed batches come back in zxid
//! order with each txn's result and watch triggers.
//! Rules: a connection's replies leave in the order its requests arrived (a read behind a
//! pending write waits); watch notifications of a txn are queued before the reply of the
//! write that fired them, and before any read answered from a root that shows the change;
//! nothing here touches another core's state.

use super::audit::{self, users_of, AuditedWrite};
use super::conn_limits::{ConnLimits, ConnPermit};
use super::connection;
use super::fence::Fences;
use super::inspect::{ConnInfo, ConnStats, CoreReport, Inspect, Inspected, INSPECTIONS_PER_CORE_MAX};
use super::messages::{Captured, Commit, CommitBatch, ServerMode, ToClientCore, ToPipeline};
use super::out_queue::OutQueue;
use super::stage_latency::Stage;
use super::stats::{self, CoreStats, Stats};
use crate::config::Config;
use crate::proto::connect::ConnectResponse;
use crate::proto::opcode::{add_watch_mode, event_type, perms, STATE_SYNC_CONNECTED, XID_PING};
use crate::proto::reply::{self, MultiResult, ReplyHeader, Response};
use crate::proto::request::Request;
use crate::proto::{ErrorCode, Id, OpCode};
use crate::query::{self, WatchRequest};
use crate::sasl::digest_md5::{DigestError, ServerStep as Step};
use crate::sasl::gssapi::{GssError, ServerStep as GssStep};
use crate::sasl::{Mechanism, ServerExchange};
use crate::session::ConnRef;

use super::core_link;
use crate::tree::watches::{Notification, WatchError, WatchIndex};
use crate::tree::{acl, DataTree};
use crate::txn::apply::{Change, OpResult};
use crate::txn::WriteOp;
use glommio::channels::local_channel::{self, LocalSender};
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client core's connections by number.
pub type ConnMap = crate::id_hash::IdMap<u64, Rc<Conn>>;

/// Requests of one connection waiting for their turn; the reader stops reading beyond this
/// (and, as in ZooKeeper, any connection with requests in process stops being read while the
/// server's requests in process exceed globalOutstandingLimit: `Core::throttled`).
pub const CONN_PENDING_MAX: usize = 1000;
/// Reply bytes queued for one connection before its reader stops reading.
pub const CONN_OUT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// How long the acceptor pauses after a failed accept (out of descriptors), as ZooKeeper's.
pub const ACCEPT_PAUSE_MS: u64 = 10;
/// Repeated warnings (failed accepts, refused connections) are logged at most this often.
pub const LOG_EVERY_MS: i64 = 1000;
/// How often, at most, connections without a session are checked against their deadline.
pub const SESSIONLESS_CHECK_MS_MAX: u64 = 1000;
/// How long shutdown waits for connections to flush their replies.
pub const SHUTDOWN_FLUSH_MS_MAX: u64 = 2000;

/// Replies per connection whose queueing time is kept (`Stage::ReplyToSocket`) until the
/// socket write that carries them; beyond this many unwritten, a reply shares the last kept
/// time (so it is counted, with an upper bound of its time).
pub const REPLY_STAMPS_MAX: usize = 1024;

/// A request waiting for its turn on a connection.
pub enum Pending {
    /// The ConnectRequest: nothing else is answered before the session is established.
    Connect,
    /// A write at the pipeline core, read at `at` (with what the audit log needs of it,
    /// while audit is on).
    Write { xid: i32, opcode: OpCode, at: Instant, audit: Option<Box<AuditedWrite>> },
    /// A sync at the pipeline core, read at `at`.
    Sync { xid: i32, at: Instant },
    /// A request answered on this core once everything before it is answered, with the ids
    /// the connection held when it arrived (a later auth does not apply to it).
    Local { xid: i32, req: Request, auth: Arc<[Id]>, at: Instant },
    /// An error reply owed in order (a request the decoder rejected); `close` after it.
    Error { xid: i32, err: ErrorCode, close: bool },
}

/// Adds ids to a connection's (each once).
/// Where a SASL step left the exchange.
enum SaslOutcome {
    Challenge(Vec<u8>),
    /// The authenticated name, and the final token (None: a null token).
    Authenticated(String, Option<Vec<u8>>),
    /// A token after the exchange ended (or while a step runs).
    AfterTheEnd,
    Failed(String),
}

/// Answers a sasl request (`Core::answer_sasl`) with what its step gave.
fn sasl_answer(conn: &Conn, xid: i32, sasl: &crate::sasl::ServerSasl, required: bool, outcome: SaslOutcome) {
    let ok = |body: Response| conn.reply(ReplyHeader { xid, zxid: 0, err: 0 }, &body);
    match outcome {
        SaslOutcome::Challenge(t) => ok(Response::Sasl(Some(t.into()))),
        SaslOutcome::Authenticated(name, token) => {
            let id = sasl.rules.authorized_id(&name);
            tracing::info!(
                "session 0x{:x} ({}): SASL {} authenticated {name:?} as sasl:{id}",
                conn.session_id.get(),
                conn.peer,
                sasl.mechanism_name()
            );
            let mut ids = vec![Id { scheme: acl::SCHEME_SASL.to_string(), id: id.clone() }];
            if sasl.super_user.as_deref() == Some(id.as_str()) {
                ids.push(Id { scheme: acl::SCHEME_SUPER.to_string(), id: String::new() });
            }
            add_ids(conn, ids);
            ok(Response::Sasl(token.map(Into::into)))
        }
        SaslOutcome::AfterTheEnd => {
            // ZooKeeper's SaslServer throws outside its SaslException handling here: the
            // connection just closes.
            tracing::warn!("connection {} ({}): a sasl token after the exchange ended; closing", conn.id, conn.peer);
            conn.stop_reading.set(true);
            conn.close();
        }
        SaslOutcome::Failed(why) => {
            tracing::warn!("client {} failed to SASL authenticate: {why}; closing the connection", conn.remote);
            let err = if required { ErrorCode::SessionClosedRequireSaslAuth } else { ErrorCode::AuthFailed };
            conn.stop_reading.set(true);
            conn.reply(ReplyHeader { xid, zxid: 0, err: err.code() }, &Response::Sasl(None));
            conn.close();
        }
    }
}

fn add_ids(conn: &Conn, ids: Vec<Id>) {
    let mut all: Vec<Id> = conn.auth.borrow().to_vec();
    for id in ids {
        if !all.contains(&id) {
            all.push(id);
        }
    }
    *conn.auth.borrow_mut() = all.into();
}

/// One client connection, shared by its reader and writer tasks and the apply path.
pub struct Conn {
    pub id: u64,
    pub peer: IpAddr,
    pub remote: SocketAddr,
    /// Wall-clock ms when the connection was accepted (`cons`: est).
    pub established_ms: i64,
    /// The negotiated session timeout, once the session is established.
    pub timeout_ms: Cell<i32>,
    /// Monotonic ms (since the server started) the client was last heard from.
    pub last_heard_ms: Cell<i64>,
    /// When the latest socket read of this connection completed (`heard`): the stamp of
    /// every request that read completed, the start of its latency and stage timings (one
    /// clock read per socket read, shared by the requests it carried).
    read_at: Cell<Instant>,
    /// ZooKeeper's per-connection statistics (`cons`, reset by `crst`).
    pub counters: RefCell<ConnStats>,
    pub session_id: Cell<i64>,
    pub read_only_flag: Cell<Option<bool>>,
    pub auth: RefCell<Arc<[Id]>>,
    /// This connection's SASL exchange, from its first sasl request (`Core::answer_sasl`).
    pub sasl: RefCell<Option<ServerExchange>>,
    /// Requests waiting for their turn: changed only through `enqueue` / `dequeue_if` /
    /// `forget_pending`, which keep this core's count of requests in process.
    pending: RefCell<VecDeque<Pending>>,
    /// The reads waiting since this connection's last request sent to the pipeline core.
    fences: RefCell<Fences>,
    pub out: RefCell<OutQueue>,
    /// When the replies in `out` were queued, oldest first: (time, replies queued then);
    /// at most `REPLY_STAMPS_MAX` entries.
    reply_stamps: RefCell<VecDeque<(Instant, u64)>>,
    pub writer_wake: Semaphore,
    pub reader_wake: Semaphore,
    pub closing: Cell<bool>,
    /// Set when a reply that closes the connection is queued: nothing after it is read.
    pub stop_reading: Cell<bool>,
    stats: Arc<Stats>,
    core: u16,
    /// This connection's place in the server's connection limits, given back when it is dropped.
    _permit: ConnPermit,
}

impl Conn {
    pub fn new(id: u64, remote: SocketAddr, stats: Arc<Stats>, core: u16, permit: ConnPermit) -> Conn {
        let peer = remote.ip();
        let ip_id: Arc<[Id]> = vec![Id { scheme: acl::SCHEME_IP.to_string(), id: peer.to_string() }].into();
        let established_ms = super::clock::wall_clock_ms_for_dates();
        Conn {
            id,
            peer,
            remote,
            established_ms,
            timeout_ms: Cell::new(0),
            last_heard_ms: Cell::new(stats.uptime_ms()),
            read_at: Cell::new(Instant::now()),
            counters: RefCell::new(ConnStats::default()),
            session_id: Cell::new(0),
            read_only_flag: Cell::new(None),
            auth: RefCell::new(ip_id),
            sasl: RefCell::new(None),
            pending: RefCell::new(VecDeque::new()),
            fences: RefCell::new(Fences::default()),
            out: RefCell::new(OutQueue::default()),
            reply_stamps: RefCell::new(VecDeque::new()),
            writer_wake: Semaphore::new(0),
            reader_wake: Semaphore::new(0),
            closing: Cell::new(false),
            stop_reading: Cell::new(false),
            stats,
            core,
            _permit: permit,
        }
    }

    /// Queues a request behind those before it (one more request in process on this core).
    pub fn enqueue(&self, p: Pending) {
        self.pending.borrow_mut().push_back(p);
        stats::add(&self.core_stats().outstanding, 1);
    }

    /// A request answered on this core (a read, a ping, or an error owed in order) waits
    /// behind the last request still at the pipeline core (a connect, write or sync): a write
    /// sent now may need a seal or a guard (`ToPipeline::Write::fence`, `server::fence`).
    fn answer_waits_behind_a_commit(&self) -> bool {
        // Only the last one decides: an answer is queued only behind a request at the pipeline.
        matches!(self.pending.borrow().back(), Some(Pending::Local { .. } | Pending::Error { .. }))
    }

    /// Takes the head of the queue if `take` wants it.
    fn dequeue_if(&self, take: impl FnOnce(&Pending) -> bool) -> Option<Pending> {
        let mut pending = self.pending.borrow_mut();
        if !pending.front().is_some_and(take) {
            return None;
        }
        let head = pending.pop_front();
        stats::sub(&self.core_stats().outstanding, 1);
        head
    }

    /// The connection is gone: what it had queued is no longer in process.
    fn forget_pending(&self) {
        let left = std::mem::take(&mut *self.pending.borrow_mut()).len() as u64;
        stats::sub(&self.core_stats().outstanding, left);
    }

    /// This connection's core's counters.
    pub fn core_stats(&self) -> &CoreStats {
        &self.stats.cores[self.core as usize]
    }

    /// Asks the writer to flush what is queued and then close the socket.
    pub fn close(&self) {
        self.closing.set(true);
        self.writer_wake.signal(1);
        self.reader_wake.signal(1);
    }

    /// Queues a reply. Its queueing time (`Stage::ReplyToSocket`) is stamped once per group of
    /// replies queued behind each other: a reply queued while others still wait in `out`
    /// shares the oldest one's stamp (an upper bound of its wait, and one clock read per
    /// socket write instead of one per reply).
    fn reply(&self, hdr: ReplyHeader, body: &Response) {
        let waiting = !self.out.borrow().is_empty();
        self.out.borrow_mut().reply(&hdr, body);
        self.count_sent();
        let mut stamps = self.reply_stamps.borrow_mut();
        let full = stamps.len() >= REPLY_STAMPS_MAX;
        match stamps.back_mut() {
            Some((_, n)) if full || waiting => *n += 1,
            _ => stamps.push_back((Instant::now(), 1)),
        }
    }

    /// How many reply stamps cover what `out` holds now (the writer takes them with it).
    pub fn reply_stamps_queued(&self) -> usize {
        self.reply_stamps.borrow().len()
    }

    /// The socket write that carried the first `stamps` reply stamps completed.
    pub fn replies_written(&self, stamps: usize) {
        let now = Instant::now();
        let hist = self.core_stats().stages.get(Stage::ReplyToSocket);
        let mut q = self.reply_stamps.borrow_mut();
        let carried = stamps.min(q.len());
        for (at, n) in q.drain(..carried) {
            hist.record_us_n(now.saturating_duration_since(at).as_micros() as u64, n);
        }
    }

    /// A packet (reply, ConnectResponse or watch event) was queued for the client.
    pub fn count_sent(&self) {
        self.core_stats().count_sent();
        self.counters.borrow_mut().sent += 1;
    }

    /// A packet arrived from the client (when is noted per socket read: `heard`).
    pub fn count_received(&self) {
        self.core_stats().count_received();
        self.counters.borrow_mut().received += 1;
    }

    /// Bytes arrived from the client now: the one clock read of this socket read, which
    /// stamps the requests it completes (`read_at`) and the connection's liveness.
    pub fn heard(&self) {
        let now = Instant::now();
        self.read_at.set(now);
        self.last_heard_ms.set(now.saturating_duration_since(self.stats.started).as_millis() as i64);
    }

    /// Request `xid` (`op`), read at `since`, was answered with `zxid`: the core's latency
    /// and this connection's statistics (one clock read for both, returned for the caller's
    /// stage timing).
    fn answered(&self, op: OpCode, xid: i32, zxid: i64, since: Instant) -> Instant {
        self.answered_at(op, xid, zxid, since, Instant::now())
    }

    /// As `answered`, with the clock read `now` the caller made (a commit batch's replies
    /// share the one read when the batch was taken: their latency ends there).
    fn answered_at(&self, op: OpCode, xid: i32, zxid: i64, since: Instant, now: Instant) -> Instant {
        let latency = now.saturating_duration_since(since);
        self.core_stats().record_latency(latency);
        let now_ms = now.saturating_duration_since(self.stats.started).as_millis() as i64;
        self.counters.borrow_mut().answered(op, xid, zxid, now_ms, latency.as_millis() as u64);
        now
    }

    /// This connection as `cons` lists it.
    pub fn info(&self) -> ConnInfo {
        let c = self.counters.borrow();
        let (min, avg, max) = c.latencies_ms();
        ConnInfo {
            remote: self.remote,
            queued: self.pending.borrow().len() as u64,
            received: c.received,
            sent: c.sent,
            session_id: self.session_id.get(),
            last_op: c.last_op,
            established_ms: self.established_ms,
            timeout_ms: self.timeout_ms.get(),
            last_cxid: c.last_cxid,
            last_zxid: c.last_zxid,
            last_response_ms: c.last_response_ms,
            last_latency_ms: c.last_latency_ms,
            min_latency_ms: min,
            avg_latency_ms: avg,
            max_latency_ms: max,
            last_heard_ms: self.last_heard_ms.get(),
        }
    }

    /// The ConnectRequest is read and its session not established yet.
    pub fn establishing(&self) -> bool {
        matches!(self.pending.borrow().front(), Some(Pending::Connect))
    }

    /// True while the reader should wait before reading more.
    pub fn backlogged(&self) -> bool {
        self.pending.borrow().len() >= CONN_PENDING_MAX || self.out.borrow().len() >= CONN_OUT_BYTES_MAX
    }
}

/// The state of one client core.
pub struct Core {
    pub id: u16,
    /// TLS on the client port, when configured (`connection.rs` runs the handshakes).
    pub tls: Option<Arc<crate::tls::TlsContext>>,
    pub config: Arc<Config>,
    /// The root of the committed tree from the last commit batch (reads are answered from it).
    pub tree: RefCell<DataTree>,
    /// While a write's reply is taken: the nodes its batch kept for the reads waiting before
    /// it, as they were at that write (`Commit::Txn::captured`); such a read is answered from
    /// those, not from the root.
    captured: RefCell<Vec<Captured>>,
    pub watches: RefCell<WatchIndex>,
    /// By connection number: numbers are this core's own, never a client's, so a cheap hash
    /// does (a lookup per reply).
    pub conns: RefCell<ConnMap>,
    /// maxCnxns and maxClientCnxns, counted across all client cores.
    pub conn_limits: Arc<ConnLimits>,
    /// Connections without a session yet, by accept order: (monotonic deadline, id), closed
    /// at the deadline if still without one (nio.sessionlessCnxnTimeout).
    pub sessionless: RefCell<VecDeque<(i64, u64)>>,
    /// Connections refused by a limit since the last log line about it (logs are rate-limited).
    pub refused: Cell<u64>,
    pub refused_logged_ms: Cell<i64>,
    /// TLS handshakes that failed since the last log line about them (rate-limited too).
    pub tls_failed: Cell<u64>,
    pub tls_failed_logged_ms: Cell<i64>,
    outbox: RefCell<Vec<ToPipeline>>,
    outbox_wake: Semaphore,
    touched: RefCell<crate::id_hash::IdSet<i64>>,
    next_conn: Cell<u64>,
    /// Connections whose writer has new bytes, signalled once per batch.
    dirty: RefCell<Vec<Rc<Conn>>>,
    pub stats: Arc<Stats>,
    /// What this server is; NotServing while an ensemble member is outside a quorum (then
    /// connections are refused, four-letter words aside).
    pub mode: Cell<ServerMode>,
    /// This core's inspections in flight (`inspect`): token → where the answer goes.
    inspections: RefCell<HashMap<u64, LocalSender<Arc<Inspected>>>>,
    next_inspection: Cell<u64>,
    /// `INSPECTIONS_PER_CORE_MAX` permits.
    inspection_slots: Semaphore,
    /// While a commit batch is taken: the zxid of its last txn before the item in hand, the
    /// header zxid of a read answered in its place there (`fence`).
    position_zxid: Cell<Option<i64>>,
}

impl Core {
    pub fn conn_ref(&self, conn: &Conn) -> ConnRef {
        ConnRef { core: self.id, conn: conn.id }
    }

    pub fn next_conn_id(&self) -> u64 {
        let id = self.next_conn.get();
        self.next_conn.set(id + 1);
        id
    }

    /// Queues a message for the pipeline core (sent in batches by the forwarder task).
    pub fn send(&self, msg: ToPipeline) {
        self.outbox.borrow_mut().push(msg);
        self.outbox_wake.signal(1);
    }

    /// Requests one connection may hold in process when the server is short of room: the
    /// globalOutstandingLimit (a leader of more than 2 voters divides it by voters − 1, as
    /// ZooKeeper's leader does) shared by the server's connections, at least 1; and the limit.
    pub fn fair_share(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut limit = self.config.global_outstanding_limit as u64;
        let voters = self.config.servers.iter().filter(|s| !s.observer).count() as u64;
        if self.mode.get() == ServerMode::Leader && voters > 2 {
            limit /= voters - 1;
        }
        let conns: u64 = self.stats.cores.iter().map(|c| c.connections.load(Relaxed)).sum();
        ((limit / conns.max(1)).max(1), limit)
    }

    /// ZooKeeper's throttle (globalOutstandingLimit), made fair (issue 17): a connection with
    /// requests in process is not read while it holds its fair share (`fair_share`) or more and
    /// the server has no room for another share; it is read again as its own requests are
    /// answered. A connection below its share is read whatever the server holds, so nobody is
    /// held to one request at a time, and in process stays below about twice the limit.
    /// (ZooKeeper stops every connection with a request in process while the server is over
    /// the limit; whichever connection read first when it dipped under kept the room: measured
    /// 24× between connections' p99s through a leader.) The reader also yields after each
    /// share it decodes (`connection::reader`), so connections woken together take turns.
    /// `(share, limit)` is what `fair_share` returned just before.
    pub fn throttled(&self, conn: &Conn, (share, limit): (u64, u64)) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let pending = conn.pending.borrow().len() as u64;
        if pending == 0 {
            return false;
        }
        if pending < share {
            return false;
        }
        let in_process: u64 = self.stats.cores.iter().map(|c| c.outstanding.load(Relaxed)).sum();
        in_process + share > limit
    }

    /// Connection `id` was just accepted: it must have a session by its deadline. Settled
    /// entries at the front (closed, or with a session) go first, so the queue holds little
    /// more than the connections accepted within one nio.sessionlessCnxnTimeout.
    pub fn watch_sessionless(&self, id: u64) {
        let deadline = super::clock::mono_ms().saturating_add(self.config.sessionless_cnxn_timeout_ms as i64);
        let conns = self.conns.borrow();
        let mut q = self.sessionless.borrow_mut();
        while q.front().is_some_and(|(_, c)| conns.get(c).is_none_or(|c| c.session_id.get() != 0)) {
            q.pop_front();
        }
        q.push_back((deadline, id));
    }

    pub fn touch(&self, session_id: i64) {
        if session_id != 0 {
            self.touched.borrow_mut().insert(session_id);
        }
    }

    pub fn my_stats(&self) -> &CoreStats {
        &self.stats.cores[self.id as usize]
    }

    /// The connection count, on every connection opened or closed (cheap: no walk over
    /// connections, which `publish_gauges` does periodically).
    pub fn publish_connections(&self) {
        self.my_stats().connections.store(self.conns.borrow().len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Connections, outstanding requests and watches (and on core 0 the tree and the mode),
    /// for the four-letter words of any core and the admin server: every half tick, on a
    /// change of mode, and before this core answers a four-letter word.
    pub fn publish_gauges(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let conns = self.conns.borrow();
        let st = self.my_stats();
        st.connections.store(conns.len() as u64, Relaxed);
        st.watches.store(self.watches.borrow().watch_count() as u64, Relaxed);
        if self.id == 0 {
            let tree = self.tree.borrow();
            self.stats.zxid.store(tree.last_zxid(), Relaxed);
            self.stats.znodes.store(tree.node_count() as u64, Relaxed);
            self.stats.ephemerals.store(tree.ephemeral_count() as u64, Relaxed);
            self.stats.sessions.store(tree.session_count() as u64, Relaxed);
            self.stats.data_bytes.store(tree.approximate_data_size(), Relaxed);
            self.stats.mode.store(self.mode.get().index(), Relaxed);
        }
    }

    /// Every core's report on `what`, collected by the pipeline core (at most
    /// `INSPECTIONS_PER_CORE_MAX` in flight; more wait). Empty if the server is stopping.
    pub async fn inspect(&self, what: Inspect) -> Arc<Inspected> {
        let Ok(_slot) = self.inspection_slots.acquire_permit(1).await else {
            return Arc::default();
        };
        let token = self.next_inspection.get();
        self.next_inspection.set(token + 1);
        let (tx, rx) = local_channel::new_bounded(1);
        self.inspections.borrow_mut().insert(token, tx);
        self.send(ToPipeline::Inspect { asker: self.id, token, what });
        rx.recv().await.unwrap_or_default()
    }

    /// This core's part of an inspection.
    fn report(&self, what: Inspect) -> CoreReport {
        let conns = self.conns.borrow();
        let mut report = CoreReport { core: self.id, ..CoreReport::default() };
        if what == Inspect::ResetConnections {
            for c in conns.values() {
                c.counters.borrow_mut().reset();
            }
            return report;
        }
        let mut ids: Vec<u64> = conns.keys().copied().collect();
        ids.sort_unstable();
        report.conns = ids.iter().filter_map(|id| conns.get(id)).map(|c| c.info()).collect();
        match what {
            Inspect::Watches => {
                let session_of = |id: &u64| conns.get(id).map(|c| c.session_id.get()).unwrap_or(0);
                let mut watches: Vec<(String, Vec<i64>)> = self
                    .watches
                    .borrow()
                    .data_watches()
                    .map(|(p, ids)| (p.clone(), ids.iter().map(session_of).collect()))
                    .collect();
                watches.sort();
                report.data_watches = watches;
            }
            Inspect::Dump => {
                let tree = self.tree.borrow();
                let mut sessions: Vec<(i64, i32)> = tree.sessions().map(|(id, e)| (id, e.timeout_ms)).collect();
                sessions.sort_unstable();
                if self.id == 0 {
                    for &(id, _) in &sessions {
                        let mut paths: Vec<String> = tree.ephemerals_of(id).map(|p| p.to_string()).collect();
                        if !paths.is_empty() {
                            paths.sort();
                            report.ephemerals.push((id, paths));
                        }
                    }
                }
                report.sessions = sessions;
            }
            Inspect::Connections | Inspect::ResetConnections => {}
        }
        report
    }

    fn mark_dirty(&self, conn: &Rc<Conn>) {
        self.dirty.borrow_mut().push(conn.clone());
    }

    fn flush_dirty(&self) {
        for c in self.dirty.borrow_mut().drain(..) {
            c.writer_wake.signal(1);
        }
    }

    fn last_zxid(&self) -> i64 {
        self.tree.borrow().last_zxid()
    }

    /// The zxid a reply without a txn of its own carries (a read, an owed error, a sync, a
    /// refused write): the last txn before the item of the batch in hand, or the root's.
    fn answer_zxid(&self) -> i64 {
        self.position_zxid.get().unwrap_or_else(|| self.last_zxid())
    }

    /// A request arrived on `conn` (after the handshake). Decides where it goes. Its timings
    /// start at `conn.read_at`, when the socket read that completed it returned.
    pub fn on_request(&self, conn: &Rc<Conn>, xid: i32, req: Request) {
        self.touch(conn.session_id.get());
        if let Some(doomed) = &self.config.testing_panic_on_path {
            // A test's fault hook (refused at start-up unless RINGKEEPER_TESTING=1).
            if let Request::GetData { path, .. } | Request::Exists { path, .. } = &req {
                if path == doomed {
                    panic!("ringkeeper.testing.panicOnPath: client core {} read {path}", self.id);
                }
            }
        }
        if let Request::Auth { scheme, auth, .. } = &req {
            // As in ZooKeeper, auth takes effect on receipt, so a write sent after it carries
            // the new ids, and is answered at once, ahead of the requests still queued (nothing
            // is read before the ConnectResponse, so it never overtakes that).
            let ok = self.authenticate(conn, scheme, auth);
            self.answer_auth(conn, xid, ok);
            conn.writer_wake.signal(1);
            return;
        }
        if let Request::Sasl { token } = &req {
            // Like auth, answered on receipt (ZooKeeperServer.processSasl).
            self.answer_sasl(conn, xid, token.as_deref().unwrap_or(&[]));
            conn.writer_wake.signal(1);
            return;
        }
        if !self.holds_enforced_scheme(conn) {
            // AuthenticationHelper.enforceAuthentication: every request but auth and sasl
            // (pings and closeSession too) of a connection without an id of the enforced
            // schemes is answered SessionClosedRequireSaslAuth with zxid 0, and the
            // connection closes (the session lives on until it expires, as in ZooKeeper).
            tracing::error!(
                "connection {} ({}): session 0x{:x} holds no id of the enforced scheme(s) {:?}; closing",
                conn.id,
                conn.peer,
                conn.session_id.get(),
                self.config.enforce_auth_schemes
            );
            conn.stop_reading.set(true);
            let err = ErrorCode::SessionClosedRequireSaslAuth.code();
            conn.reply(ReplyHeader { xid, zxid: 0, err }, &Response::None);
            conn.close();
            return;
        }
        let opcode = req.opcode();
        let req = match WriteOp::from_request(req) {
            Err(req) => req,
            Ok(op) => {
                let fence = conn.fences.borrow_mut().fence(&op, conn.answer_waits_behind_a_commit());
                let read_at = conn.read_at.get();
                let audit = if audit::enabled() { AuditedWrite::of(&op) } else { None };
                conn.enqueue(Pending::Write { xid, opcode, at: read_at, audit });
                let auth = conn.auth.borrow().clone();
                self.send(ToPipeline::Write { conn: self.conn_ref(conn), xid, op, auth, fence, read_at });
                return;
            }
        };
        if let Request::Sync { path } = &req {
            conn.fences.borrow_mut().sent();
            conn.enqueue(Pending::Sync { xid, at: conn.read_at.get() });
            self.send(ToPipeline::Sync { conn: self.conn_ref(conn), xid, path: path.clone() });
            return;
        }
        let auth = conn.auth.borrow().clone();
        let at = conn.read_at.get();
        if conn.pending.borrow().is_empty() {
            let op = req.opcode();
            conn.fences.borrow_mut().watch_asked(&req);
            self.answer_local(conn, xid, req, &auth);
            let now = conn.answered(op, xid, self.last_zxid(), at);
            self.read_answered(op, at, now);
            conn.writer_wake.signal(1);
        } else {
            conn.fences.borrow_mut().read_waits(&req);
            conn.enqueue(Pending::Local { xid, req, auth, at });
        }
    }

    /// An AuthPacket: adds the ids it proves to the connection; false for a scheme this
    /// server does not offer. As in ZooKeeper, `ip` proves the connection's own address
    /// (which every connection holds from the start), whatever its bytes.
    fn authenticate(&self, conn: &Rc<Conn>, scheme: &str, auth: &[u8]) -> bool {
        let ids = match scheme {
            acl::SCHEME_DIGEST => Some(acl::digest_auth_ids(auth, self.config.super_digest.as_deref())),
            acl::SCHEME_IP => Some(Vec::new()),
            _ => None,
        };
        let Some(ids) = ids else {
            tracing::warn!("auth failed for scheme '{scheme}' from {}", conn.peer);
            return false;
        };
        add_ids(conn, ids);
        true
    }

    /// Whether `conn` may send requests other than auth and sasl: enforce.auth is off, or
    /// the connection holds an id of one of its schemes.
    fn holds_enforced_scheme(&self, conn: &Conn) -> bool {
        let schemes = &self.config.enforce_auth_schemes;
        schemes.is_empty() || conn.auth.borrow().iter().any(|id| schemes.contains(&id.scheme))
    }

    /// A sasl request (GetSASLRequest), as ZooKeeperServer.processSasl: without a JAAS
    /// Server section, a null token (err 0). Otherwise the token goes to the connection's
    /// exchange (DIGEST-MD5 here at once; a GSSAPI step on the blocking pool, answered when it
    /// is done): a challenge back, or, once the client proved who it is, the `sasl:` id (and
    /// `super` for `superUser`) on the connection and the final token back (rspauth; GSSAPI's
    /// is null). A failed exchange is answered AuthFailed (SessionClosedRequireSaslAuth when
    /// sasl is enforced) with a null token, and the connection closes. Replies carry zxid 0.
    fn answer_sasl(&self, conn: &Rc<Conn>, xid: i32, token: &[u8]) {
        let Some(sasl) = &self.config.sasl else {
            return conn.reply(ReplyHeader { xid, zxid: 0, err: 0 }, &Response::Sasl(None));
        };
        let required = self.config.enforce_auth_schemes.iter().any(|s| s == acl::SCHEME_SASL);
        let exchange = conn.sasl.borrow_mut().take().unwrap_or_else(|| sasl.new_exchange());
        match (exchange, &sasl.mechanism) {
            (ServerExchange::DigestMd5(mut server), Mechanism::DigestMd5(users)) => {
                let step = server.step(token, |user| users.password(user));
                *conn.sasl.borrow_mut() = Some(ServerExchange::DigestMd5(server));
                let outcome = match step {
                    Ok(Step::Challenge(t)) => SaslOutcome::Challenge(t),
                    Ok(Step::Authenticated { token, username }) => SaslOutcome::Authenticated(username, Some(token)),
                    Err(DigestError::Finished) => SaslOutcome::AfterTheEnd,
                    Err(e) => SaslOutcome::Failed(e.to_string()),
                };
                sasl_answer(conn, xid, sasl, required, outcome);
            }
            (ServerExchange::Gssapi(mut server), _) => {
                *conn.sasl.borrow_mut() = Some(ServerExchange::InFlight);
                let (conn, sasl, token) = (conn.clone(), sasl.clone(), token.to_vec());
                glommio::spawn_local(async move {
                    let (server, step) = super::offcore::run(move || {
                        let step = server.step(&token);
                        (server, step)
                    })
                    .await;
                    *conn.sasl.borrow_mut() = Some(ServerExchange::Gssapi(server));
                    if conn.closing.get() {
                        return;
                    }
                    let outcome = match step {
                        Ok(GssStep::Challenge(t)) => SaslOutcome::Challenge(t),
                        Ok(GssStep::Authenticated { principal }) => SaslOutcome::Authenticated(principal, None),
                        Err(GssError::Finished) => SaslOutcome::AfterTheEnd,
                        Err(e) => SaslOutcome::Failed(e.to_string()),
                    };
                    sasl_answer(&conn, xid, &sasl, required, outcome);
                    conn.writer_wake.signal(1);
                })
                .detach();
            }
            // A token while a GSSAPI step runs: the client did not wait for its answer.
            (ServerExchange::InFlight, _) | (ServerExchange::DigestMd5(_), Mechanism::Gssapi(_)) => {
                sasl_answer(conn, xid, sasl, required, SaslOutcome::AfterTheEnd)
            }
        }
    }

    /// The reply echoes the auth packet's `xid` (clients send -4) with zxid 0; AuthFailed
    /// closes the connection.
    fn answer_auth(&self, conn: &Rc<Conn>, xid: i32, ok: bool) {
        let err = if ok { 0 } else { ErrorCode::AuthFailed.code() };
        conn.reply(ReplyHeader { xid, zxid: 0, err }, &Response::None);
        if !ok {
            conn.close();
        }
    }

    /// A request the decoder rejected: its error reply keeps its place in the order.
    pub fn on_bad_request(&self, conn: &Rc<Conn>, xid: i32, err: ErrorCode, close: bool) {
        if close {
            conn.stop_reading.set(true);
        }
        if conn.pending.borrow().is_empty() {
            self.answer_error(conn, xid, err, close);
            conn.writer_wake.signal(1);
        } else {
            conn.fences.borrow_mut().error_waits();
            conn.enqueue(Pending::Error { xid, err, close });
        }
    }

    /// A request answered on this core (`op`, read at `at`) had its reply queued by `now`: a
    /// read's time (`Stage::Read`; pings are not reads).
    fn read_answered(&self, op: OpCode, at: Instant, now: Instant) {
        if op != OpCode::Ping {
            self.my_stats().stages.get(Stage::Read).record(now.saturating_duration_since(at));
        }
    }

    fn answer_error(&self, conn: &Rc<Conn>, xid: i32, err: ErrorCode, close: bool) {
        // A request ZooKeeper refuses outright (unknown opcode) is answered with zxid -1.
        let zxid = if close { -1 } else { self.answer_zxid() };
        conn.reply(ReplyHeader { xid, zxid, err: err.code() }, &Response::None);
        if close {
            conn.close();
        }
    }

    /// Answers what can be answered at the head of `conn`'s queue; nothing once the
    /// connection is closing (after closeSession or a closing error, ZooKeeper answers no more).
    fn drain(&self, conn: &Rc<Conn>) {
        self.answer_waiting(conn);
        conn.reader_wake.signal(1);
    }

    /// Answers the reads and owed errors at the head of `conn`'s queue, from the root this core
    /// holds (or a node the write being taken kept, `captured`), with `answer_zxid` in their
    /// headers.
    fn answer_waiting(&self, conn: &Rc<Conn>) {
        while !conn.closing.get() {
            let next = conn.dequeue_if(|p| matches!(p, Pending::Local { .. } | Pending::Error { .. }));
            match next {
                Some(Pending::Local { xid, req, auth, at }) => {
                    let op = req.opcode();
                    self.answer_local(conn, xid, req, &auth);
                    let now = conn.answered(op, xid, self.answer_zxid(), at);
                    self.read_answered(op, at, now);
                }
                Some(Pending::Error { xid, err, close }) => self.answer_error(conn, xid, err, close),
                _ => break,
            }
        }
    }

    /// Takes the head of `conn`'s queue for an answer from the pipeline core. None when the
    /// connection is closing (nobody waits), or when the head is not what was answered: the
    /// session moved, ended or never began while the request was in flight, and the
    /// connection cannot be answered in order any more, so it is closed.
    fn take_head(
        &self,
        conn: &Rc<Conn>,
        answered: &'static str,
        xid: i32,
        is_it: impl FnOnce(&Pending) -> bool,
    ) -> Option<Pending> {
        if conn.closing.get() {
            return None;
        }
        // A batch holds two items of one connection with reads waiting between them only
        // under their guard, or pings alone (`fence`): they are answered here, in their place.
        self.answer_waiting(conn);
        if conn.closing.get() {
            return None;
        }
        if let Some(head) = conn.dequeue_if(is_it) {
            return Some(head);
        }
        tracing::error!(
            "connection {} ({}): {answered} {xid} does not match the request it waits for; closing",
            conn.id,
            conn.peer
        );
        conn.close();
        None
    }

    /// Answers a request from this core's replica and watch index.
    fn answer_local(&self, conn: &Rc<Conn>, xid: i32, req: Request, auth: &Arc<[Id]>) {
        let zxid = self.answer_zxid();
        let ok = |body: Response| conn.reply(ReplyHeader { xid, zxid, err: 0 }, &body);
        let err = |e: ErrorCode| conn.reply(ReplyHeader { xid, zxid, err: e.code() }, &Response::None);
        match req {
            Request::Ping => conn.reply(ReplyHeader { xid: XID_PING, zxid, err: 0 }, &Response::None),
            Request::SetWatches { relative_zxid, data, exist, child } => {
                self.set_watches(conn, relative_zxid, &data, &exist, &child, &[], &[]);
                conn.reply(ReplyHeader { xid, zxid, err: 0 }, &Response::None);
            }
            Request::SetWatches2 { relative_zxid, data, exist, child, persistent, persistent_recursive } => {
                self.set_watches(conn, relative_zxid, &data, &exist, &child, &persistent, &persistent_recursive);
                conn.reply(ReplyHeader { xid, zxid, err: 0 }, &Response::None);
            }
            Request::AddWatch { path, mode } => {
                let recursive = match mode {
                    add_watch_mode::PERSISTENT => false,
                    add_watch_mode::PERSISTENT_RECURSIVE => true,
                    // Apache fails to convert the mode and answers MarshallingError.
                    _ => return err(ErrorCode::MarshallingError),
                };
                self.watches.borrow_mut().add_persistent(&path, conn.id, recursive);
                ok(Response::ErrorResponse(0))
            }
            Request::RemoveWatches { path, watcher_type: wt } => {
                match self.watches.borrow_mut().remove_watch(&path, conn.id, wt) {
                    Ok(true) => ok(Response::None),
                    Ok(false) => err(ErrorCode::NoWatcher),
                    Err(WatchError::UnknownWatcherType(_)) => err(ErrorCode::MarshallingError),
                }
            }
            Request::CheckWatches { path, watcher_type: wt } => {
                match self.watches.borrow().has_watch(&path, conn.id, wt) {
                    Ok(true) => ok(Response::None),
                    Ok(false) => err(ErrorCode::NoWatcher),
                    Err(WatchError::UnknownWatcherType(_)) => err(ErrorCode::MarshallingError),
                }
            }
            // Answered on receipt (`on_request`); never queued.
            Request::Sasl { .. } => ok(Response::Sasl(None)),
            Request::WhoAmI => {
                let infos = auth
                    .iter()
                    .map(|id| {
                        let user = match id.scheme.as_str() {
                            acl::SCHEME_DIGEST => id.id.split(':').next().unwrap_or("").to_string(),
                            acl::SCHEME_SUPER => String::new(),
                            _ => id.id.clone(),
                        };
                        (id.scheme.clone(), user)
                    })
                    .collect();
                ok(Response::WhoAmI(infos))
            }
            other => {
                let outcome = {
                    // Only while a write that kept nodes is taken (`take_batch`) is this not empty.
                    let captured = self.captured.borrow();
                    let kept = if captured.is_empty() {
                        None
                    } else {
                        query::one_node_path(&other).and_then(|p| captured.iter().find(|c| &*c.path == p))
                    };
                    match kept {
                        Some(c) => query::read_node(c.entry.as_deref().map(|e| &e.node), &other, auth),
                        None => query::read(&self.tree.borrow(), &other, auth, conn.session_id.get()),
                    }
                };
                match outcome {
                    Some(o) => {
                        match o.watch {
                            Some(WatchRequest::Data(p)) => self.watches.borrow_mut().add_data_watch(&p, conn.id),
                            Some(WatchRequest::Child(p)) => self.watches.borrow_mut().add_child_watch(&p, conn.id),
                            None => {}
                        }
                        match o.result {
                            Ok(body) => ok(body),
                            Err(e) => err(e),
                        }
                    }
                    None => {
                        tracing::warn!("request {other:?} reached the local path; answering MarshallingError");
                        err(ErrorCode::MarshallingError)
                    }
                }
            }
        }
    }

    /// SetWatches(2) on reconnect: fire what the client missed, re-register the rest.
    #[allow(clippy::too_many_arguments)]
    fn set_watches(
        &self,
        conn: &Rc<Conn>,
        relative_zxid: i64,
        data: &[String],
        exist: &[String],
        child: &[String],
        persistent: &[String],
        recursive: &[String],
    ) {
        let tree = self.tree.borrow();
        let mut watches = self.watches.borrow_mut();
        let mut queue = conn.out.borrow_mut();
        let out = queue.buf();
        let mut fire = |ev: i32, p: &str| reply::encode_notification(out, ev, STATE_SYNC_CONNECTED, p);
        for p in data {
            match tree.get(p) {
                None => fire(event_type::NODE_DELETED, p),
                Some(n) if n.mzxid > relative_zxid => fire(event_type::NODE_DATA_CHANGED, p),
                Some(_) => watches.add_data_watch(p, conn.id),
            }
        }
        for p in exist {
            if tree.contains(p) {
                fire(event_type::NODE_CREATED, p);
            } else {
                watches.add_data_watch(p, conn.id);
            }
        }
        for p in child {
            match tree.get(p) {
                None => fire(event_type::NODE_DELETED, p),
                Some(n) if n.pzxid > relative_zxid => fire(event_type::NODE_CHILDREN_CHANGED, p),
                Some(_) => watches.add_child_watch(p, conn.id),
            }
        }
        for p in persistent {
            watches.add_persistent(p, conn.id, false);
        }
        for p in recursive {
            watches.add_persistent(p, conn.id, true);
        }
    }

    /// Takes one committed batch: its root becomes the tree reads are answered from, every
    /// txn's watch events are queued, the replies of this core's requests follow in order, and
    /// the requests waiting behind those replies are answered from the new root (so every
    /// event a read could show is queued ahead of it): after the connection's last reply of
    /// the batch, or, where the batch answers a connection again after them (only under their
    /// guard, or pings alone: `fence`, `commit_queue`), in their place, with the zxid of the
    /// last txn before, a read of a node the write kept (`Commit::Txn::captured`) from that
    /// node as it was at the write.
    fn take_batch(&self, batch: &CommitBatch, sent: Instant) {
        self.position_zxid.set(Some(self.last_zxid()));
        *self.tree.borrow_mut() = batch.root.clone();
        let taken = Instant::now();
        let mut notes: Vec<Notification> = Vec::new();
        let mut answered: Vec<Rc<Conn>> = Vec::new();
        for item in &batch.items {
            match item {
                Commit::Txn { txn, origin, result, changes, captured } => {
                    for ch in changes {
                        {
                            let mut watches = self.watches.borrow_mut();
                            match ch {
                                Change::Created { path, .. } => watches.on_created(path, &mut notes),
                                Change::Deleted { path, .. } => watches.on_deleted(path, &mut notes),
                                Change::DataChanged { path, .. } => watches.on_data_changed(path, &mut notes),
                            }
                        }
                        if !notes.is_empty() {
                            self.deliver(ch, &mut notes);
                        }
                    }
                    if let Some((origin, xid)) = origin {
                        if let Some(conn) = self.my_conn(origin) {
                            self.my_stats()
                                .stages
                                .get(Stage::CommitToCore)
                                .record(taken.saturating_duration_since(sent));
                            if !captured.is_empty() {
                                self.captured.borrow_mut().clone_from(captured);
                            }
                            let replied = self.reply_write(&conn, *xid, txn.header.zxid, result.clone(), taken);
                            if !captured.is_empty() {
                                self.captured.borrow_mut().clear();
                            }
                            if replied {
                                answered.push(conn);
                            }
                        }
                    }
                    self.position_zxid.set(Some(txn.header.zxid));
                }
                Commit::Connected { conn, session_id, timeout_ms, passwd } => {
                    let Some(c) = self.my_conn(conn) else {
                        continue;
                    };
                    if self.take_head(&c, "a session for connect", 0, |p| matches!(p, Pending::Connect)).is_none() {
                        continue;
                    }
                    c.session_id.set(*session_id);
                    let resp = ConnectResponse {
                        protocol_version: 0,
                        timeout_ms: *timeout_ms,
                        session_id: *session_id,
                        passwd: *passwd,
                        read_only: c.read_only_flag.get().map(|_| self.mode.get() == ServerMode::ReadOnly),
                    };
                    crate::proto::connect::encode_connect_response(c.out.borrow_mut().buf(), &resp);
                    c.count_sent();
                    c.timeout_ms.set(*timeout_ms);
                    c.counters.borrow_mut().answered(
                        OpCode::CreateSession,
                        0,
                        self.answer_zxid(),
                        self.stats.uptime_ms(),
                        0,
                    );
                    tracing::debug!("session {session_id:#x} established on connection {} ({})", c.id, c.peer);
                    answered.push(c);
                }
                Commit::SessionExpired { conn } => {
                    let Some(c) = self.my_conn(conn) else {
                        continue;
                    };
                    let resp = ConnectResponse::expired(
                        0,
                        c.read_only_flag.get().map(|_| self.mode.get() == ServerMode::ReadOnly),
                    );
                    crate::proto::connect::encode_connect_response(c.out.borrow_mut().buf(), &resp);
                    c.count_sent();
                    tracing::info!("connection {} from {}: session expired or unknown", c.id, c.peer);
                    c.close();
                }
                Commit::ZxidAhead { conn } | Commit::Close { conn } => {
                    if let Some(c) = self.my_conn(conn) {
                        c.close();
                    }
                }
                Commit::SyncDone { conn, xid, path } => {
                    let Some(c) = self.my_conn(conn) else {
                        continue;
                    };
                    let Some(Pending::Sync { at, .. }) = self.take_head(
                        &c,
                        "the reply to sync",
                        *xid,
                        |p| matches!(p, Pending::Sync { xid: x, .. } if x == xid),
                    ) else {
                        continue;
                    };
                    c.answered_at(OpCode::Sync, *xid, self.answer_zxid(), at, taken);
                    c.reply(
                        ReplyHeader { xid: *xid, zxid: self.answer_zxid(), err: 0 },
                        &Response::Sync { path: path.clone() },
                    );
                    answered.push(c);
                }
                Commit::Rejected { conn, xid, err } => {
                    let Some(c) = self.my_conn(conn) else {
                        continue;
                    };
                    // A write, or (read-only: NotReadOnly) a sync.
                    let Some(pending) = self.take_head(
                        &c,
                        "the rejection of request",
                        *xid,
                        |p| matches!(p, Pending::Write { xid: x, .. } | Pending::Sync { xid: x, .. } if x == xid),
                    ) else {
                        continue;
                    };
                    if let Pending::Write { audit: Some(w), .. } = pending {
                        audit::record(w.events(None, c.session_id.get(), c.peer, users_of(&c.auth.borrow())));
                    }
                    c.reply(ReplyHeader { xid: *xid, zxid: self.answer_zxid(), err: *err }, &Response::None);
                    answered.push(c);
                }
                Commit::Local { conn, xid, result } => {
                    if let Some(c) = self.my_conn(conn) {
                        if self.reply_write(&c, *xid, self.answer_zxid(), result.clone(), taken) {
                            answered.push(c);
                        }
                    }
                }
            }
        }
        self.position_zxid.set(None);
        for c in &answered {
            self.drain(c);
            self.mark_dirty(c);
        }
        self.flush_dirty();
    }

    /// Queues the notifications of one change on their connections: only to a connection
    /// that may READ the node the event is about (ZooKeeper 3.8.4+); the watch is used up
    /// either way.
    fn deliver(&self, change: &Change, notes: &mut Vec<Notification>) {
        let conns = self.conns.borrow();
        for (cid, ev, p) in notes.drain(..) {
            let Some(c) = conns.get(&cid) else { continue };
            if !acl::check(change.acl_for_event(ev), perms::READ, &c.auth.borrow()) {
                tracing::debug!("event {ev} on {p} withheld from connection {cid}: no READ permission");
                continue;
            }
            reply::encode_notification(c.out.borrow_mut().buf(), ev, STATE_SYNC_CONNECTED, &p);
            c.count_sent();
            self.mark_dirty(c);
        }
    }

    fn my_conn(&self, r: &ConnRef) -> Option<Rc<Conn>> {
        if r.core != self.id {
            return None;
        }
        self.conns.borrow().get(&r.conn).cloned()
    }

    /// Replies to write `xid`; true if it was the connection's next reply (the caller then
    /// answers what waits behind it). `now`: when its commit batch was taken, where the
    /// write's latency ends.
    fn reply_write(&self, conn: &Rc<Conn>, xid: i32, zxid: i64, result: OpResult, now: Instant) -> bool {
        let opcode = match self.take_head(
            conn,
            "the reply to write",
            xid,
            |p| matches!(p, Pending::Write { xid: x, .. } if *x == xid),
        ) {
            Some(Pending::Write { opcode, at, audit, .. }) => {
                conn.answered_at(opcode, xid, zxid, at, now);
                if let Some(w) = audit {
                    audit::record(w.events(
                        Some(&result),
                        conn.session_id.get(),
                        conn.peer,
                        users_of(&conn.auth.borrow()),
                    ));
                }
                opcode
            }
            _ => return false,
        };
        let (err, body) = write_response(opcode, result);
        conn.reply(ReplyHeader { xid, zxid, err }, &body);
        if opcode == OpCode::CloseSession {
            conn.session_id.set(0);
            conn.close();
        }
        true
    }

    /// A connection is gone: forget it, its watches, and tell the pipeline.
    pub fn on_conn_closed(&self, conn: &Rc<Conn>) {
        self.conns.borrow_mut().remove(&conn.id);
        self.watches.borrow_mut().remove_conn(conn.id);
        self.publish_connections();
        conn.forget_pending();
        self.send(ToPipeline::Detached { conn: self.conn_ref(conn) });
    }
}

/// Closes connections still without a session at their deadline (ZooKeeper's NIO server
/// closes them after nio.sessionlessCnxnTimeout): connections that never send a
/// ConnectRequest, or send part of one, would otherwise hold memory and a descriptor forever.
async fn close_sessionless(core: &Rc<Core>) {
    let timeout_ms = core.config.sessionless_cnxn_timeout_ms;
    let every = Duration::from_millis((timeout_ms / 4).clamp(1, SESSIONLESS_CHECK_MS_MAX));
    loop {
        glommio::timer::sleep(every).await;
        let now = super::clock::mono_ms();
        loop {
            let due = {
                let mut q = core.sessionless.borrow_mut();
                match q.front() {
                    Some(&(deadline, id)) if deadline <= now => {
                        q.pop_front();
                        Some(id)
                    }
                    _ => None,
                }
            };
            let Some(id) = due else { break };
            let conn = core.conns.borrow().get(&id).cloned();
            if let Some(c) = conn.filter(|c| c.session_id.get() == 0 && !c.closing.get()) {
                tracing::info!(
                    "connection {} from {}: no session after {timeout_ms} ms (nio.sessionlessCnxnTimeout); closing",
                    c.id,
                    c.peer
                );
                c.close();
            }
        }
    }
}

/// Answers the admin server's questions: each ring of the doorbell means questions are
/// queued (at most `admin::ADMIN_INSPECTIONS_QUEUED_MAX`); each is collected like a
/// four-letter word's and answered on its own channel (an admin thread that gave up is gone).
async fn answer_admin(core: &Rc<Core>, end: super::admin::InspectorEnd) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let super::admin::InspectorEnd { asks, doorbell } = end;
    // SAFETY: the descriptor comes from a std UnixStream we own and give up here.
    let mut doorbell = unsafe { glommio::net::UnixStream::from_raw_fd(doorbell.into_raw_fd()) };
    let mut rings = [0u8; 16];
    loop {
        match futures_lite::AsyncReadExt::read(&mut doorbell, &mut rings).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while let Ok(ask) = asks.try_recv() {
            match ask {
                super::admin::Ask::Inspect { what, reply } => {
                    let core = core.clone();
                    glommio::spawn_local(async move {
                        let inspected = core.inspect(what).await;
                        let _ = reply.try_send(inspected);
                    })
                    .detach();
                }
                super::admin::Ask::Tree { reply } => {
                    let _ = reply.try_send(core.tree.borrow().clone());
                }
                super::admin::Ask::Restore { tree, reply } => core.send(ToPipeline::Restore { tree, reply }),
                super::admin::Ask::RootAcl { reply } => {
                    let acl =
                        core.tree.borrow().get("/").map(|n| n.acl.clone()).unwrap_or_else(|| Arc::from(Vec::new()));
                    let _ = reply.try_send(acl);
                }
            }
        }
    }
}

/// The reply of a write, from its opcode and the result of applying its txn.
fn write_response(opcode: OpCode, result: OpResult) -> (i32, Response) {
    match result {
        OpResult::Error(e) => (e, Response::None),
        OpResult::Created { path, stat, .. } => {
            if opcode == OpCode::Create {
                (0, Response::Create { path })
            } else {
                (0, Response::Create2 { path, stat })
            }
        }
        OpResult::DataSet { stat } | OpResult::AclSet { stat } => (0, Response::Stat(stat)),
        OpResult::Reconfigured { data, stat } => (0, Response::GetData { data: Some(data), stat }),
        OpResult::Deleted
        | OpResult::SessionClosed
        | OpResult::SessionCreated
        | OpResult::SecretSet
        | OpResult::Restored
        | OpResult::Checked => (0, Response::None),
        OpResult::Multi(results) => {
            let results: Vec<MultiResult> = results
                .into_iter()
                .map(|r| match r {
                    OpResult::Created { path, stat, response_type } => {
                        if response_type == OpCode::Create2.code() {
                            MultiResult::Create2 { path, stat }
                        } else {
                            MultiResult::Create { path }
                        }
                    }
                    OpResult::Deleted => MultiResult::Delete,
                    OpResult::DataSet { stat } => MultiResult::SetData { stat },
                    OpResult::Checked => MultiResult::Check,
                    OpResult::Error(e) => MultiResult::Error(e),
                    other => panic!("impossible multi sub-result {other:?}"),
                })
                .collect();
            (reply::multi_header_err(&results), Response::Multi(results))
        }
    }
}

/// A client core's ends of its two channels: to the pipeline core, and from it.
pub type CoreEnds = (core_link::Tx<Vec<ToPipeline>>, core_link::Rx<ToClientCore>);

pub struct CoreParams {
    pub id: u16,
    pub stats: Arc<Stats>,
    pub conn_limits: Arc<ConnLimits>,
    pub config: Arc<Config>,
    /// The committed tree at start-up (built once, by the caller, for every core).
    pub tree: DataTree,
    /// Core 0: the admin server's questions (`admin::Inspector`).
    pub admin_asks: Option<super::admin::InspectorEnd>,
    /// TLS on the client port (secureClientPort and/or portUnification), shared by the cores.
    pub tls: Option<Arc<crate::tls::TlsContext>>,
}

/// Runs one client core until the pipeline core says shutdown.
/// Listens for clients on `addr` (a port of kind `kind`) and starts a connection for each one
/// accepted, until the returned task is dropped (which closes the listening socket).
fn accept_at(core: &Rc<Core>, addr: SocketAddr, kind: connection::Listening) -> Result<glommio::Task<()>, String> {
    let id = core.id;
    let listener =
        super::startup::bind_client_listener(addr).map_err(|e| format!("core {id}: cannot listen on {addr}: {e}"));
    let listener = match listener {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("client core {id}: {e}");
            return Err(e);
        }
    };
    tracing::info!("client core {id} listening on {addr} ({kind:?})");
    let core = core.clone();
    Ok(glommio::spawn_local(async move {
        let mut failures = 0u64;
        let mut logged_ms = i64::MIN;
        loop {
            match listener.accept().await {
                Ok(stream) => connection::start(core.clone(), stream, kind),
                Err(e) => {
                    // Out of file descriptors (EMFILE, ENFILE) or another passing error:
                    // as ZooKeeper, log (at most once per LOG_EVERY_MS), pause accepting
                    // briefly so descriptors can come back, and go on serving.
                    failures += 1;
                    let now = super::clock::mono_ms();
                    if now.saturating_sub(logged_ms) >= LOG_EVERY_MS {
                        tracing::warn!("client core {}: accept failed on {addr} ({failures} times): {e}", core.id);
                        failures = 0;
                        logged_ms = now;
                    }
                    glommio::timer::sleep(Duration::from_millis(ACCEPT_PAUSE_MS)).await;
                }
            }
        }
    }))
}

pub async fn run(params: CoreParams, (to_pipeline, from_pipeline): CoreEnds) -> Result<(), String> {
    let CoreParams { id, stats, conn_limits, config, tree, admin_asks, tls } = params;
    let core = Rc::new(Core {
        id,
        config: config.clone(),
        tree: RefCell::new(tree),
        captured: RefCell::new(Vec::new()),
        watches: RefCell::new(WatchIndex::new()),
        conns: RefCell::new(ConnMap::default()),
        conn_limits,
        sessionless: RefCell::new(VecDeque::new()),
        refused: Cell::new(0),
        refused_logged_ms: Cell::new(i64::MIN),
        tls_failed: Cell::new(0),
        tls_failed_logged_ms: Cell::new(i64::MIN),
        outbox: RefCell::new(Vec::new()),
        outbox_wake: Semaphore::new(0),
        touched: RefCell::new(Default::default()),
        next_conn: Cell::new(1),
        dirty: RefCell::new(Vec::new()),
        stats,
        mode: Cell::new(if config.is_ensemble() { ServerMode::NotServing } else { ServerMode::Standalone }),
        inspections: RefCell::new(HashMap::new()),
        next_inspection: Cell::new(0),
        inspection_slots: Semaphore::new(INSPECTIONS_PER_CORE_MAX as u64),
        position_zxid: Cell::new(None),
        tls,
    });
    // The statistics describe the recovered tree from the start, not only after a half tick.
    core.publish_gauges();
    let connected = Rc::new(Cell::new(false));
    super::startup::warn_while_waiting(format!("client core {id}: connecting to the pipeline core"), connected.clone());
    let to_pipeline = to_pipeline.connect().await;
    let from_pipeline = from_pipeline.connect().await;
    connected.set(true);

    let forwarder = {
        let core = core.clone();
        glommio::spawn_local(async move {
            loop {
                if core.outbox_wake.acquire(1).await.is_err() {
                    break;
                }
                let batch = std::mem::take(&mut *core.outbox.borrow_mut());
                if batch.is_empty() {
                    continue;
                }
                let st = core.my_stats();
                stats::add(&st.up_sent, 1);
                stats::add(&st.up_items, batch.len() as u64);
                if to_pipeline.send(batch).await.is_err() {
                    break;
                }
            }
        })
    };
    let toucher = {
        let core = core.clone();
        let every = Duration::from_millis((config.tick_time_ms as u64 / 2).max(1));
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(every).await;
                let sessions: Vec<i64> = core.touched.borrow_mut().drain().collect();
                if !sessions.is_empty() {
                    core.send(ToPipeline::Touch { sessions });
                }
                core.publish_gauges();
            }
        })
    };
    let sessionless_closer = {
        let core = core.clone();
        glommio::spawn_local(async move { close_sessionless(&core).await })
    };
    let admin_bridge = admin_asks.map(|end| {
        let core = core.clone();
        glommio::spawn_local(async move { answer_admin(&core, end).await })
    });
    // The plain client port (TLS too with portUnification) and the TLS-only secureClientPort.
    let unified = core.tls.as_ref().is_some_and(|t| t.settings.port_unification);
    use connection::Listening;
    let mut ports = vec![(config.client_addr(), if unified { Listening::Unified } else { Listening::Plain })];
    if let Some(addr) = core.tls.as_ref().and_then(|t| t.settings.secure_addr) {
        ports.push((addr, Listening::Tls));
    }
    let mut acceptors = Vec::with_capacity(ports.len());
    for (addr, kind) in ports {
        acceptors.push(Some(accept_at(&core, addr, kind)?));
    }

    while let Some(msg) = from_pipeline.recv().await {
        stats::add(&core.my_stats().down_received, 1);
        match msg {
            ToClientCore::Batches(batches, sent) => {
                let st = core.my_stats();
                for batch in batches.iter() {
                    stats::add(&st.commit_batches, 1);
                    stats::add(&st.commit_items, batch.items.len() as u64);
                    core.take_batch(batch, sent);
                }
            }
            ToClientCore::Serving(mode) => {
                core.mode.set(mode);
                core.publish_gauges();
                if !mode.serving() {
                    let conns: Vec<Rc<Conn>> = core.conns.borrow().values().cloned().collect();
                    tracing::info!("client core {id}: not serving; closing {} connections", conns.len());
                    for c in &conns {
                        c.close();
                    }
                }
            }
            ToClientCore::Reset(tree) => {
                *core.tree.borrow_mut() = tree;
                *core.watches.borrow_mut() = WatchIndex::new();
            }
            ToClientCore::Inspect { asker, token, what } => {
                let report = core.report(what);
                core.send(ToPipeline::Report { asker, token, report });
            }
            ToClientCore::Inspected { asker, token, inspected } => {
                if asker == core.id {
                    if let Some(tx) = core.inspections.borrow_mut().remove(&token) {
                        let _ = tx.try_send(inspected);
                    }
                }
            }
            ToClientCore::Listen(addr) => {
                // As ZooKeeper's `NIOServerCnxnFactory.reconfigure`: the old listening socket
                // is closed whether or not the new bind succeeds; connections stay.
                let kind = if unified { Listening::Unified } else { Listening::Plain };
                drop(std::mem::replace(&mut acceptors[0], accept_at(&core, addr, kind).ok()));
            }
            ToClientCore::Shutdown => break,
        }
    }
    core.inspections.borrow_mut().clear();
    core.inspection_slots.close();
    drop(acceptors);
    let conns: Vec<Rc<Conn>> = core.conns.borrow().values().cloned().collect();
    for c in &conns {
        c.close();
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_FLUSH_MS_MAX);
    while !core.conns.borrow().is_empty() && std::time::Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    drop(toucher);
    drop(sessionless_closer);
    drop(forwarder);
    drop(admin_bridge);
    tracing::info!("client core {id} stopped");
    Ok(())
}
