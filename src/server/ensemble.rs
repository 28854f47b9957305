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
//! - Sessions are global: created, closed and expired by txns; the leader alone keeps their
//!   deadlines (refreshed by touches from every member, which a follower forwards as soon as
//!   its client cores report them) and knows which member owns each; a write from a member
//!   that does not own its session fails with SessionMoved.
//! - A member serves clients only while its peer is an established leader or a synced
//!   follower; on losing that it closes every client connection (clients move elsewhere).
//! - Snapshots are of the committed tree, never of the leader's prep tree.
//! - Persists are done in the order the peer asked for them and reported only once durable; a
//!   full disk leaves them queued (bounded) and retried every tick, never dropped or reordered.
//! - Backpressure, never drops: the member takes no new work (client requests, and a
//!   leader's forwarded requests, which wait in order in `held`) while the peers it needs are
//!   behind (`PeerNet::keeping_up`): a leader while fewer than a quorum of voters (itself
//!   included) keep up, a follower while its leader does not or while its forwarded writes
//!   not yet proposed pass `FORWARDED_BYTES_MAX`. One pass takes at most
//!   `PASS_INTAKE_BYTES_MAX` of proposals and forwards. A leader expires no session while it
//!   holds requests back (their touches are among them).

use super::clock::Now;
use super::inspect::Collections;
use super::log_writer::TxnLogWriter;
use super::messages::{Commit, CommitBatch, ServerMode, ToClientCore, ToPipeline};
use super::peer_net::{PeerIn, PeerNet};
use super::pipeline::{
    dated, doomed_nodes, open_log, refuse_if_ahead, relay_inspection, start_ticker, CoreSenders, Inbox, Snapshots,
    TICK_INTERVAL_MS_MAX,
};
use crate::config::Config;
use crate::proto::peer::PEER_FORWARD_BYTES_MAX;
use crate::proto::{ErrorCode, Id};
use crate::session::{self, ConnRef, SessionTracker};
use crate::storage::{self, recovery::Recovered};
use crate::tree::DataTree;
use crate::txn::forward::{self, Forward, LeaderReply};
use crate::txn::prep::{prep, PrepContext};
use crate::txn::{apply, codec, Txn, TxnHeader, TxnOp, WriteOp};
use crate::zab::message::{LeaderMsg, Message};
use crate::zab::peer::{Input, Output, Peer, PersistOp, Role};
use crate::zab::{self, Sid, ZabConfig, Zxid};
use bytes::{Bytes, BytesMut};
use glommio::channels::shared_channel::{SharedReceiver, SharedSender};
use glommio::sync::Semaphore;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The largest zxid counter a leader uses before it forces a new epoch (ZooKeeper's rule).
pub const ZXID_COUNTER_MAX: u32 = 0xffff_fffe;
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

pub struct EnsembleParams {
    pub config: Arc<Config>,
    pub stats: Arc<super::stats::Stats>,
    pub recovered: Arc<Recovered>,
    pub my_id: Sid,
    pub from_cores: Vec<SharedReceiver<Vec<ToPipeline>>>,
    pub to_cores: Vec<SharedSender<ToClientCore>>,
    pub shutdown: Arc<AtomicBool>,
}

/// What the loop must do with the client cores, in order.
enum CoreMsg {
    Items(Vec<Commit>),
    Control(ToClientCore),
}

/// A request waiting for its txn to be delivered here.
type Origin = (ConnRef, i32);

struct Member {
    config: Arc<Config>,
    me: Sid,
    peer: Peer,
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
    /// with their size.
    forwarded: HashMap<u64, (Origin, usize)>,
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
    answers: HashMap<Zxid, Origin>,
    /// Syncs waiting for the leader's zxid: token → conn, xid, path.
    sync_tokens: HashMap<u64, (ConnRef, i32, String)>,
    /// Syncs answered once the committed tree reaches the zxid.
    syncs: VecDeque<(Zxid, ConnRef, i32, String)>,
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
    items: Vec<Commit>,
    to_cores: Vec<CoreMsg>,
    out: Vec<Output>,
    encode_buf: BytesMut,
    scratch_changes: Vec<apply::Change>,
    delivered_since_snapshot: u64,
    collections: Collections,
    stats: Arc<super::stats::Stats>,
}

impl Member {
    fn step(&mut self, input: Input) {
        self.peer.step(input, &mut self.out);
    }

    fn flush_items(&mut self) {
        if !self.items.is_empty() {
            self.to_cores.push(CoreMsg::Items(std::mem::take(&mut self.items)));
        }
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

    fn on_client(&mut self, msg: ToPipeline, now: Now) {
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
        if self.serving.is_none() {
            // The cores close everything when told; these crossed that message.
            match msg {
                ToPipeline::Connect { conn, .. } | ToPipeline::Write { conn, .. } | ToPipeline::Sync { conn, .. } => {
                    self.items.push(Commit::Close { conn })
                }
                ToPipeline::Detached { conn } => self.forget_conn(conn),
                ToPipeline::Touch { .. } | ToPipeline::Inspect { .. } | ToPipeline::Report { .. } => {}
            }
            return;
        }
        match msg {
            ToPipeline::Connect { conn, session_id, passwd, timeout_ms, last_zxid_seen } => {
                if let Some(refusal) = refuse_if_ahead(conn, last_zxid_seen, self.committed.last_zxid()) {
                    self.items.push(refusal);
                    return;
                }
                let timeout_ms = self.config.negotiate_session_timeout(timeout_ms);
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
                if passwd.as_ref() != session::password_of(session_id) {
                    self.items.push(Commit::SessionExpired { conn });
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
            ToPipeline::Write { conn, xid, op, auth } => {
                let Some(&session_id) = self.conn_sessions.get(&conn) else { return };
                if self.leading() {
                    if let Some(zxid) = self.prep_write(self.me, session_id, xid, &auth, &op, now) {
                        self.answers.insert(zxid, (conn, xid));
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
                        self.items.push(Commit::Rejected { conn, xid, err: ErrorCode::MarshallingError.code() });
                        return;
                    }
                    let len = self.forward_encoded(data);
                    self.forwarded.insert(request, ((conn, xid), len));
                    self.forwarded_bytes += len;
                }
            }
            ToPipeline::Sync { conn, xid, path } => {
                let Some(&s) = self.conn_sessions.get(&conn) else { return };
                if self.leading() {
                    self.sessions.touch(s, now.mono_ms);
                    self.syncs.push_back((self.peer.last_zxid(), conn, xid, path));
                } else {
                    self.touched.insert(s);
                    let token = self.token();
                    self.sync_tokens.insert(token, (conn, xid, path));
                    self.forward_encoded(forward::encode_forward(&Forward::Sync { token }));
                }
            }
            ToPipeline::Touch { sessions } => {
                if self.leading() {
                    for s in sessions {
                        self.sessions.touch(s, now.mono_ms);
                    }
                } else {
                    self.touched.extend(sessions);
                }
            }
            ToPipeline::Detached { conn } => self.forget_conn(conn),
            ToPipeline::Inspect { .. } | ToPipeline::Report { .. } => {}
        }
    }

    /// The connection is gone: nothing waits for it any more (its session lives on).
    fn forget_conn(&mut self, conn: ConnRef) {
        if let Some(s) = self.conn_sessions.remove(&conn) {
            if self.session_conns.get(&s) == Some(&conn) {
                self.session_conns.remove(&s);
            }
        }
        // Its writes in flight stay where they are: their txns still come, and answer nobody.
        self.connecting.retain(|_, (c, _)| *c != conn);
        self.revalidating.retain(|_, (c, ..)| *c != conn);
        self.sync_tokens.retain(|_, (c, ..)| *c != conn);
    }

    /// A resume was judged: attach the session to `conn`, or refuse it.
    fn resumed(&mut self, conn: ConnRef, session_id: i64, timeout_ms: i32, alive: bool) {
        if !alive {
            self.items.push(Commit::SessionExpired { conn });
            return;
        }
        if let Some(old) = self.session_conns.insert(session_id, conn) {
            self.conn_sessions.remove(&old);
            self.items.push(Commit::Close { conn: old });
        }
        self.conn_sessions.insert(conn, session_id);
        let passwd = session::password_of(session_id);
        self.items.push(Commit::Connected { conn, session_id, timeout_ms, passwd });
    }

    // ---- the leader's side ----

    /// Proposes one txn prepared here (`prep` holds every earlier proposal); returns its zxid.
    fn propose(&mut self, session_id: i64, cxid: i32, op: TxnOp, now: Now) -> Option<Zxid> {
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
        self.step(Input::Propose { data });
        Some(zxid)
    }

    fn create_session(&mut self, from: Sid, id: i64, timeout_ms: i32, now: Now) {
        self.sessions.add(id, timeout_ms, now.mono_ms);
        self.owners.insert(id, from);
        let _ = self.propose(id, 0, TxnOp::CreateSession { timeout_ms }, now);
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
        op: &WriteOp,
        now: Now,
    ) -> Option<Zxid> {
        let tree = self.prep.as_ref()?;
        let txn_op = if !self.sessions.touch(session_id, now.mono_ms) {
            TxnOp::Error { err: ErrorCode::SessionExpired.code() }
        } else if self.owners.get(&session_id).is_some_and(|&o| o != from) {
            TxnOp::Error { err: ErrorCode::SessionMoved.code() }
        } else {
            let ctx = PrepContext {
                session_id,
                auth_ids: auth,
                extended_types_enabled: self.config.extended_types_enabled,
                txn_bytes_max: self.config.txn_bytes_max(),
            };
            prep(tree, op, &ctx)
        };
        if matches!(txn_op, TxnOp::CloseSession) {
            self.sessions.remove(session_id);
            self.owners.remove(&session_id);
        }
        self.propose(session_id, cxid, txn_op, now)
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
                if let Some(zxid) = self.prep_write(from, session_id, cxid, &auth, &op, now) {
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
        for (id, _) in self.sessions.expired(now.mono_ms) {
            tracing::info!("session {id:#x} expired");
            self.owners.remove(&id);
            let _ = self.propose(id, 0, TxnOp::CloseSession, now);
        }
        if reap {
            let Some(tree) = self.prep.as_ref() else { return };
            let ctx = PrepContext {
                session_id: 0,
                auth_ids: &[],
                extended_types_enabled: true,
                txn_bytes_max: self.config.txn_bytes_max(),
            };
            let mut ops = Vec::new();
            for p in doomed_nodes(tree, now.wall_ms) {
                let op = prep(tree, &WriteOp::DeleteContainer { path: p }, &ctx);
                if matches!(op, TxnOp::Delete { .. }) {
                    ops.push(op);
                }
            }
            for op in ops {
                let _ = self.propose(0, 0, op, now);
            }
        }
    }

    // ---- a follower's side ----

    fn on_leader_reply(&mut self, data: Bytes) {
        match forward::decode_reply(data) {
            Ok(LeaderReply::Proposed { request, zxid }) => {
                if let Some((origin, len)) = self.forwarded.remove(&request) {
                    self.forwarded_bytes -= len;
                    self.answers.insert(zxid, origin);
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
        self.scratch_changes.clear();
        apply::apply(&mut self.committed, &txn, &mut self.scratch_changes);
        self.delivered_since_snapshot += 1;
        let s = txn.header.session_id;
        let created = matches!(txn.op, TxnOp::CreateSession { .. });
        let closed = matches!(txn.op, TxnOp::CloseSession);
        let origin = self.answers.remove(&t.zxid);
        let answered = origin.is_some();
        self.items.push(Commit::Txn { txn, origin });
        if created {
            if let Some((conn, timeout_ms)) = self.connecting.remove(&s) {
                self.session_conns.insert(s, conn);
                self.conn_sessions.insert(conn, s);
                let passwd = session::password_of(s);
                self.items.push(Commit::Connected { conn, session_id: s, timeout_ms, passwd });
            }
        }
        if closed {
            if let Some(conn) = self.session_conns.remove(&s) {
                self.conn_sessions.remove(&conn);
                if !answered {
                    // Expired (or closed through another member): the client's connection goes.
                    self.items.push(Commit::Close { conn });
                }
            }
        }
        Ok(())
    }

    fn release_syncs(&mut self) {
        let at = self.committed.last_zxid();
        while self.syncs.front().is_some_and(|(z, ..)| *z <= at) {
            if let Some((_, conn, xid, path)) = self.syncs.pop_front() {
                self.items.push(Commit::SyncDone { conn, xid, path });
            }
        }
    }

    /// After each round of outputs: start or stop serving clients as the peer's role says.
    fn check_role(&mut self, now: Now) {
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
                self.items.push(Commit::Close { conn });
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
            self.touched.clear();
            self.prep = None;
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

/// Queues what the ZAB core asked to persist behind anything still waiting, then does what it
/// can (`drain_persists`). Queued bytes past `PERSIST_QUEUE_BYTES_MAX` (a disk full for that
/// long) stop the member: it has acknowledged nothing it did not log.
async fn persist(m: &mut Member, log: &mut TxnLogWriter, ops: Vec<PersistOp>) -> Result<(), String> {
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

/// Performs queued persists in order, reporting each done one to the ZAB core. Appends in a
/// row share a write and fdatasync up to ringkeeper.batchBytesMax (the log writer splits a
/// larger write into batches under the cap, too). An append the disk is too full for goes
/// back to the front of the queue with everything after it, and is tried again on the next
/// pass or tick: the member acknowledges none of it meanwhile, but keeps answering its peers
/// and clients (reads, and writes that a quorum of other members logs).
async fn drain_persists(m: &mut Member, log: &mut TxnLogWriter) -> Result<(), String> {
    while let Some(op) = m.persist_queue.pop_front() {
        m.persist_queue_bytes -= persist_op_bytes(&op);
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
                match log.append(&records).await {
                    Ok(()) => {
                        m.stats.count_log_batch(records.len());
                        for _ in 0..appends.len() {
                            m.step(Input::Persisted);
                        }
                        if std::mem::take(&mut m.disk_full) {
                            tracing::info!("peer {}: the txn log takes writes again", m.me);
                        }
                    }
                    Err(e) if super::log_writer::is_disk_full(&e) => {
                        if !std::mem::replace(&mut m.disk_full, true) {
                            tracing::error!(
                                "peer {}: txn log write failed, the disk is full: {e}; this member acknowledges no \
                                 proposal until it can log it (trying again every tick): free space in {}",
                                m.me,
                                m.config.data_log_dir.display()
                            );
                        }
                        for a in appends.into_iter().rev() {
                            let op = PersistOp::Append(a);
                            m.persist_queue_bytes += persist_op_bytes(&op);
                            m.persist_queue.push_front(op);
                        }
                        return Ok(());
                    }
                    Err(e) => return Err(format!("txn log write failed: {e}")),
                }
                continue;
            }
            PersistOp::Epochs { accepted, current } => {
                super::offcore::write_epochs(m.config.data_dir.clone(), accepted, current)
                    .await
                    .map_err(|e| format!("writing the epochs: {e}"))?;
            }
            PersistOp::Truncate { after } => {
                tracing::info!("peer {}: truncating the txn log after {after:#x} (TRUNC)", m.me);
                log.truncate(after).await.map_err(|e| format!("txn log truncation failed: {e}"))?;
            }
            PersistOp::Rejoined => {
                super::offcore::clear_rejoin_pending(m.config.data_dir.clone())
                    .await
                    .map_err(|e| format!("clearing the rejoin mark: {e}"))?;
            }
            PersistOp::InstallSnapshot { zxid, state } => {
                tracing::info!("peer {}: installing the leader's snapshot at {zxid:#x} (SNAP)", m.me);
                let path = m.config.data_dir.join(storage::snapshot::snapshot_name(zxid));
                storage::files::write_atomic(&path, &state)
                    .map_err(|e| format!("writing snapshot {}: {e}", path.display()))?;
                log.restart_after_snapshot(zxid).await.map_err(|e| format!("restarting the txn log: {e}"))?;
            }
        }
        m.step(Input::Persisted);
    }
    Ok(())
}

/// Performs the peer's outputs until it has nothing more to say.
async fn drain_outputs(m: &mut Member, log: &mut TxnLogWriter, net: &PeerNet, now: Now) -> Result<(), String> {
    for _ in 0..OUTPUT_ROUNDS_MAX {
        let outs = std::mem::take(&mut m.out);
        if outs.is_empty() {
            break;
        }
        let mut persists = Vec::new();
        for o in outs {
            match o {
                Output::Send(env) => {
                    let sent = net.send(env.to, &env.msg);
                    tracing::trace!("peer {} → {}: {:?} ({sent:?})", m.me, env.to, env.msg);
                }
                Output::Persist(op) => persists.push(op),
                Output::Deliver(t) => m.deliver(t)?,
                Output::Restore { zxid, state } => {
                    let tree = storage::snapshot::decode_snapshot(&state)
                        .map_err(|e| format!("the leader's snapshot at {zxid:#x} does not decode: {e}"))?;
                    if tree.last_zxid() != zxid {
                        return Err(format!(
                            "the leader's snapshot claims {zxid:#x} but holds {:#x}",
                            tree.last_zxid()
                        ));
                    }
                    m.committed = tree;
                    m.delivered_since_snapshot = 0;
                    m.control(ToClientCore::Reset(state));
                }
                Output::SendSnapshot { to, link, leader_nonce, seq, zxid } => {
                    assert_eq!(
                        m.committed.last_zxid(),
                        zxid,
                        "a snapshot asked for at a zxid the committed tree is not at"
                    );
                    let state = Bytes::from(storage::snapshot::encode_snapshot(&m.committed));
                    tracing::info!("peer {}: sending peer {to} a snapshot at {zxid:#x} ({} bytes)", m.me, state.len());
                    let body = LeaderMsg::Snap { zxid, state };
                    net.send(to, &Message::ToFollower { link, leader_nonce, seq, body });
                }
                Output::Forwarded { from, data } => {
                    if m.held.is_empty() && m.pass_has_room() && m.intake_open(net) {
                        m.on_forwarded(from, data, now);
                    } else {
                        m.held.push_back((from, data));
                    }
                }
                Output::FromLeader { data } => m.on_leader_reply(data),
            }
        }
        if !persists.is_empty() {
            persist(m, log, persists).await?;
        }
        m.check_role(now);
    }
    m.check_role(now);
    Ok(())
}

/// Runs the pipeline core of an ensemble member until shutdown.
pub async fn run(params: EnsembleParams) -> Result<(), String> {
    let EnsembleParams { config, stats, recovered, my_id, from_cores, to_cores, shutdown } = params;
    let mut voters = Vec::new();
    let mut observers = Vec::new();
    let mut peers = BTreeMap::new();
    let mut listen = None;
    for s in &config.servers {
        let addr = resolve(&s.host, s.quorum_port)?;
        if s.id == my_id {
            listen = Some(addr);
        }
        peers.insert(s.id, addr);
        if s.observer {
            observers.push(s.id);
        } else {
            voters.push(s.id);
        }
    }
    let listen = listen.ok_or_else(|| format!("myid {my_id} names no server.{my_id} line"))?;
    let zab_cfg = ZabConfig {
        my_id,
        voters,
        observers,
        init_limit_ticks: config.init_limit_ticks,
        sync_limit_ticks: config.sync_limit_ticks,
        zxid_counter_max: ZXID_COUNTER_MAX,
        sync_chunk_bytes_max: SYNC_CHUNK_BYTES_MAX,
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
    let durable =
        zab::Durable { accepted_epoch, current_epoch, snapshot_zxid: recovered.snapshot_zxid, log: log_txns, lost_log };
    // The state machine starts at the snapshot; ZAB delivers the log once it is committed.
    let snapshot_only = Recovered { records: Vec::new(), last_zxid: recovered.snapshot_zxid, ..(*recovered).clone() };
    let committed = storage::recovery::rebuild_tree(&snapshot_only).map_err(|e| format!("rebuilding the tree: {e}"))?;
    let now = Now::read();
    // A date, not a timeout: it only has to differ from this member's earlier runs.
    let incarnation = (now.wall_ms as u64) << 8 | my_id;
    let zab_cfg_voters = zab_cfg.voters.clone();
    let peer = Peer::new(zab_cfg, durable, incarnation);
    let mut log = open_log(&config, &recovered.tail, recovered.last_zxid + 1).await?;
    drop(recovered);
    let (net, peer_rx) =
        PeerNet::start(my_id, listen, &peers).map_err(|e| format!("cannot listen for peers on {listen}: {e}"))?;
    tracing::info!(
        "peer {my_id}: ensemble member at zxid {:#x} (epochs {accepted_epoch}/{current_epoch}), peers on {listen}",
        committed.last_zxid()
    );

    let mut m = Member {
        config: config.clone(),
        me: my_id,
        peer,
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
        sync_tokens: HashMap::new(),
        syncs: VecDeque::new(),
        touched: HashSet::new(),
        next_token: 0,
        serving: None,
        observer: config.servers.iter().any(|s| s.id == my_id && s.observer),
        unserved_since: Some(std::time::Instant::now()),
        items: Vec::new(),
        to_cores: Vec::new(),
        out: Vec::new(),
        encode_buf: BytesMut::with_capacity(64 * 1024),
        scratch_changes: Vec::new(),
        delivered_since_snapshot: 0,
        collections: Collections::new(config.client_cores),
        stats: stats.clone(),
    };

    let wake = Rc::new(Semaphore::new(0));
    let ticked = Rc::new(Cell::new(false));
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
        while m.held.is_empty() && m.pass_has_room() && m.intake_open(&net) {
            let Some(msg) = inbox.pop() else { break };
            m.on_client(msg, now);
        }
        inbox.made_room();
        m.forward_touches();
        loop {
            let next = peer_inbox.borrow_mut().pop_front();
            match next {
                None => break,
                Some((from, Some(msg))) => {
                    tracing::trace!("peer {my_id} ← {from}: {msg:?}");
                    m.step(Input::Message { from, msg });
                }
                Some((sid, None)) => m.step(Input::PeerLost { sid }),
            }
        }
        if let Some(z) = snapshots.take_written() {
            m.step(Input::SnapshotTaken { zxid: z });
        }
        if ticked.replace(false) && now.mono_ms - last_peer_tick_ms >= config.tick_time_ms as i64 {
            last_peer_tick_ms = now.mono_ms;
            m.step(Input::Tick);
            // A leader holding requests back holds their touches too: no expiry meanwhile.
            if m.leading() && m.held.is_empty() && m.intake_open(&net) {
                let reap = now.mono_ms - last_reap_ms >= config.container_check_interval_ms as i64;
                if reap {
                    last_reap_ms = now.mono_ms;
                }
                m.on_tick_leader(now, reap);
            }
        }
        if m.disk_full {
            // A full disk: try the waiting persists again (at most once a pass; the ticker
            // wakes the loop every half tick).
            if let Err(e) = drain_persists(&mut m, &mut log).await {
                tracing::error!("peer {my_id}: {e}; stopping");
                result = Err(e);
                break;
            }
        }
        if let Err(e) = drain_outputs(&mut m, &mut log, &net, now).await {
            tracing::error!("peer {my_id}: {e}; stopping");
            result = Err(e);
            break;
        }
        m.release_syncs();
        m.flush_items();
        stats.publish_syncs(log.sync_times());
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
        let last_zxid = m.committed.last_zxid();
        for msg in std::mem::take(&mut m.to_cores) {
            let msg = match msg {
                CoreMsg::Items(items) => ToClientCore::Batch(Arc::new(CommitBatch { items, last_zxid })),
                CoreMsg::Control(c) => c,
            };
            senders.send_all(msg).await;
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
        let intake_waits = (!inbox.is_empty() || !m.held.is_empty()) && open;
        if !m.out.is_empty() || intake_waits || !peer_inbox.borrow().is_empty() {
            wake.signal(1);
        }
        if m.delivered_since_snapshot >= config.snap_count && snapshots.idle() {
            m.delivered_since_snapshot = 0;
            if let Err(e) = snapshots.start(&config, &mut log, m.committed.clone(), now.mono_ms).await {
                result = Err(e);
                break;
            }
        }
        if stopping {
            tracing::info!("peer {my_id}: stopping at zxid {:#x}", m.committed.last_zxid());
            break;
        }
    }
    senders.shutdown().await;
    ticker.cancel();
    peer_reader.cancel();
    drop(inbox);
    drop(net);
    if let Err(e) = log.close().await {
        tracing::warn!("closing the txn log: {e}");
    }
    result
}
