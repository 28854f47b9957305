//! The pipeline core of an ensemble member: the shell around one `zab::Peer`. It carries the
//! peer's messages (`peer_net`), makes its persists durable (txn log, epochs file, SNAP
//! snapshots), applies what it delivers to the committed tree and fans it out to the client
//! cores, and routes client requests: the leader preps writes against its own prep tree and
//! proposes them; a follower or observer forwards them (`txn::forward`) and answers its
//! clients when the txn is delivered here.
//! Rules:
//! - Nothing reaches a client core before ZAB delivered it (a quorum logged it); client cores
//!   start from the snapshot and see every later txn once, in zxid order.
//! - A reply goes to the request a txn was made for, never by guess: the leader knows the
//!   txn's origin when it proposes (its own request, or a follower's numbered request, which it
//!   names back in a Proposed reply before the commit); connections that closed in between
//!   just get nothing.
//! - Sessions are global: created, closed and expired by txns (except, with
//!   `localSessionsEnabled`, a session local to this member until it creates an ephemeral,
//!   and a read-only member's sessions: `local_sessions.rs`, `read_only.rs`); the leader alone keeps their
//!   deadlines (refreshed by touches from every member, which a follower forwards as soon as
//!   its client cores report them) and knows which member owns each; a write from a member
//!   that does not own its session fails with SessionMoved.
//! - A member serves clients only while its peer is an established leader or a synced
//!   follower; on losing that it closes every client connection (clients move elsewhere).
//!   With `readonlymode.enabled`, a member LOOKING for the grace period serves read-only
//!   sessions until its peer leaves LOOKING (`read_only.rs`).
//! - Snapshots are of the committed tree, never of the leader's prep tree. A SNAP to a
//!   follower streams from an O(1) clone of it in bounded chunks (`snap_stream`), never one
//!   message; the follower hands its peer the SNAP only once it is whole and durable in a temp
//!   file, and installs and loads it off the executor.
//! - The loop never awaits an fdatasync: log appends run beside it (`log_task`, one at a
//!   time, what queued meanwhile is the next batch), so acks, proposals and requests are taken
//!   in while a sync is in flight.
//! - Persists are done in the order the peer asked for them and reported only once durable; a
//!   full disk leaves them queued (bounded) and retried every tick, never dropped or reordered.
//! - Backpressure, never drops: the member takes no new work (client requests, and a
//!   leader's forwarded requests, which wait in order in `held`) while the peers it needs are
//!   behind (`PeerNet::keeping_up`): a leader while fewer than a quorum of voters (itself
//!   included) keep up, a follower while its leader does not or while its forwarded writes
//!   not yet proposed pass `FORWARDED_BYTES_MAX`. One pass takes at most
//!   `PASS_INTAKE_BYTES_MAX` of proposals and forwards. A leader expires no session while it
//!   holds requests back (their touches are among them).

#[path = "local_sessions.rs"]
mod local_sessions;
#[path = "read_only.rs"]
mod read_only;

use super::clock::Now;
use super::commit_queue::{CommitQueue, Rounds};
use super::core_link;
use super::diff_read;
use super::fence::Fence;
use super::inspect::Collections;
use super::log_task::LogSlot;
use super::log_writer::SyncMode;
use super::messages::{Commit, CommitBatch, ServerMode, ToClientCore, ToPipeline};
use super::peer_net::{PeerIn, PeerNet, PeerTls};
use super::pipeline::{
    dated, doomed_nodes, draw_snapshot_roll, new_passwd, open_log, random_session_secret, refuse_if_ahead,
    relay_inspection, start_ticker, CoreSenders, Inbox, Snapshots, TICK_INTERVAL_MS_MAX,
};
use super::snap_stream::{Received, Routed, SnapReceiver, SnapSender, SNAP_PACE_MS};
use super::stage_latency::Stage;
use crate::config::Config;
use crate::dynconfig::DynConfig;
use crate::proto::peer::PEER_FORWARD_BYTES_MAX;
use crate::proto::{ErrorCode, Id};
use crate::session::{self, ConnRef, SessionTracker};
use crate::storage::{self, recovery::Recovered};
use crate::tree::{path, DataTree};
use crate::txn::forward::{self, Forward, LeaderReply};
use crate::txn::prep::{prep, PrepContext};
use crate::txn::{apply, codec, Txn, TxnHeader, TxnOp, WriteOp};
use crate::zab::message::{LeaderMsg, Message};
use crate::zab::peer::{Input, Output, Peer, PersistOp, Role};
use crate::zab::{self, Sid, ZabConfig, Zxid};
use bytes::{Bytes, BytesMut};
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The largest zxid counter a leader uses before it forces a new epoch (ZooKeeper's rule).
pub const ZXID_COUNTER_MAX: u32 = 0xffff_fffe;
/// Why an ensemble member refuses the admin `restore` (ZooKeeper 3.9 restores only the member
/// it is sent to, leaving the others' trees different; ZAB sync by zxid would not repair it).
pub const RESTORE_IN_ENSEMBLE: &str = "restore is for a standalone server: on an ensemble member it would leave \
     this member's tree different from the others' (stop the ensemble, restore a standalone server, then seed \
     the members from its data directory)";
/// Txn bytes in one Sync message at most (well under the peer frame limit).
pub const SYNC_CHUNK_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Peer messages waiting for the pipeline before the transport's reader waits.
pub const PEER_INBOX_MESSAGES_MAX: usize = 16 * 1024;
/// Proposal and forward bytes one pass of the loop takes in at most (then it sends them, so the
/// peers' queues tell whether to take more).
pub const PASS_INTAKE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// A follower's forwarded writes the leader has not yet proposed, in bytes, past which it
/// takes no new client requests (bounds what the leader holds for it).
pub const FORWARDED_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Rounds of ZAB outputs handled in one pass before the loop goes back to its inputs.
const OUTPUT_ROUNDS_MAX: usize = 64;
/// Bytes of persists that may wait for a full disk before the member stops.
pub const PERSIST_QUEUE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes of persists queued behind the log append in flight past which the member takes in
/// nothing new (client requests, forwards, peer messages) until the log catches up: a slow
/// disk slows the leader down through its own intake and its followers' links, as it did
/// when the loop awaited each fdatasync.
pub const PERSIST_BACKLOG_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Proposals (leader) or forwarded writes (follower) whose send time is kept for
/// `Stage::ProposeToCommit` / `Stage::ForwardToCommit`; beyond this many in flight, later ones
/// go untimed (the queue stays bounded whatever the peers do).
pub const PROPOSALS_TIMED_MAX: usize = 64 * 1024;

pub struct EnsembleParams {
    pub config: Arc<Config>,
    pub stats: Arc<super::stats::Stats>,
    pub recovered: Arc<Recovered>,
    /// The tree of the recovered snapshot alone (ZAB delivers the log once it is committed),
    /// built once at start-up.
    pub tree: DataTree,
    pub my_id: Sid,
    pub from_cores: Vec<core_link::Rx<Vec<ToPipeline>>>,
    pub to_cores: Vec<core_link::Tx<ToClientCore>>,
    /// Set while the txn log has an append in flight (read by a client core on this thread).
    pub log_writing: core_link::LogWriting,
    pub shutdown: Arc<AtomicBool>,
}

/// What the loop must do with the client cores, in order.
enum CoreMsg {
    Batches(Vec<CommitBatch>),
    Control(ToClientCore),
}

/// A request waiting for its txn to be delivered here.
type Origin = (ConnRef, i32);

/// A request waiting for its txn, and what the reads of its connection waiting before it
/// need of the commit batches (`ToPipeline::Write::fence`).
type Awaited = (Origin, Fence);

/// One connection's requests in flight, counted, and the answers made at intake (a write
/// refused here, a local session's close) that must wait for the replies of the requests sent
/// before them: the client core answers a connection's requests only in its order.
#[derive(Debug, Default)]
struct InOrder {
    issued: u64,
    answered: u64,
    /// Each answer with the count of requests issued before it.
    parked: VecDeque<(u64, Commit)>,
}

struct Member {
    config: Arc<Config>,
    me: Sid,
    peer: Peer,
    /// The membership in force here (its server lines, for `/zookeeper/config`, the peer
    /// transport and the reconfig requests this member preps as leader).
    membership: DynConfig,
    /// The quorum addresses of each server as the peer transport last followed them
    /// (`follow_membership` resolves only lines that differ from these).
    followed: Followed,
    /// Reconfigurations delivered here whose `membership` file is not yet written: their
    /// server lines by zxid (one at a time in practice: ReconfigInProgress).
    configs: BTreeMap<Zxid, DynConfig>,
    /// Every delivered txn applied: the state snapshots are made of.
    committed: DataTree,
    /// Leader only, while its epoch is established: the committed tree plus every proposal.
    prep: Option<DataTree>,
    /// Everyone: the session id generator. Leader: every session's deadline.
    sessions: SessionTracker,
    /// Leader: the member each session's client is connected to (absent: not known yet).
    owners: HashMap<i64, Sid>,
    conn_sessions: HashMap<ConnRef, i64>,
    session_conns: HashMap<i64, ConnRef>,
    /// New sessions named here, waiting for their createSession txn: conn, timeout.
    connecting: HashMap<i64, (ConnRef, i32)>,
    /// Resumes waiting for the leader's verdict: token → conn, session, timeout.
    revalidating: HashMap<u64, (ConnRef, i64, i32)>,
    /// Follower: forwarded writes waiting for the leader to name their zxid, by request id,
    /// with their size and when they were forwarded.
    forwarded: HashMap<u64, (Awaited, usize, Instant)>,
    /// Follower: the bytes of `forwarded`.
    forwarded_bytes: usize,
    /// Leader: requests forwarded by followers while intake was closed, in arrival order.
    held: VecDeque<(Sid, Bytes)>,
    /// Proposal and forward bytes taken in during this pass of the loop.
    intake_bytes: usize,
    /// Whether intake was closed at the end of the last pass (for the log line on a change).
    intake_closed: bool,
    /// Persists the ZAB core asked for and the log has not done yet, in order: normally empty
    /// between passes; while the disk is full, the appends it refused and everything after
    /// them (a full disk is a slow disk: nothing is acknowledged before it is logged, and the
    /// member keeps answering its peers meanwhile). Bounded by `PERSIST_QUEUE_BYTES_MAX`.
    persist_queue: VecDeque<PersistOp>,
    persist_queue_bytes: usize,
    /// The last append found the disk full (for the log lines on a change).
    disk_full: bool,
    /// The other voters, and how many voters make a quorum.
    other_voters: Vec<Sid>,
    quorum: usize,
    next_request: u64,
    /// The local request each proposed zxid answers (until it is delivered).
    answers: HashMap<Zxid, Awaited>,
    /// When each write in flight left: a leader's proposals (`Stage::ProposeToCommit`), a
    /// follower's forwarded writes once the leader named their zxid (`Stage::ForwardToCommit`);
    /// in zxid order, at most `PROPOSALS_TIMED_MAX`.
    proposed_at: VecDeque<(Zxid, Instant, Stage)>,
    /// Syncs waiting for the leader's zxid: token → conn, xid, path.
    sync_tokens: HashMap<u64, (ConnRef, i32, String)>,
    /// Syncs answered once the committed tree reaches the zxid.
    syncs: VecDeque<(Zxid, ConnRef, i32, String)>,
    /// Connections with requests in flight (answered at delivery or when a sync is released,
    /// in the connection's order), and the answers made at intake that wait behind them.
    in_order: HashMap<ConnRef, InOrder>,
    /// Sessions local clients touched since the last forward to the leader.
    touched: HashSet<i64>,
    next_token: u64,
    /// The role this member serves clients in (None: not serving).
    serving: Option<Role>,
    /// This member observes (it never votes).
    observer: bool,
    /// Since when this member has not served (start-up, or losing its leader): the next
    /// time it serves, the difference is the election time.
    unserved_since: Option<std::time::Instant>,
    /// Serving read-only (`read_only.rs`): its local sessions. `serving` is None meanwhile.
    read_only: Option<crate::local_session::LocalSessions>,
    /// Since when the peer has been LOOKING (for the read-only grace period).
    looking_since: Option<std::time::Instant>,
    /// While serving, with `localSessionsEnabled`: the sessions made here without a txn
    /// (`local_sessions.rs`).
    local: crate::local_session::LocalSessions,
    /// Delivered txns (applied to `committed`) and answers, on their way to the client cores.
    commits: CommitQueue,
    /// Client requests held for the next round of this pass (`commit_queue::Rounds`).
    rounds: Rounds,
    to_cores: Vec<CoreMsg>,
    out: Vec<Output>,
    encode_buf: BytesMut,
    scratch_changes: Vec<apply::Change>,
    delivered_since_snapshot: u64,
    /// Bytes of those txns (snapSizeLimitInKb).
    delivered_bytes_since_snapshot: u64,
    /// Where the next snapshot falls: drawn at each snapshot, so the members' differ.
    snapshot_roll: crate::config::SnapshotRoll,
    /// Leader: SNAPs streaming to followers, and the link messages waiting behind them.
    snap_out: SnapSender,
    /// Follower: a SNAP arriving from the leader, and those received whole until installed.
    snap_in: SnapReceiver,
    /// Leader: answered log reads (`Output::ReadLog`), for the peer; at most one per follower.
    log_reads: Rc<std::cell::RefCell<VecDeque<Input>>>,
    /// Wakes the loop (a log read finished).
    wake: Rc<Semaphore>,
    collections: Collections,
    stats: Arc<super::stats::Stats>,
}

impl Member {
    fn step(&mut self, input: Input) {
        self.peer.step(input, &mut self.out);
    }

    fn flush_items(&mut self) {
        if !self.commits.is_empty() {
            self.to_cores.push(CoreMsg::Batches(self.commits.take(&self.committed)));
        }
    }

    /// Queues an answer for a client core (nothing that changes the tree).
    fn answer(&mut self, item: Commit) {
        self.commits.push(item, &self.committed);
    }

    fn control(&mut self, msg: ToClientCore) {
        self.flush_items();
        self.to_cores.push(CoreMsg::Control(msg));
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn leading(&self) -> bool {
        matches!(self.serving, Some(Role::Leading { .. }))
    }

    /// A follower passes its clients' touches on at once: each client core reports them
    /// every half tick, so the leader hears of a touch at most half a tick late, as with
    /// ZooKeeper's learner ping (sent every half tick, carrying the touches since the last).
    fn forward_touches(&mut self) {
        if self.serving.is_some() && !self.leading() && !self.touched.is_empty() {
            let sessions: Vec<i64> = self.touched.drain().collect();
            for chunk in sessions.chunks(forward::TOUCH_SESSIONS_MAX) {
                self.forward_encoded(forward::encode_forward(&Forward::Touch { sessions: chunk.to_vec() }));
            }
        }
    }

    /// Forwards an encoded `Forward` to the leader; returns its size.
    fn forward_encoded(&mut self, data: Bytes) -> usize {
        let len = data.len();
        self.intake_bytes += len;
        self.step(Input::Forward { data });
        len
    }

    /// Whether this member takes new work now (see the rules above).
    fn intake_open(&self, net: &PeerNet) -> bool {
        if self.log_behind() {
            return false;
        }
        match self.serving {
            Some(Role::Leading { .. }) => {
                1 + self.other_voters.iter().filter(|&&v| net.keeping_up(v)).count() >= self.quorum
            }
            Some(Role::Following { leader, .. }) => {
                net.keeping_up(leader) && self.forwarded_bytes < FORWARDED_BYTES_MAX
            }
            // Not serving: what arrives is refused at once; nothing to hold back.
            _ => true,
        }
    }

    /// The log is behind by more than `PERSIST_BACKLOG_BYTES_MAX` (on a slow disk; a full
    /// disk keeps its own rules, `PERSIST_QUEUE_BYTES_MAX`).
    fn log_behind(&self) -> bool {
        self.persist_queue_bytes >= PERSIST_BACKLOG_BYTES_MAX && !self.disk_full
    }

    /// Whether this pass may take in more.
    fn pass_has_room(&self) -> bool {
        self.intake_bytes < PASS_INTAKE_BYTES_MAX
    }

    /// Leader: takes in held forwarded requests while intake is open and the pass has room.
    fn release_held(&mut self, net: &PeerNet, now: Now) {
        while self.pass_has_room() && self.intake_open(net) {
            let Some((from, data)) = self.held.pop_front() else { break };
            self.on_forwarded(from, data, now);
        }
    }

    // ---- client requests (from the client cores of this member) ----

    /// Takes one client message in, or holds it for the next round (`commit_queue::Rounds`).
    fn take_in(&mut self, msg: ToPipeline, now: Now) {
        if let Some(msg) = self.rounds.take_in(msg) {
            self.on_client(msg, now);
        }
    }

    fn on_client(&mut self, msg: ToPipeline, now: Now) {
        if let ToPipeline::Restore { reply, .. } = msg {
            // One member's tree replaced alone would diverge from the others' (docs/security.md).
            let _ = reply.try_send(Err(RESTORE_IN_ENSEMBLE.to_string()));
            return;
        }
        if let ToPipeline::Inspect { .. } | ToPipeline::Report { .. } = msg {
            // Inspections are answered serving or not; only a leader expires sessions.
            let (leading, sessions) = (self.leading(), &self.sessions);
            let relayed =
                relay_inspection(&mut self.collections, msg, || leading.then(|| dated(sessions.deadline_sets(), now)));
            if let Some(m) = relayed {
                self.control(m);
            }
            return;
        }
        if self.read_only.is_some() {
            self.on_read_only_client(msg, now);
            return;
        }
        if self.serving.is_none() {
            // The cores close everything when told; these crossed that message.
            match msg {
                ToPipeline::Connect { conn, .. } | ToPipeline::Write { conn, .. } | ToPipeline::Sync { conn, .. } => {
                    self.answer(Commit::Close { conn })
                }
                ToPipeline::Detached { conn } => self.forget_conn(conn),
                ToPipeline::Touch { .. }
                | ToPipeline::Inspect { .. }
                | ToPipeline::Report { .. }
                | ToPipeline::Restore { .. } => {}
            }
            return;
        }
        match msg {
            ToPipeline::Connect { conn, session_id, passwd, timeout_ms, last_zxid_seen, .. } => {
                if let Some(refusal) = refuse_if_ahead(conn, last_zxid_seen, self.committed.last_zxid()) {
                    self.answer(refusal);
                    return;
                }
                let timeout_ms = self.config.negotiate_session_timeout(timeout_ms);
                if self.local_connect(conn, session_id, &passwd, timeout_ms, now) {
                    return;
                }
                if session_id == 0 {
                    let id = self.sessions.next_session_id();
                    self.connecting.insert(id, (conn, timeout_ms));
                    if self.leading() {
                        self.create_session(self.me, id, timeout_ms, now);
                    } else {
                        self.forward_encoded(forward::encode_forward(&Forward::CreateSession {
                            session_id: id,
                            timeout_ms,
                        }));
                    }
                    return;
                }
                if !session::password_matches(self.committed.session_secret(), session_id, &passwd) {
                    self.answer(Commit::SessionExpired { conn });
                    return;
                }
                if self.leading() {
                    let alive = self.revalidate(self.me, session_id, timeout_ms, now);
                    self.resumed(conn, session_id, timeout_ms, alive);
                } else {
                    let token = self.token();
                    self.revalidating.insert(token, (conn, session_id, timeout_ms));
                    self.forward_encoded(forward::encode_forward(&Forward::Revalidate {
                        token,
                        session_id,
                        timeout_ms,
                    }));
                }
            }
            ToPipeline::Write { conn, xid, op, auth, fence, read_at } => {
                let taken = Instant::now();
                self.stats.pipeline_stages.get(Stage::CoreToPipeline).record(taken.saturating_duration_since(read_at));
                let Some(&session_id) = self.conn_sessions.get(&conn) else { return };
                if self.local.contains(session_id) && !self.local_write(conn, xid, session_id, &op, now) {
                    return;
                }
                if self.leading() {
                    if let Some(zxid) = self.prep_write(self.me, session_id, xid, &auth, op, now) {
                        self.answers.insert(zxid, ((conn, xid), fence));
                        self.in_flight(conn);
                        self.stats.pipeline_stages.get(Stage::Prep).record_since(taken);
                    }
                } else {
                    self.next_request += 1;
                    let request = self.next_request;
                    let f = Forward::Write { request, session_id, cxid: xid, auth: auth.to_vec(), op };
                    let data = forward::encode_forward(&f);
                    if data.len() > PEER_FORWARD_BYTES_MAX {
                        // Only a connection with an absurd number of auth ids gets here (the
                        // op itself is bounded by jute.maxbuffer): the leader could not read it.
                        tracing::warn!(
                            "a write of session {session_id:#x} is too large to forward ({} bytes)",
                            data.len()
                        );
                        self.answer_in_order(
                            conn,
                            Commit::Rejected { conn, xid, err: ErrorCode::MarshallingError.code() },
                        );
                        return;
                    }
                    let len = self.forward_encoded(data);
                    // Timed from this pass's clock read (no read of its own per forwarded write).
                    self.forwarded.insert(request, (((conn, xid), fence), len, now.at));
                    self.forwarded_bytes += len;
                    self.in_flight(conn);
                }
            }
            ToPipeline::Sync { conn, xid, path } => {
                let Some(&s) = self.conn_sessions.get(&conn) else { return };
                if self.leading() {
                    self.sessions.touch(s, now.mono_ms);
                    self.syncs.push_back((self.peer.last_zxid(), conn, xid, path));
                    self.in_flight(conn);
                } else {
                    self.touched.insert(s);
                    let token = self.token();
                    self.sync_tokens.insert(token, (conn, xid, path));
                    self.in_flight(conn);
                    self.forward_encoded(forward::encode_forward(&Forward::Sync { token }));
                }
            }
            ToPipeline::Touch { sessions } => {
                let sessions = self.touch_local(sessions, now);
                if self.leading() {
                    for s in sessions {
                        self.sessions.touch(s, now.mono_ms);
                    }
                } else {
                    self.touched.extend(sessions);
                }
            }
            ToPipeline::Detached { conn } => {
                if let Some(&s) = self.conn_sessions.get(&conn) {
                    self.local.detach(s, conn);
                }
                self.forget_conn(conn)
            }
            ToPipeline::Inspect { .. } | ToPipeline::Report { .. } | ToPipeline::Restore { .. } => {}
        }
    }

    /// The connection is gone: nothing waits for it any more (its session lives on).
    fn forget_conn(&mut self, conn: ConnRef) {
        self.forget_session_of(conn);
        self.sync_tokens.retain(|_, (c, ..)| *c != conn);
        self.in_order.remove(&conn);
    }

    /// Unbinds `conn` from its session. Its writes in flight stay where they are: their txns
    /// still come, and answer whoever still waits on the connection (a local session closed
    /// here is answered after them: `answer_in_order`).
    pub(super) fn forget_session_of(&mut self, conn: ConnRef) {
        if let Some(s) = self.conn_sessions.remove(&conn) {
            if self.session_conns.get(&s) == Some(&conn) {
                self.session_conns.remove(&s);
            }
        }
        self.connecting.retain(|_, (c, _)| *c != conn);
        self.revalidating.retain(|_, (c, ..)| *c != conn);
    }

    /// A request of `conn` went in flight: its answer comes at delivery or a sync's release.
    fn in_flight(&mut self, conn: ConnRef) {
        self.in_order.entry(conn).or_default().issued += 1;
    }

    /// The next request of `conn` in flight was answered: the answers parked behind it follow.
    fn answered_in_order(&mut self, conn: ConnRef) {
        let Some(o) = self.in_order.get_mut(&conn) else { return };
        o.answered += 1;
        let mut ready = Vec::new();
        while o.parked.front().is_some_and(|(before, _)| *before <= o.answered) {
            ready.extend(o.parked.pop_front().map(|(_, item)| item));
        }
        if o.answered >= o.issued && o.parked.is_empty() {
            self.in_order.remove(&conn);
        }
        for item in ready {
            self.answer(item);
        }
    }

    /// An answer made at intake: queued now, or behind the requests of `conn` still in flight.
    pub(super) fn answer_in_order(&mut self, conn: ConnRef, item: Commit) {
        match self.in_order.get_mut(&conn) {
            Some(o) if o.issued > o.answered => {
                let before = o.issued;
                o.parked.push_back((before, item));
            }
            _ => self.answer(item),
        }
    }

    /// A resume was judged: attach the session to `conn`, or refuse it.
    fn resumed(&mut self, conn: ConnRef, session_id: i64, timeout_ms: i32, alive: bool) {
        if !alive {
            self.answer(Commit::SessionExpired { conn });
            return;
        }
        if let Some(old) = self.session_conns.insert(session_id, conn) {
            self.conn_sessions.remove(&old);
            self.answer(Commit::Close { conn: old });
        }
        self.conn_sessions.insert(conn, session_id);
        let passwd = new_passwd(&self.committed, session_id);
        self.answer(Commit::Connected { conn, session_id, timeout_ms, passwd });
    }

    // ---- the leader's side ----

    /// Proposes one txn prepared here (`prep` holds every earlier proposal); returns its zxid.
    /// `waiter`: the member whose client waits for it (the leader itself is never told).
    fn propose(&mut self, session_id: i64, cxid: i32, op: TxnOp, waiter: Option<Sid>, now: Now) -> Option<Zxid> {
        let Some(zxid) = self.peer.next_proposal_zxid() else {
            // An established leader out of zxid counter starts a new election (and epoch);
            // otherwise this leadership is over or not yet established: nothing is proposed.
            if self.peer.role() == (Role::Leading { serving: true }) {
                self.peer.abdicate(&mut self.out);
            }
            return None;
        };
        let tree = self.prep.as_mut()?;
        let txn = Txn { header: TxnHeader { zxid, session_id, cxid, time_ms: now.wall_ms }, op };
        self.scratch_changes.clear();
        apply::apply(tree, &txn, &mut self.scratch_changes);
        codec::encode(&txn, &mut self.encode_buf);
        let data = self.encode_buf.split().freeze();
        self.stats.count_proposal(data.len());
        self.intake_bytes += data.len();
        self.step(Input::Propose { data, waiter });
        if self.proposed_at.len() < PROPOSALS_TIMED_MAX {
            self.proposed_at.push_back((zxid, Instant::now(), Stage::ProposeToCommit));
        }
        Some(zxid)
    }

    fn create_session(&mut self, from: Sid, id: i64, timeout_ms: i32, now: Now) {
        self.sessions.add(id, timeout_ms, now.mono_ms);
        self.owners.insert(id, from);
        let _ = self.propose(id, 0, TxnOp::CreateSession { timeout_ms }, Some(from), now);
    }

    /// Is `session_id` alive? If so it now belongs to `from`, with `timeout_ms`.
    fn revalidate(&mut self, from: Sid, session_id: i64, timeout_ms: i32, now: Now) -> bool {
        if !self.sessions.contains(session_id) {
            return false;
        }
        self.sessions.set_timeout(session_id, timeout_ms, now.mono_ms);
        self.owners.insert(session_id, from);
        true
    }

    fn prep_write(
        &mut self,
        from: Sid,
        session_id: i64,
        cxid: i32,
        auth: &[Id],
        op: WriteOp,
        now: Now,
    ) -> Option<Zxid> {
        let tree = self.prep.as_ref()?;
        let txn_op = if !self.sessions.touch(session_id, now.mono_ms) && !self.local_write_allowed(session_id) {
            TxnOp::Error { err: ErrorCode::SessionExpired.code() }
        } else if self.owners.get(&session_id).is_some_and(|&o| o != from) {
            TxnOp::Error { err: ErrorCode::SessionMoved.code() }
        } else if matches!(op, WriteOp::Reconfig { .. }) {
            self.prep_reconfig(auth, &op).unwrap_or_else(|e| TxnOp::Error { err: e.code() })
        } else {
            let ctx = PrepContext {
                session_id,
                auth_ids: auth,
                extended_types_enabled: self.config.extended_types_enabled,
                txn_bytes_max: self.config.txn_bytes_max(),
                enforce_quota: self.config.enforce_quota,
            };
            prep(tree, op, &ctx)
        };
        if matches!(txn_op, TxnOp::CloseSession) {
            self.sessions.remove(session_id);
            self.owners.remove(&session_id);
        }
        self.propose(session_id, cxid, txn_op, Some(from), now)
    }

    /// A reconfig, decided as ZooKeeper's leader does, in its order: reconfigEnabled
    /// (ReconfigDisabled), one at a time (ReconfigInProgress: the last proposed membership is
    /// not the active one), the expected version (BadVersion), the change itself and the voter
    /// floor (BadArguments), a synced quorum of the new membership (NewConfigNoQuorum), then
    /// WRITE on `/zookeeper/config` (NoAuth; a super id passes). The txn carries the new text
    /// with the version it will have: its own zxid.
    fn prep_reconfig(&self, auth: &[Id], op: &WriteOp) -> Result<TxnOp, ErrorCode> {
        let WriteOp::Reconfig { joining, leaving, new_members, cur_config_id } = op else {
            return Err(ErrorCode::BadArguments);
        };
        if !self.config.reconfig_enabled {
            return Err(ErrorCode::ReconfigDisabled);
        }
        let tree = self.prep.as_ref().ok_or(ErrorCode::ConnectionLoss)?;
        let node = tree.get(path::CONFIG_NODE).ok_or(ErrorCode::NoNode)?;
        let last_seen = node
            .data
            .as_ref()
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|t| DynConfig::parse(t).ok())
            .unwrap_or_else(|| self.membership.clone());
        if last_seen.version != self.membership.version || !self.peer.next_configs().is_empty() {
            return Err(ErrorCode::ReconfigInProgress);
        }
        if *cur_config_id != -1 && *cur_config_id != last_seen.version {
            return Err(ErrorCode::BadVersion);
        }
        let next = match new_members {
            Some(m) => DynConfig::bulk(m),
            None => last_seen.incremental(joining.as_deref(), leaving.as_deref()),
        };
        let mut next = next.map_err(|e| {
            tracing::info!("reconfig refused: {e}");
            ErrorCode::BadArguments
        })?;
        next.check_voters(self.config.standalone_enabled).map_err(|e| {
            tracing::info!("reconfig refused: {e}");
            ErrorCode::BadArguments
        })?;
        let mut synced = self.peer.synced_learners();
        synced.push(self.me);
        let voters = next.voters();
        if voters.iter().filter(|v| synced.contains(v)).count() <= voters.len() / 2 {
            tracing::info!(
                "reconfig refused: there must be a connected and synced quorum in the new configuration                  (voters {voters:?}, synced {synced:?})"
            );
            return Err(ErrorCode::NewConfigNoQuorum);
        }
        if !crate::tree::acl::check(&node.acl, crate::proto::opcode::perms::WRITE, auth) {
            return Err(ErrorCode::NoAuth);
        }
        next.version = self.peer.next_proposal_zxid().ok_or(ErrorCode::ConnectionLoss)?;
        Ok(TxnOp::Reconfig { data: Bytes::from(next.text()) })
    }

    fn on_forwarded(&mut self, from: Sid, data: Bytes, now: Now) {
        if !self.leading() {
            return;
        }
        let f = match forward::decode_forward(data) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("peer {from} forwarded a request this leader cannot read ({e}); ignored");
                return;
            }
        };
        match f {
            Forward::Write { request, session_id, cxid, auth, op } => {
                let taken = Instant::now();
                if let Some(zxid) = self.prep_write(from, session_id, cxid, &auth, op, now) {
                    self.stats.pipeline_stages.get(Stage::Prep).record_since(taken);
                    // After the proposal on the link, before its commit.
                    self.reply(from, LeaderReply::Proposed { request, zxid });
                }
            }
            Forward::CreateSession { session_id, timeout_ms } => {
                if self.sessions.contains(session_id) || self.committed.session(session_id).is_some() {
                    tracing::warn!("peer {from} named session {session_id:#x}, which exists; ignored");
                    return;
                }
                self.create_session(from, session_id, timeout_ms, now);
            }
            Forward::Revalidate { token, session_id, timeout_ms } => {
                let alive = self.revalidate(from, session_id, timeout_ms, now);
                self.reply(from, LeaderReply::Revalidated { token, alive });
            }
            Forward::Touch { sessions } => {
                for s in sessions {
                    self.sessions.touch(s, now.mono_ms);
                }
            }
            Forward::Sync { token } => {
                let zxid = self.peer.last_zxid();
                self.reply(from, LeaderReply::SyncedTo { token, zxid });
            }
        }
    }

    fn reply(&mut self, to: Sid, r: LeaderReply) {
        let data = forward::encode_reply(&r);
        self.step(Input::Reply { to, data });
    }

    fn on_tick_leader(&mut self, now: Now, reap: bool) {
        if self.prep.as_ref().is_some_and(|t| t.session_secret().is_none()) {
            // The proposal at the start of this leadership did not go out (or was lost with
            // an earlier leadership's): try again.
            let _ = self.propose(0, 0, TxnOp::SessionSecret { secret: random_session_secret() }, None, now);
        }
        for (id, _) in self.sessions.expired(now.mono_ms) {
            tracing::info!("session {id:#x} expired");
            self.owners.remove(&id);
            let _ = self.propose(id, 0, TxnOp::CloseSession, None, now);
        }
        if reap {
            let Some(tree) = self.prep.as_ref() else { return };
            let ctx = PrepContext {
                session_id: 0,
                auth_ids: &[],
                extended_types_enabled: true,
                txn_bytes_max: self.config.txn_bytes_max(),
                enforce_quota: false,
            };
            let mut ops = Vec::new();
            for p in doomed_nodes(tree, now.wall_ms) {
                let op = prep(tree, WriteOp::DeleteContainer { path: p }, &ctx);
                if matches!(op, TxnOp::Delete { .. }) {
                    ops.push(op);
                }
            }
            for op in ops {
                let _ = self.propose(0, 0, op, None, now);
            }
        }
    }

    /// A reconfiguration committed: the voters whose pace the flow control follows, the
    /// quorum size, and whether this member observes, from the new membership.
    fn reconfigured(&mut self, zxid: Zxid, voters: &[Sid], observers: &[Sid]) {
        tracing::info!("peer {}: membership {zxid:#x}: voters {voters:?}, observers {observers:?}", self.me);
        self.other_voters = voters.iter().copied().filter(|&v| v != self.me).collect();
        self.quorum = voters.len() / 2 + 1;
        let was_observer = std::mem::replace(&mut self.observer, observers.contains(&self.me));
        if was_observer != self.observer && matches!(self.serving, Some(Role::Following { .. })) {
            // Still following the same leader, in its new role: `srvr` and `mntr` say which.
            let mode = if self.observer { ServerMode::Observer } else { ServerMode::Follower };
            self.control(ToClientCore::Serving(mode));
        }
        match self.configs.get(&zxid) {
            Some(c) => self.membership = c.clone(),
            // Adopted from an election notification (sids only): the lines come with the sync.
            None => {
                let mut m = DynConfig::new(zxid, self.membership.servers.iter().cloned());
                m.servers.retain(|s| voters.contains(&s.id) || observers.contains(&s.id));
                self.membership = m;
            }
        }
    }

    /// The client address of this member's line in the membership in force.
    fn own_client(&self) -> Option<(String, u16)> {
        self.membership.servers.iter().find(|s| s.id == self.me).and_then(|s| s.client.clone())
    }

    /// A committed reconfiguration gave this member the client address `host:port`: every
    /// client core listens there from now on instead of the old one (ZooKeeper's
    /// `ServerCnxnFactory.reconfigure`); established connections stay. A host name is
    /// resolved on the blocking pool; one that does not resolve leaves the old listener.
    async fn move_client_listener(&mut self, host: String, port: u16) {
        let ip = match ip_literal(&host) {
            Some(ip) => Ok(ip),
            None if host.is_empty() => Ok(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
            None => {
                let h = host.clone();
                super::offcore::run(move || resolve(&h, port).map(|a| a.ip())).await
            }
        };
        match ip {
            Ok(ip) => {
                let addr = SocketAddr::new(ip, port);
                tracing::info!("peer {}: the membership moves this member's client address to {addr}", self.me);
                self.control(ToClientCore::Listen(addr));
            }
            Err(e) => {
                tracing::warn!(
                    "peer {}: the new client address {host}:{port} does not resolve ({e}); not moved",
                    self.me
                )
            }
        }
    }

    /// After a SNAP: the membership the leader's tree holds in `/zookeeper/config`, if newer
    /// than this member's, is told to the peer (a reconfiguration committed before the
    /// snapshot is delivered to no one here).
    fn snapshot_membership(&mut self) {
        let Some(node) = self.committed.get(path::CONFIG_NODE) else { return };
        let Some(text) = node.data.as_ref().and_then(|d| std::str::from_utf8(d).ok()) else { return };
        let Ok(c) = DynConfig::parse(text) else { return };
        if c.version == 0 || c.version <= self.membership.version {
            return;
        }
        let (zxid, voters, observers) = (c.version, c.voters(), c.observers());
        self.configs.insert(zxid, c);
        self.step(Input::SnapshotMembership { zxid, voters, observers });
    }

    // ---- a follower's side ----

    fn on_leader_reply(&mut self, data: Bytes) {
        match forward::decode_reply(data) {
            Ok(LeaderReply::Proposed { request, zxid }) => {
                if let Some((origin, len, at)) = self.forwarded.remove(&request) {
                    self.forwarded_bytes -= len;
                    self.answers.insert(zxid, origin);
                    if self.proposed_at.len() < PROPOSALS_TIMED_MAX {
                        self.proposed_at.push_back((zxid, at, Stage::ForwardToCommit));
                    }
                }
            }
            Ok(LeaderReply::Revalidated { token, alive }) => {
                if let Some((conn, session_id, timeout_ms)) = self.revalidating.remove(&token) {
                    self.resumed(conn, session_id, timeout_ms, alive);
                }
            }
            Ok(LeaderReply::SyncedTo { token, zxid }) => {
                if let Some((conn, xid, path)) = self.sync_tokens.remove(&token) {
                    self.syncs.push_back((zxid, conn, xid, path));
                }
            }
            Err(e) => tracing::warn!("the leader sent a reply this member cannot read ({e}); ignored"),
        }
    }

    // ---- delivery ----

    /// A committed txn: apply it here and hand it to the client cores, with the local request
    /// it answers, if any.
    fn deliver(&mut self, t: zab::Txn) -> Result<(), String> {
        let txn = codec::decode(t.data.clone())
            .map_err(|e| format!("committed txn {:#x} does not decode: {e}; this replica must stop", t.zxid))?;
        if txn.header.zxid != t.zxid || txn.header.zxid <= self.committed.last_zxid() {
            return Err(format!(
                "committed txn {:#x} carries zxid {:#x} after {:#x}; this replica must stop",
                t.zxid,
                txn.header.zxid,
                self.committed.last_zxid()
            ));
        }
        self.delivered_since_snapshot += 1;
        self.delivered_bytes_since_snapshot += t.data.len() as u64;
        while let Some(&(z, at, stage)) = self.proposed_at.front().filter(|(z, ..)| *z <= t.zxid) {
            self.proposed_at.pop_front();
            if z == t.zxid {
                self.stats.pipeline_stages.get(stage).record_since(at);
            }
        }
        let s = txn.header.session_id;
        let created = matches!(txn.op, TxnOp::CreateSession { .. });
        let closed = matches!(txn.op, TxnOp::CloseSession);
        if let TxnOp::Reconfig { data } = &txn.op {
            // ZAB activates it with this delivery (`Output::Reconfigured`); its lines are kept
            // for the membership file and the peer transport.
            match std::str::from_utf8(data)
                .map_err(|e| e.to_string())
                .and_then(|t| DynConfig::parse(t).map_err(|e| e.to_string()))
            {
                Ok(mut c) => {
                    c.version = t.zxid;
                    self.configs.insert(t.zxid, c);
                }
                Err(e) => tracing::error!(
                    "reconfiguration {:#x} carries a configuration this member cannot read: {e}",
                    t.zxid
                ),
            }
        }
        let (origin, fence) = self.answers.remove(&t.zxid).map_or((None, Fence::Free), |(o, f)| (Some(o), f));
        let answered = origin.is_some();
        // A sync answered by what is committed goes ahead of this txn: a session's write
        // pipelined after its sync may be this one, and its reply follows the sync's.
        self.release_syncs();
        self.commits.apply(&mut self.committed, txn, origin, &fence);
        if let Some((conn, _)) = origin {
            self.answered_in_order(conn);
        }
        self.release_syncs();
        if created {
            if let Some((conn, timeout_ms)) = self.connecting.remove(&s) {
                self.session_conns.insert(s, conn);
                self.conn_sessions.insert(conn, s);
                let passwd = new_passwd(&self.committed, s);
                self.answer(Commit::Connected { conn, session_id: s, timeout_ms, passwd });
            }
        }
        if closed {
            if let Some(conn) = self.session_conns.remove(&s) {
                self.conn_sessions.remove(&conn);
                if !answered {
                    // Expired (or closed through another member): the client's connection goes.
                    self.answer(Commit::Close { conn });
                }
            }
        }
        Ok(())
    }

    /// Leader: reads a DIFF from the log on disk on the blocking pool (`diff_read`); the
    /// answer reaches the peer as `Input::LogRead` on a later pass.
    fn read_log(&mut self, to: Sid, link: zab::message::LinkId, after: Zxid, upto: Zxid, check_after: bool) {
        let (data_dir, log_dir) = (self.config.data_dir.clone(), self.config.data_log_dir.clone());
        let factor = self.config.snapshot_size_factor;
        let (done, wake, me) = (self.log_reads.clone(), self.wake.clone(), self.me);
        glommio::spawn_local(async move {
            let read = glommio::executor()
                .spawn_blocking(move || {
                    let snapshots = match crate::storage::files::list_snapshots(&data_dir) {
                        Ok(s) => s,
                        Err(e) => return diff_read::DiffRead::Missing(format!("listing the snapshots: {e}")),
                    };
                    let limit = match diff_read::diff_bytes_limit(&snapshots, factor) {
                        Ok(Some(l)) => l,
                        Ok(None) => return diff_read::DiffRead::TooLarge { bytes: 0, limit: 0 },
                        Err(e) => return diff_read::DiffRead::Missing(format!("the newest snapshot's size: {e}")),
                    };
                    let zxids: Vec<Zxid> = snapshots.iter().map(|(z, _)| *z).collect();
                    diff_read::read_diff(&log_dir, &zxids, after, upto, check_after, limit)
                })
                .await;
            let txns = match read {
                diff_read::DiffRead::Txns(t) => {
                    tracing::info!(
                        "peer {me}: DIFF for peer {to} from the log on disk: {} txns after {after:#x}",
                        t.len()
                    );
                    Some(t)
                }
                diff_read::DiffRead::TooLarge { bytes, limit } => {
                    tracing::info!(
                        "peer {me}: the txns peer {to} lacks are more than {limit} bytes on disk ({bytes} read, \
                         snapshotSizeFactor); sending a SNAP"
                    );
                    None
                }
                diff_read::DiffRead::Missing(why) => {
                    tracing::info!("peer {me}: no DIFF for peer {to} from the log on disk ({why}); sending a SNAP");
                    None
                }
            };
            done.borrow_mut().push_back(Input::LogRead { to, link, txns });
            wake.signal(1);
        })
        .detach();
    }

    /// Answers the syncs whose zxid is committed, in order (after each delivered txn, and at
    /// the end of each pass).
    fn release_syncs(&mut self) {
        let at = self.committed.last_zxid();
        while self.syncs.front().is_some_and(|(z, ..)| *z <= at) {
            if let Some((_, conn, xid, path)) = self.syncs.pop_front() {
                self.answer(Commit::SyncDone { conn, xid, path });
                self.answered_in_order(conn);
            }
        }
    }

    /// After each round of outputs: start or stop serving clients as the peer's role says.
    fn check_role(&mut self, now: Now) {
        self.leave_read_only_unless_looking();
        let role = self.peer.role();
        let serving_now = match role {
            Role::Leading { serving: true } | Role::Following { serving: true, .. } => Some(role),
            _ => None,
        };
        if serving_now == self.serving {
            return;
        }
        if serving_now.is_some() && self.committed.last_zxid() < self.peer.committed() {
            // Committed txns are still on their way to the committed tree (delivered in a
            // later round): serve, and build the prep tree, only once they are applied.
            return;
        }
        if self.serving.is_some() {
            tracing::info!("peer {}: stops serving clients ({role:?})", self.me);
            let conns: Vec<ConnRef> = self
                .conn_sessions
                .keys()
                .copied()
                .chain(self.connecting.values().map(|(c, _)| *c))
                .chain(self.revalidating.values().map(|(c, ..)| *c))
                .chain(self.sync_tokens.values().map(|(c, ..)| *c))
                .chain(self.syncs.iter().map(|(_, c, ..)| *c))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            for conn in conns {
                self.answer(Commit::Close { conn });
            }
            self.conn_sessions.clear();
            self.session_conns.clear();
            self.connecting.clear();
            self.revalidating.clear();
            self.forwarded.clear();
            self.forwarded_bytes = 0;
            self.held.clear();
            self.answers.clear();
            self.sync_tokens.clear();
            self.syncs.clear();
            self.in_order.clear();
            self.touched.clear();
            self.drop_local_sessions();
            self.prep = None;
            self.snap_out.clear();
            self.control(ToClientCore::Serving(ServerMode::NotServing));
            self.unserved_since = Some(std::time::Instant::now());
        }
        if let Some(r) = serving_now {
            if matches!(r, Role::Leading { .. }) {
                // Establishing the epoch committed (and so delivered) the whole history.
                self.prep = Some(self.committed.clone());
                self.owners.clear();
                let first = self.sessions.next_session_id();
                self.sessions = SessionTracker::new(self.config.tick_time_ms, first);
                for (id, entry) in self.committed.sessions() {
                    self.sessions.add(id, entry.timeout_ms, now.mono_ms);
                }
                // The first leader of an ensemble (or of a data dir from before the key)
                // makes the session-password key: its first proposal, replicated like any txn.
                if self.committed.session_secret().is_none() {
                    tracing::info!("peer {}: no session-password key yet; proposing one", self.me);
                    let _ = self.propose(0, 0, TxnOp::SessionSecret { secret: random_session_secret() }, None, now);
                }
            }
            tracing::info!("peer {}: serving clients as {r:?} at zxid {:#x}", self.me, self.committed.last_zxid());
            let mode = match r {
                Role::Leading { .. } => ServerMode::Leader,
                _ if self.observer => ServerMode::Observer,
                _ => ServerMode::Follower,
            };
            self.control(ToClientCore::Serving(mode));
        }
        self.serving = serving_now;
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}:{port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}:{port} resolves to no address"))
}

/// Log bytes of the records of an append.
fn append_bytes(txns: &[zab::Txn]) -> usize {
    txns.iter().map(|t| storage::log::RECORD_PREFIX_BYTES + t.data.len()).sum()
}

/// Bytes a queued persist holds (what `PERSIST_QUEUE_BYTES_MAX` bounds).
fn persist_op_bytes(op: &PersistOp) -> usize {
    match op {
        PersistOp::Append(txns) => append_bytes(txns),
        PersistOp::InstallSnapshot { state, .. } => state.len(),
        _ => 0,
    }
}

/// Appends the log writes in one batch: one `Input::Persisted` each once it is durable.
type Appends = Vec<Vec<zab::Txn>>;

/// Queues what the ZAB core asked to persist behind anything still waiting, then does what it
/// can (`drain_persists`). Queued bytes past `PERSIST_QUEUE_BYTES_MAX` (a disk full for that
/// long) stop the member: it has acknowledged nothing it did not log.
async fn persist(m: &mut Member, log: &mut LogSlot<Appends>, ops: Vec<PersistOp>) -> Result<(), String> {
    for op in ops {
        m.persist_queue_bytes += persist_op_bytes(&op);
        m.persist_queue.push_back(op);
    }
    if m.persist_queue_bytes > PERSIST_QUEUE_BYTES_MAX {
        return Err(format!(
            "{} bytes of txns wait for a full disk (more than {PERSIST_QUEUE_BYTES_MAX}); this member stops: free \
             space in {} and restart it (it rejoins the quorum)",
            m.persist_queue_bytes,
            m.config.data_log_dir.display()
        ));
    }
    drain_persists(m, log).await
}

/// Reports a finished log append: each of its appends `Persisted`, or, when the disk was full,
/// those the log took whole before it filled `Persisted` (the writer's batches before the one
/// the disk refused are durable; `durable_next`, the writer's next zxid, is where they end) and
/// the rest, less their records already logged, back at the front of the queue (tried again on
/// the next pass or tick: the member acknowledges none of it meanwhile, but keeps answering its
/// peers and clients).
fn land(m: &mut Member, appends: Appends, result: std::io::Result<()>, durable_next: i64) -> Result<(), String> {
    match result {
        Ok(()) => {
            m.stats.count_log_batch(appends.iter().map(Vec::len).sum());
            for _ in 0..appends.len() {
                m.step(Input::Persisted);
            }
            if std::mem::take(&mut m.disk_full) {
                tracing::info!("peer {}: the txn log takes writes again", m.me);
            }
            Ok(())
        }
        Err(e) if super::log_writer::is_disk_full(&e) => {
            if !std::mem::replace(&mut m.disk_full, true) {
                tracing::error!(
                    "peer {}: txn log write failed, the disk is full: {e}; this member acknowledges no proposal \
                     until it has logged it (trying again every tick): free space in {}",
                    m.me,
                    m.config.data_log_dir.display()
                );
            }
            let txns: usize = appends.iter().map(Vec::len).sum();
            let (logged, again) = split_logged(appends, durable_next);
            let unlogged: usize = again.iter().map(Vec::len).sum();
            if txns > unlogged {
                m.stats.count_log_batch(txns - unlogged);
            }
            for _ in 0..logged.len() {
                m.step(Input::Persisted);
            }
            for a in again.into_iter().rev() {
                let op = PersistOp::Append(a);
                m.persist_queue_bytes += persist_op_bytes(&op);
                m.persist_queue.push_front(op);
            }
            Ok(())
        }
        Err(e) => Err(format!("txn log write failed: {e}")),
    }
}

/// Splits an append's appends, in order, at `durable_next` (where the log's durable records end
/// after the disk filled): those whose records are all below it (logged whole), and the rest
/// with only their records from it on (the first may have been logged in part; the log takes
/// them again from there). Each append stays one (one `Persisted` each, whichever way it went).
fn split_logged(appends: Appends, durable_next: i64) -> (Appends, Appends) {
    let mut logged = Vec::new();
    let mut again: Appends = Vec::new();
    for mut a in appends {
        if again.is_empty() && a.iter().all(|t| t.zxid < durable_next) {
            logged.push(a);
        } else {
            a.retain(|t| t.zxid >= durable_next);
            again.push(a);
        }
    }
    (logged, again)
}

/// The writer's next zxid once an append has landed (it is idle again).
fn durable_next(log: &mut LogSlot<Appends>) -> i64 {
    log.idle().expect("a landed append gives its writer back").next_zxid()
}

/// Waits for the log append in flight, if any, and reports it (before anything that needs the
/// log writer itself: a snapshot's roll).
async fn settle_log(m: &mut Member, log: &mut LogSlot<Appends>) -> Result<(), String> {
    match log.settle().await {
        Some((appends, result)) => land(m, appends, result, durable_next(log)),
        None => Ok(()),
    }
}

/// A clean stop's last persists: everything queued is made durable (or refused by a full disk)
/// before the log closes, as ZooKeeper's SyncRequestProcessor flushes its queue before it
/// exits, so the member's log holds all it took in (a follower applies commits before its own
/// append is durable).
async fn flush_persists(m: &mut Member, log: &mut LogSlot<Appends>) -> Result<(), String> {
    loop {
        settle_log(m, log).await?;
        if m.persist_queue.is_empty() || m.disk_full {
            return Ok(());
        }
        drain_persists(m, log).await?;
    }
}

/// Performs queued persists in order, reporting each durable one to the ZAB core. Appends run
/// beside the loop (`log_task`): the loop never waits for an fdatasync, and appends queued
/// while one is in flight share the next write and fdatasync (up to ringkeeper.batchBytesMax;
/// the log writer splits a larger write into batches under the cap, too). Any other persist
/// waits for the append before it, then runs here.
async fn drain_persists(m: &mut Member, log: &mut LogSlot<Appends>) -> Result<(), String> {
    if let Some((appends, result)) = log.finished() {
        land(m, appends, result, durable_next(log))?;
        if m.disk_full {
            // Tried again on a later pass (a tick at the latest), not at once in a loop.
            return Ok(());
        }
    }
    while !log.busy() {
        let Some(op) = m.persist_queue.pop_front() else { break };
        m.persist_queue_bytes -= persist_op_bytes(&op);
        let writer = log.idle().expect("an idle log slot holds its writer");
        match op {
            PersistOp::Append(txns) => {
                let mut record_bytes = append_bytes(&txns);
                let mut appends = vec![txns];
                while record_bytes < m.config.batch_bytes_max {
                    let Some(PersistOp::Append(_)) = m.persist_queue.front() else { break };
                    let Some(PersistOp::Append(more)) = m.persist_queue.pop_front() else { break };
                    let bytes = append_bytes(&more);
                    m.persist_queue_bytes -= bytes;
                    record_bytes += bytes;
                    appends.push(more);
                }
                let records: Vec<Bytes> = appends.iter().flat_map(|a| a.iter().map(|t| t.data.clone())).collect();
                // No member's loop stops on its own disk (`SyncMode`): a leader's followers'
                // acks commit without its own write; a follower goes on answering pings (its
                // clients' session touches) and applying the others' commits.
                writer.set_sync(match m.peer.role() {
                    Role::Leading { .. } => SyncMode::WriteThrough,
                    _ => SyncMode::FdatasyncAside,
                });
                log.start(records, appends);
                continue;
            }
            PersistOp::Epochs { accepted, current } => {
                super::offcore::write_epochs(m.config.data_dir.clone(), accepted, current)
                    .await
                    .map_err(|e| format!("writing the epochs: {e}"))?;
            }
            PersistOp::Truncate { after } => {
                tracing::info!("peer {}: truncating the txn log after {after:#x} (TRUNC)", m.me);
                writer.truncate(after).await.map_err(|e| format!("txn log truncation failed: {e}"))?;
            }
            PersistOp::Rejoined => {
                super::offcore::clear_rejoin_pending(m.config.data_dir.clone())
                    .await
                    .map_err(|e| format!("clearing the rejoin mark: {e}"))?;
            }
            PersistOp::Membership { zxid, voters, observers } => {
                let servers = m.configs.remove(&zxid).map(|c| c.servers).unwrap_or_default();
                m.configs.retain(|&z, _| z > zxid);
                if let (Some(cfg), false) = (&m.config.config_path, servers.is_empty()) {
                    // ZooKeeper's `zoo.cfg.dynamic.<version>`: the lines alone, beside zoo.cfg.
                    let path = std::path::PathBuf::from(format!("{}.dynamic.{zxid:x}", cfg.display()));
                    let text: String = servers.iter().map(|s| format!("server.{}={}\n", s.id, s.value())).collect();
                    let written =
                        super::offcore::run(move || storage::files::write_atomic(&path, text.as_bytes()).map(|_| path))
                            .await;
                    match written {
                        Ok(path) => tracing::info!("peer {}: membership {zxid:#x} written to {}", m.me, path.display()),
                        Err(e) => tracing::warn!("peer {}: writing the dynamic config file: {e}", m.me),
                    }
                }
                let membership = storage::peer_state::Membership { version: zxid, voters, observers, servers };
                super::offcore::write_membership(m.config.data_dir.clone(), membership)
                    .await
                    .map_err(|e| format!("writing the membership: {e}"))?;
            }
            PersistOp::InstallSnapshot { zxid, .. } => {
                // The streamed SNAP was received whole, checked and fsynced before the peer saw it.
                tracing::info!("peer {}: installing the leader's snapshot at {zxid:#x} (SNAP)", m.me);
                m.snap_in.install(zxid).await?;
                writer.restart_after_snapshot(zxid).await.map_err(|e| format!("restarting the txn log: {e}"))?;
            }
        }
        m.step(Input::Persisted);
    }
    Ok(())
}

/// A message on a leader's link to this member: parts of a streamed SNAP go to `snap_in`
/// (the peer gets one `Snap` once it is whole and staged); a broken transfer, or a SNAP sent in
/// one piece (not part of this protocol version), makes the follower elect again.
async fn on_leader_frame(m: &mut Member, from: Sid, msg: Message) {
    let leader = match m.peer.role() {
        Role::Following { leader, serving: false } => Some(leader),
        _ => None,
    };
    if msg.is_snap_part() {
        match m.snap_in.on_part(from, msg, leader).await {
            Received::Nothing => {}
            Received::Broken(why) => {
                tracing::warn!("peer {}: the SNAP from peer {from} broke: {why}; electing again", m.me);
                m.step(Input::PeerLost { sid: from });
            }
            Received::Complete(snap) => {
                let Message::ToFollower { body: LeaderMsg::Snap { zxid, .. }, .. } = &snap else { return };
                let zxid = *zxid;
                let before = m.out.len();
                m.step(Input::Message { from, msg: snap });
                let taken = m.out[before..].iter().any(|o| matches!(o, Output::Restore { zxid: z, .. } if *z == zxid));
                if !taken {
                    m.snap_in.unstage(zxid).await;
                }
            }
        }
        if leader == Some(from) {
            m.step(Input::Heard { from });
        }
        return;
    }
    if let Message::ToFollower { body: LeaderMsg::Snap { .. }, .. } = msg {
        tracing::warn!("peer {}: peer {from} sent a SNAP in one message (not streamed); electing again", m.me);
        m.step(Input::PeerLost { sid: from });
        return;
    }
    if m.snap_in.receiving_from(from) {
        // The leader sends nothing else on the link while its SNAP streams: the transfer is over.
        m.snap_in.discard().await;
    }
    m.step(Input::Message { from, msg });
}

/// Performs the peer's outputs until it has nothing more to say.
async fn drain_outputs(m: &mut Member, log: &mut LogSlot<Appends>, net: &mut PeerNet, now: Now) -> Result<(), String> {
    for _ in 0..OUTPUT_ROUNDS_MAX {
        let outs = std::mem::take(&mut m.out);
        if outs.is_empty() {
            break;
        }
        let mut persists = Vec::new();
        // Servers a reconfiguration of this pass removed: their connections close once what
        // the pass sends them is queued (a leader's COMMIT follows its delivery).
        let mut removed = Vec::new();
        for o in outs {
            match o {
                Output::Send(env) => match m.snap_out.route(env.to, env.msg) {
                    Routed::Send(msg) => {
                        let sent = net.send(env.to, &msg);
                        tracing::trace!("peer {} → {}: {msg:?} ({sent:?})", m.me, env.to);
                    }
                    Routed::Held => {}
                    Routed::Overflow => {
                        net.disconnect(env.to);
                        m.step(Input::PeerLost { sid: env.to });
                    }
                },
                Output::Persist(op) => persists.push(op),
                Output::Deliver(t) => m.deliver(t)?,
                Output::Restore { zxid, .. } => {
                    // The SNAP was staged in a file by `snap_in`; read and decoded off the executor.
                    let (tree, _state) = m.snap_in.load(zxid).await?;
                    m.committed = tree;
                    m.delivered_since_snapshot = 0;
                    m.delivered_bytes_since_snapshot = 0;
                    m.control(ToClientCore::Reset(m.committed.clone()));
                    m.snapshot_membership();
                }
                Output::SendSnapshot { to, link, leader_nonce, seq, zxid } => {
                    assert_eq!(
                        m.committed.last_zxid(),
                        zxid,
                        "a snapshot asked for at a zxid the committed tree is not at"
                    );
                    // Streamed from an O(1) clone of the tree, encoded off this core (`snap_stream`).
                    tracing::info!("peer {}: sending peer {to} a snapshot at {zxid:#x} (streamed in chunks)", m.me);
                    if let Err(e) = m.snap_out.start(to, link, leader_nonce, seq, m.committed.clone()) {
                        tracing::warn!("peer {}: {e}; disconnecting peer {to} (it re-syncs)", m.me);
                        net.disconnect(to);
                        m.step(Input::PeerLost { sid: to });
                    }
                }
                Output::Forwarded { from, data } => {
                    if m.held.is_empty() && m.pass_has_room() && m.intake_open(net) {
                        m.on_forwarded(from, data, now);
                    } else {
                        m.held.push_back((from, data));
                    }
                }
                Output::FromLeader { data } => m.on_leader_reply(data),
                Output::Reconfigured { zxid, voters, observers } => {
                    let client_before = m.own_client();
                    m.reconfigured(zxid, &voters, &observers);
                    removed.extend(follow_membership(net, &mut m.followed, &m.membership).await);
                    // A line with a client address before and another one now moves the listener.
                    let moved = m.own_client().filter(|after| client_before.as_ref().is_some_and(|b| b != after));
                    if let Some((host, port)) = moved {
                        m.move_client_listener(host, port).await;
                    }
                }
                Output::ReadLog { to, link, after, upto, check_after } => {
                    m.read_log(to, link, after, upto, check_after)
                }
            }
        }
        for sid in removed {
            net.retire(sid);
        }
        if !persists.is_empty() {
            persist(m, log, persists).await?;
        }
        m.check_role(now);
    }
    m.check_role(now);
    Ok(())
}

/// The quorum addresses of each server as written in its line, by sid.
type Followed = BTreeMap<Sid, Vec<crate::config::ServerAddr>>;

/// The lines of `membership` whose quorum addresses differ from those `followed` holds (new
/// servers and moved ones): the only ones a reconfiguration needs resolved again.
fn changed_lines<'a>(followed: &Followed, membership: &'a DynConfig) -> Vec<&'a crate::config::ServerSpec> {
    membership.servers.iter().filter(|s| followed.get(&s.id) != Some(&s.addrs)).collect()
}

/// The quorum addresses of `s` when every host is an IP literal (no lookup needed), else None.
fn literal_addrs(s: &crate::config::ServerSpec) -> Option<Vec<SocketAddr>> {
    s.addrs.iter().map(|a| ip_literal(&a.host).map(|ip| SocketAddr::new(ip, a.quorum_port))).collect()
}

/// `host` as an IP address when it is a literal (IPv6 with or without brackets), else None.
fn ip_literal(host: &str) -> Option<std::net::IpAddr> {
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// Makes every peer check of `net` follow `membership` (committed): its members' hosts are
/// accepted (joining ones also dialed), those of servers no longer in it refused. Only lines
/// new or changed since `followed` are resolved; a line naming a host (not an IP literal) is
/// resolved on the blocking pool, so the pipeline core never waits on DNS (the pipeline task
/// awaits the lookup, keeping reconfigurations in commit order). A line that does not resolve
/// is retried at the next reconfiguration. Returns the servers it removed (for `PeerNet::retire`).
async fn follow_membership(net: &mut PeerNet, followed: &mut Followed, membership: &DynConfig) -> Vec<Sid> {
    let me = net.me();
    for s in changed_lines(followed, membership) {
        let resolved = match literal_addrs(s) {
            Some(addrs) => Ok(addrs),
            None => {
                let addrs = s.addrs.clone();
                super::offcore::run(move || {
                    addrs.iter().map(|a| resolve(&a.host, a.quorum_port)).collect::<Result<Vec<_>, _>>()
                })
                .await
            }
        };
        match resolved {
            Ok(addrs) if s.id == me => match net.listen_on(&addrs) {
                Ok(()) => {
                    followed.insert(s.id, s.addrs.clone());
                }
                Err(e) => tracing::error!("peer {me}: the membership moves this member's quorum address, but {e}"),
            },
            Ok(addrs) => {
                let names: Vec<String> = s.addrs.iter().map(|a| a.host.clone()).collect();
                net.set_member(s.id, &names, &addrs);
                followed.insert(s.id, s.addrs.clone());
            }
            Err(e) => tracing::warn!("peer {me}: server.{} is a member, but {e}", s.id),
        }
    }
    followed.retain(|sid, _| membership.servers.iter().any(|s| s.id == *sid));
    let mut removed = Vec::new();
    for sid in net.members() {
        if !membership.servers.iter().any(|s| s.id == sid) {
            tracing::info!(
                "peer {me}: server.{sid} is not a member (membership {:#x}); its connections are refused",
                membership.version
            );
            net.remove_peer(sid);
            removed.push(sid);
        }
    }
    removed
}

/// Quorum TLS as configured: the stores read on the blocking pool (an error refuses the start),
/// and each server's host as its certificate must name it.
async fn quorum_tls(config: &Config) -> Result<Option<Rc<PeerTls>>, String> {
    let Some(settings) = config.quorum_tls.clone() else { return Ok(None) };
    let ctx = super::offcore::run(move || crate::tls::quorum::QuorumContext::load(settings))
        .await
        .map_err(|e| format!("quorum TLS: {e}"))?;
    let s = &ctx.settings;
    tracing::info!(
        "quorum TLS: {}, peer certificates {:?}, host name verification {}/{} (dialed/accepted), key store {}{}",
        match (s.ssl_quorum, s.port_unification) {
            (true, false) => "peers dialed and accepted over TLS only",
            (true, true) => "peers dialed over TLS, accepted over TLS or plain (portUnification)",
            _ => "peers dialed in plain, accepted over TLS or plain (portUnification)",
        },
        s.stores.client_auth,
        s.stores.hostname_verification,
        s.stores.client_hostname_verification,
        s.stores.key_store.path.display(),
        if s.reload_cert_files { ", reloaded when a store file changes" } else { "" },
    );
    if s.port_unification || s.stores.client_auth != crate::tls::ClientAuth::Need {
        tracing::warn!(
            "quorum TLS: a peer without a certificate can connect (portUnification or ssl.quorum.clientAuth); only \
             the server.N address check stands for it"
        );
    }
    let hosts = config.servers.iter().map(|s| (s.id, s.addrs.iter().map(|a| a.host.clone()).collect())).collect();
    Ok(Some(Rc::new(PeerTls { ctx: Arc::new(ctx), hosts: RefCell::new(hosts) })))
}

/// The membership a member starts in: the last committed reconfiguration's when the
/// `membership` file holds its server lines, else the configuration's `server.N` lines
/// (version 0, or the committed version when the file holds only the sids).
pub fn start_membership(config: &Config) -> Result<DynConfig, String> {
    let stored =
        storage::peer_state::read_membership(&config.data_dir).map_err(|e| format!("reading the membership: {e}"))?;
    Ok(match stored {
        Some(m) if !m.servers.is_empty() => DynConfig::new(m.version, m.servers),
        Some(m) => {
            let lines = config.servers.iter().filter(|s| m.voters.contains(&s.id) || m.observers.contains(&s.id));
            DynConfig::new(
                m.version,
                lines.cloned().map(|mut s| {
                    s.observer = m.observers.contains(&s.id);
                    s
                }),
            )
        }
        None => DynConfig::new(config.dynamic_config_version, config.servers.iter().cloned()),
    })
}

/// Puts `m` into `/zookeeper/config` unless the tree holds as new a one already (a snapshot
/// taken after that reconfiguration committed). The static membership gets mzxid 0 and mtime
/// 0 (ZooKeeper: its start-up time; here every member's tree stays the same).
pub fn publish_membership(tree: &mut DataTree, m: &DynConfig) {
    let held = tree.get(path::CONFIG_NODE).map(|n| (n.mzxid, n.data.as_ref().is_some_and(|d| !d.is_empty())));
    if held.is_some_and(|(mzxid, has_data)| has_data && mzxid >= m.version) {
        return;
    }
    tree.set_config(Bytes::from(m.text()), m.version, 0);
}

/// `ZabConfig::membership_of`: the voters and observers a reconfiguration record installs.
fn reconfig_membership(record: &[u8]) -> Option<(Vec<Sid>, Vec<Sid>)> {
    let text = std::str::from_utf8(codec::reconfig_text(record)?).ok()?;
    let c = DynConfig::parse(text).ok()?;
    Some((c.voters(), c.observers()))
}

/// Runs the pipeline core of an ensemble member until shutdown.
pub async fn run(params: EnsembleParams) -> Result<(), String> {
    let EnsembleParams {
        config,
        stats,
        recovered,
        tree: committed,
        my_id,
        from_cores,
        to_cores,
        log_writing,
        shutdown,
    } = params;
    let mut voters = Vec::new();
    let mut observers = Vec::new();
    let mut peers = BTreeMap::new();
    for s in &config.servers {
        let addrs = s.addrs.iter().map(|a| resolve(&a.host, a.quorum_port)).collect::<Result<Vec<_>, _>>()?;
        peers.insert(s.id, addrs);
        if s.observer {
            observers.push(s.id);
        } else {
            voters.push(s.id);
        }
    }
    let listen: Vec<String> = peers
        .get(&my_id)
        .ok_or_else(|| format!("myid {my_id} names no server.{my_id} line"))?
        .iter()
        .map(|a| a.to_string())
        .collect();
    let listen = listen.join(", ");
    let zab_cfg = ZabConfig {
        my_id,
        voters,
        observers,
        init_limit_ticks: config.init_limit_ticks,
        sync_limit_ticks: config.sync_limit_ticks,
        zxid_counter_max: ZXID_COUNTER_MAX,
        sync_chunk_bytes_max: SYNC_CHUNK_BYTES_MAX,
        commit_log_count: usize::try_from(config.commit_log_count).unwrap_or(usize::MAX),
        membership_of: reconfig_membership,
    };
    let (accepted_epoch, current_epoch) =
        storage::peer_state::read_epochs(&config.data_dir).map_err(|e| format!("reading the epochs: {e}"))?;
    let mut log_txns = Vec::with_capacity(recovered.records.len());
    for r in &recovered.records {
        let zxid = codec::record_zxid(r).ok_or("a recovered log record is shorter than its zxid")?;
        log_txns.push(zab::Txn { zxid, data: r.clone() });
    }
    let lost_log =
        storage::peer_state::rejoin_pending(&config.data_dir).map_err(|e| format!("reading the rejoin mark: {e}"))?;
    if lost_log {
        tracing::warn!(
            "peer {my_id}: this member lost logged txns; it counts toward no quorum until it has synced with an \
             established leader"
        );
    }
    let membership = storage::peer_state::read_membership(&config.data_dir)
        .map_err(|e| format!("reading the membership: {e}"))?
        .map(|m| (m.version, m.voters, m.observers));
    let durable = zab::Durable {
        accepted_epoch,
        current_epoch,
        snapshot_zxid: recovered.snapshot_zxid,
        log: log_txns,
        lost_log,
        membership,
    };
    // The state machine starts at the snapshot; ZAB delivers the log once it is committed.
    if committed.last_zxid() != recovered.snapshot_zxid {
        return Err(format!(
            "the start-up tree is at {:#x}, not at the snapshot's {:#x}",
            committed.last_zxid(),
            recovered.snapshot_zxid
        ));
    }
    let now = Now::read();
    // A date, not a timeout: it only has to differ from this member's earlier runs.
    let incarnation = (now.wall_ms as u64) << 8 | my_id;
    let zab_cfg_voters = zab_cfg.voters.clone();
    let peer = Peer::new(zab_cfg, durable, incarnation);
    // The log opens after the peer listeners: everything that can refuse the start before it
    // (the quorum TLS stores, a taken peer port) then fails with no disk work started. The log's
    // writer starts a spare segment on glommio's blocking pool at once, and an executor that
    // stops with such a call in flight makes glommio's pool thread panic as it answers.
    let tls = quorum_tls(&config).await?;
    let sasl = config.quorum_sasl.clone().map(|q| {
        let k = &q.keys;
        tracing::info!(
            "quorum SASL ({}): dialing as {:?} (JAAS section {}), accepting {} (section {}); learner requires it: {}, \
             server requires it: {}; at most {} peer connections authenticating at once",
            q.mechanism_name(),
            q.username(),
            k.learner_section,
            match &q.mechanism {
                crate::sasl::quorum::QuorumMechanism::DigestMd5 { users, .. } => format!("{} user(s)", users.len()),
                crate::sasl::quorum::QuorumMechanism::Kerberos { acceptor, .. } => {
                    format!("as {} (peers' principals must name their server.N host)", acceptor.principal)
                }
            },
            k.server_section,
            k.learner_require,
            k.server_require,
            k.authenticating_max
        );
        if !k.server_require {
            tracing::warn!(
                "quorum SASL: quorum.auth.serverRequireSasl=false lets peers in that do not authenticate or fail to"
            );
        }
        let hosts = config.servers.iter().map(|s| (s.id, s.addrs.iter().map(|a| a.host.clone()).collect())).collect();
        Rc::new(crate::server::peer_auth::PeerSasl::new(q, hosts))
    });
    let (mut net, peer_rx) = PeerNet::start_secured(my_id, &peers, tls, sasl).map_err(|e| e.to_string())?;
    let log_writer = open_log(&config, &recovered.tail, recovered.last_zxid + 1, &stats).await?;
    drop(recovered);
    tracing::info!(
        "peer {my_id}: ensemble member at zxid {:#x} (epochs {accepted_epoch}/{current_epoch}), peers on {listen}",
        committed.last_zxid()
    );

    let wake = Rc::new(Semaphore::new(0));
    let mut log: LogSlot<Appends> = LogSlot::new(log_writer, wake.clone(), log_writing);
    let mut m = Member {
        config: config.clone(),
        me: my_id,
        peer,
        membership: start_membership(&config)?,
        // The start-up resolved every configured line (`peers`) before the transport started.
        followed: config.servers.iter().map(|s| (s.id, s.addrs.clone())).collect(),
        configs: BTreeMap::new(),
        committed,
        prep: None,
        sessions: SessionTracker::new(config.tick_time_ms, session::first_session_id(my_id as u8, now.wall_ms)),
        owners: HashMap::new(),
        conn_sessions: HashMap::new(),
        session_conns: HashMap::new(),
        connecting: HashMap::new(),
        revalidating: HashMap::new(),
        forwarded: HashMap::new(),
        forwarded_bytes: 0,
        held: VecDeque::new(),
        intake_bytes: 0,
        intake_closed: false,
        persist_queue: VecDeque::new(),
        persist_queue_bytes: 0,
        disk_full: false,
        other_voters: zab_cfg_voters.iter().copied().filter(|&v| v != my_id).collect(),
        quorum: zab_cfg_voters.len() / 2 + 1,
        next_request: 0,
        answers: HashMap::new(),
        proposed_at: VecDeque::new(),
        sync_tokens: HashMap::new(),
        syncs: VecDeque::new(),
        in_order: HashMap::new(),
        touched: HashSet::new(),
        next_token: 0,
        serving: None,
        observer: config.servers.iter().any(|s| s.id == my_id && s.observer),
        unserved_since: Some(std::time::Instant::now()),
        read_only: None,
        looking_since: None,
        local: crate::local_session::LocalSessions::new(config.tick_time_ms),
        commits: CommitQueue::new(),
        rounds: Rounds::default(),
        to_cores: Vec::new(),
        out: Vec::new(),
        encode_buf: BytesMut::with_capacity(64 * 1024),
        scratch_changes: Vec::new(),
        delivered_since_snapshot: 0,
        delivered_bytes_since_snapshot: 0,
        snapshot_roll: draw_snapshot_roll(&config),
        snap_out: SnapSender::default(),
        snap_in: SnapReceiver::new(config.data_dir.clone()),
        log_reads: Rc::default(),
        wake: wake.clone(),
        collections: Collections::new(config.client_cores),
        stats: stats.clone(),
    };
    // A restarted member follows the membership it last saw committed, not only its server lines.
    for sid in follow_membership(&mut net, &mut m.followed, &m.membership).await {
        net.retire(sid);
    }

    let ticked = Rc::new(Cell::new(false));
    // A task wakes the loop every SNAP_PACE_MS while a SNAP streams (see `snap_stream`).
    let pacing = Rc::new(Cell::new(false));
    let connected = Rc::new(Cell::new(false));
    super::startup::warn_while_waiting(format!("peer {my_id}: connecting to the client cores"), connected.clone());
    let inbox = Inbox::start(from_cores, wake.clone(), stats.clone()).await;
    let peer_inbox: Rc<std::cell::RefCell<VecDeque<PeerIn>>> = Rc::default();
    let peer_reader = {
        let (q, wake) = (peer_inbox.clone(), wake.clone());
        glommio::spawn_local(async move {
            while let Some(m) = peer_rx.recv().await {
                q.borrow_mut().push_back(m);
                wake.signal(1);
                while q.borrow().len() >= PEER_INBOX_MESSAGES_MAX {
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        })
        .detach()
    };
    let senders = CoreSenders::connect(to_cores, stats.clone()).await;
    connected.set(true);
    let tick_ms = (config.tick_time_ms as u64 / 2).clamp(1, TICK_INTERVAL_MS_MAX);
    let ticker = start_ticker(tick_ms, wake.clone(), ticked.clone());
    let mut snapshots = Snapshots::new(now.mono_ms, stats.clone());
    let mut last_peer_tick_ms = now.mono_ms;
    let mut last_reap_ms = now.mono_ms;
    m.peer.start(&mut m.out);
    let mut result = Ok(());
    loop {
        if wake.acquire(1).await.is_err() {
            break;
        }
        let now = Now::read();
        let stopping = shutdown.load(Ordering::Relaxed);
        m.intake_bytes = 0;
        m.release_held(&net, now);
        // Client requests the last pass held go first (a connection's order), then the inbox,
        // then the rounds of what this pass held (`commit_queue::Rounds`).
        if !m.rounds.is_empty() && m.pass_has_room() && m.intake_open(&net) {
            for msg in m.rounds.next_round() {
                m.on_client(msg, now);
            }
        }
        while m.held.is_empty() && m.pass_has_room() && m.intake_open(&net) {
            let Some(msg) = inbox.pop() else { break };
            m.take_in(msg, now);
        }
        while !m.rounds.is_empty() && m.pass_has_room() && m.intake_open(&net) {
            for msg in m.rounds.next_round() {
                m.on_client(msg, now);
            }
        }
        inbox.made_room();
        m.forward_touches();
        while !m.log_behind() {
            let next = peer_inbox.borrow_mut().pop_front();
            match next {
                None => break,
                Some((from, Some(msg))) => {
                    tracing::trace!("peer {my_id} ← {from}: {msg:?}");
                    if let Message::ToFollower { body, .. } = &msg {
                        let chunk = match body {
                            LeaderMsg::SnapChunk { data } => data.len(),
                            _ => 0,
                        };
                        on_leader_frame(&mut m, from, msg).await;
                        net.snap_chunk_taken(chunk);
                    } else {
                        m.step(Input::Message { from, msg });
                    }
                }
                Some((sid, None)) => {
                    if m.snap_in.receiving_from(sid) {
                        m.snap_in.discard().await;
                    }
                    m.snap_out.abandon(sid);
                    m.step(Input::PeerLost { sid });
                }
            }
        }
        if m.snap_out.active() && !matches!(m.peer.role(), Role::Leading { .. }) {
            m.snap_out.clear();
        }
        if m.snap_out.active() {
            let (heard, gone) = m.snap_out.pump(&net, my_id);
            for from in heard {
                m.step(Input::Heard { from });
            }
            for sid in gone {
                m.step(Input::PeerLost { sid });
            }
            if m.snap_out.active() && !pacing.replace(true) {
                let (wake, pacing) = (wake.clone(), pacing.clone());
                glommio::spawn_local(async move {
                    // Looks again soon while a stream is in flight (its follower's queue drains
                    // and the encoder fills the channel without waking the loop).
                    while pacing.get() {
                        glommio::timer::sleep(std::time::Duration::from_millis(SNAP_PACE_MS)).await;
                        wake.signal(1);
                    }
                })
                .detach();
            }
        }
        if !m.snap_out.active() {
            pacing.set(false);
        }
        if let Some(z) = snapshots.take_written() {
            m.step(Input::SnapshotTaken { zxid: z });
        }
        loop {
            let read = m.log_reads.borrow_mut().pop_front();
            let Some(read) = read else { break };
            m.step(read);
        }
        if ticked.replace(false) && now.mono_ms - last_peer_tick_ms >= config.tick_time_ms as i64 {
            last_peer_tick_ms = now.mono_ms;
            m.step(Input::Tick);
            m.check_read_only();
            m.expire_read_only(now);
            if m.serving.is_some() {
                m.expire_local(now);
            }
            let local = m.local.len() + m.read_only.as_ref().map_or(0, |l| l.len());
            m.stats.local_sessions.store(local as u64, Ordering::Relaxed);
            // A leader holding requests back holds their touches too: no expiry meanwhile.
            if m.leading() && m.held.is_empty() && m.intake_open(&net) {
                let reap = now.mono_ms - last_reap_ms >= config.container_check_interval_ms as i64;
                if reap {
                    last_reap_ms = now.mono_ms;
                }
                m.on_tick_leader(now, reap);
            }
        }
        // A finished append is reported, and what queued behind it starts (a full disk: the
        // waiting persists are tried again, at most once a pass; the ticker wakes the loop
        // every half tick).
        if let Err(e) = drain_persists(&mut m, &mut log).await {
            tracing::error!("peer {my_id}: {e}; stopping");
            result = Err(e);
            break;
        }
        if let Err(e) = drain_outputs(&mut m, &mut log, &mut net, now).await {
            tracing::error!("peer {my_id}: {e}; stopping");
            result = Err(e);
            break;
        }
        m.release_syncs();
        m.flush_items();
        if let Some(writer) = log.idle() {
            stats.publish_syncs(writer.sync_times());
        }
        if m.serving.is_some() {
            if let Some(since) = m.unserved_since.take() {
                stats.election_time_ms.store(since.elapsed().as_millis() as u64, Ordering::Relaxed);
                stats.elections.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (learners, synced) = m.peer.learners();
        stats.learners.store(learners as u64, Ordering::Relaxed);
        stats.synced_learners.store(synced as u64, Ordering::Relaxed);
        stats.inbox_depth.store(inbox.len() as u64, Ordering::Relaxed);
        for msg in std::mem::take(&mut m.to_cores) {
            match msg {
                CoreMsg::Batches(batches) => senders.send_batches(batches).await,
                CoreMsg::Control(c) => senders.send_all(c).await,
            }
        }
        let open = m.intake_open(&net);
        if open == m.intake_closed {
            m.intake_closed = !open;
            tracing::debug!(
                "peer {my_id}: {}",
                if open { "peers caught up; taking requests again" } else { "peers behind; holding new requests" }
            );
        }
        // Held-back work waits for the peers' acks (peer messages) or the ticker, not a spin.
        let intake_waits = (!inbox.is_empty() || !m.held.is_empty() || !m.rounds.is_empty()) && open;
        // Behind on the log: the append in flight wakes the loop when it lands.
        let peers_wait = !peer_inbox.borrow().is_empty() && !m.log_behind();
        if !m.out.is_empty() || intake_waits || peers_wait {
            wake.signal(1);
        }
        if config.snapshot_due(m.delivered_since_snapshot, m.delivered_bytes_since_snapshot, m.snapshot_roll)
            && snapshots.idle()
        {
            m.delivered_since_snapshot = 0;
            m.delivered_bytes_since_snapshot = 0;
            m.snapshot_roll = draw_snapshot_roll(&config);
            // The snapshot's roll needs the log writer: the append in flight lands first.
            if let Err(e) = settle_log(&mut m, &mut log).await {
                result = Err(e);
                break;
            }
            if !m.out.is_empty() {
                wake.signal(1);
            }
            let writer = log.idle().expect("a settled log slot holds its writer");
            if let Err(e) = snapshots.start(&config, writer, m.committed.clone(), now.mono_ms).await {
                result = Err(e);
                break;
            }
        }
        if stopping {
            if let Err(e) = flush_persists(&mut m, &mut log).await {
                result = Err(e);
                break;
            }
            tracing::info!("peer {my_id}: stopping at zxid {:#x}", m.committed.last_zxid());
            break;
        }
    }
    senders.shutdown().await;
    ticker.cancel();
    peer_reader.cancel();
    drop(inbox);
    drop(net);
    if let (_, Err(e)) = log.close().await {
        tracing::warn!("closing the txn log: {e}");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_server_spec, ServerSpec};

    fn line(id: u64, value: &str) -> ServerSpec {
        parse_server_spec(id, value).expect("a valid server line")
    }

    #[test]
    fn only_new_or_moved_lines_are_resolved_again() {
        let before = DynConfig::new(
            1,
            [
                line(1, "127.0.0.1:2001:3001:participant;2181"),
                line(2, "127.0.0.2:2002:3002:participant;2182"),
                line(3, "peer3.example:2003:3003:participant;2183"),
            ],
        );
        let mut followed: Followed = before.servers.iter().map(|s| (s.id, s.addrs.clone())).collect();
        assert!(changed_lines(&followed, &before).is_empty());
        // server.2 moves its quorum port, server.4 joins, server.3 keeps its line but its client
        // port (not a peer address) changes: only 2 and 4 are resolved.
        let after = DynConfig::new(
            2,
            [
                line(1, "127.0.0.1:2001:3001:participant;2181"),
                line(2, "127.0.0.2:2102:3102:participant;2182"),
                line(3, "peer3.example:2003:3003:participant;2283"),
                line(4, "127.0.0.4:2004:3004:participant;2184"),
            ],
        );
        let ids: Vec<u64> = changed_lines(&followed, &after).iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![2, 4]);
        for s in changed_lines(&followed, &after).into_iter().cloned().collect::<Vec<_>>() {
            followed.insert(s.id, s.addrs.clone());
        }
        assert!(changed_lines(&followed, &after).is_empty());
    }

    /// After a full disk stopped an append of several appends part-way, the appends logged
    /// whole are reported (in order), and the rest go back with only their unlogged records,
    /// each still one append (one `Persisted` each in the end).
    #[test]
    fn a_part_logged_append_splits_where_the_durable_log_ends() {
        let t = |zxid: i64| zab::Txn { zxid, data: Bytes::new() };
        let zxids = |a: &Appends| a.iter().map(|v| v.iter().map(|t| t.zxid).collect()).collect::<Vec<Vec<i64>>>();
        let appends = || vec![vec![t(5), t(6)], vec![t(7), t(8), t(9)], vec![], vec![t(10)]];
        let (logged, again) = split_logged(appends(), 8);
        assert_eq!(zxids(&logged), vec![vec![5, 6]]);
        assert_eq!(zxids(&again), vec![vec![8, 9], vec![], vec![10]]);
        let (logged, again) = split_logged(appends(), 5);
        assert_eq!((logged.len(), zxids(&again)), (0, zxids(&appends())), "nothing logged: all again");
        // An epoch's first zxid after a roll (the log takes that epoch next): all before it logged.
        let (logged, again) = split_logged(vec![vec![t(9)], vec![t((2 << 32) | 1)]], (2 << 32) | 1);
        assert_eq!((zxids(&logged), zxids(&again)), (vec![vec![9]], vec![vec![(2 << 32) | 1]]));
    }

    #[test]
    fn ip_literals_need_no_lookup_and_host_names_do() {
        let v4 = line(1, "127.0.0.9:2001:3001|[::1]:2002:3002:participant");
        assert_eq!(literal_addrs(&v4), Some(vec!["127.0.0.9:2001".parse().unwrap(), "[::1]:2002".parse().unwrap()]));
        assert_eq!(literal_addrs(&line(2, "127.0.0.9:2001:3001|localhost:2002:3002")), None);
        assert_eq!(literal_addrs(&line(3, "peer3.example:2003:3003")), None);
    }
}
