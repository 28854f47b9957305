//! The pipeline core: the one place where writes are ordered. It preps each write against the
//! latest state (the one DataTree, which already includes txns not yet durable), applies it
//! there once, assigns zxids, appends the batch to the txn log with one fdatasync, and only
//! then fans the batch out to every client core with the tree's root (`commit_queue`). It also owns the session table and its expiry, the container /
//! TTL reaper, and the snapshot schedule.
//! The log runs beside the loop (`log_task`): while one batch is written and synced, the loop
//! takes in and preps the next (up to the batch caps), which goes out as soon as the first is
//! durable; an idle log writes a lone txn at once.
//! Rules: nothing leaves this core before it is durable; a txn is fully determined here (zxid,
//! time, session, sequence names, errors); zxids increase by exactly one; a log write that
//! finds the disk full refuses that batch's writes (ZSYSTEMERROR) and rolls the prep tree,
//! zxids and sessions back to the last durable state, refusing the txns prepped on top of it
//! too (reads go on; the next write tries the
//! log again); any other log write error stops the server (nothing after it can be
//! acknowledged); sessions, ticks and schedules run on the monotonic clock, a txn's time is
//! the wall clock's (`clock::Now`).

use super::clock::Now;
use super::commit_queue::{self, CommitQueue, Rounds};
use super::core_link;
use super::fence::Fence;
use super::inspect::{Collections, Inspect, SessionSets};
use super::log_task::LogSlot;
use super::log_writer::{is_disk_full, SyncMode, TxnLogWriter};
use super::messages::{Commit, CommitBatch, ToClientCore, ToPipeline};
use super::snapshot_writer;
use super::stage_latency::Stage;
use crate::config::Config;
use crate::proto::ErrorCode;
use crate::session::{self, ConnRef, SessionTracker};
use crate::storage;
use crate::storage::recovery::LogTail;
use crate::tree::{DataTree, NodeKind};
use crate::txn::prep::{prep, PrepContext};
use crate::txn::{codec, Txn, TxnHeader, TxnOp, WriteOp};
use bytes::{Bytes, BytesMut};
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Containers and TTL nodes deleted per reaper pass at most.
pub const REAP_PER_PASS_MAX: usize = 10_000;
/// How often the pipeline checks for shutdown and expired sessions, at most.
pub const TICK_INTERVAL_MS_MAX: u64 = 100;
/// Messages from the client cores waiting for the pipeline; past this the pipeline stops
/// taking from the channels, so their bounded depth pushes back on the client cores.
pub const INBOX_MESSAGES_MAX: usize = 64 * 1024;

/// A fresh session-password key from the OS's random source (the shell draws it; prep, apply
/// and the tree never do). The OS source failing is not a state to serve in: it panics, and a
/// panic stops the process (fail-stop).
pub(super) fn random_session_secret() -> session::SessionSecret {
    let mut secret = [0u8; session::SESSION_SECRET_BYTES];
    getrandom::getrandom(&mut secret).expect("the OS random source (getrandom) failed");
    secret
}

/// The roll of this member's next snapshot (`Config::snapshot_roll`), from the OS's random
/// source (fail-stop, as `random_session_secret`).
pub(super) fn draw_snapshot_roll(config: &Config) -> crate::config::SnapshotRoll {
    let mut words = [0u8; 16];
    getrandom::getrandom(&mut words).expect("the OS random source (getrandom) failed");
    let (a, b) = words.split_at(8);
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().expect("8 bytes"));
    config.snapshot_roll(word(a), word(b))
}

/// The password a session is told: its MAC under the tree's key; without a key (only until
/// the first txn of a start or a leadership lands) random bytes, which no resume matches.
pub(super) fn new_passwd(tree: &DataTree, session_id: i64) -> [u8; session::SESSION_PASSWD_LEN] {
    match tree.session_secret() {
        Some(secret) => session::password_of(secret, session_id),
        None => {
            let mut pw = [0u8; session::SESSION_PASSWD_LEN];
            getrandom::getrandom(&mut pw).expect("the OS random source (getrandom) failed");
            pw
        }
    }
}

/// Session deadlines as `dump` prints them: monotonic deadlines as dates.
pub(super) fn dated(sets: SessionSets, now: Now) -> SessionSets {
    sets.into_iter().map(|(deadline, ids)| (now.date_of(deadline), ids)).collect()
}

pub struct PipelineParams {
    pub config: Arc<Config>,
    pub recovered: Arc<storage::recovery::Recovered>,
    /// The tree `recovered` describes, built once at start-up.
    pub tree: DataTree,
    pub from_cores: Vec<core_link::Rx<Vec<ToPipeline>>>,
    pub to_cores: Vec<core_link::Tx<ToClientCore>>,
    /// Set while the txn log has an append in flight (read by a client core on this thread).
    pub log_writing: core_link::LogWriting,
    pub shutdown: Arc<AtomicBool>,
    pub stats: Arc<super::stats::Stats>,
}

struct Pipeline {
    config: Arc<Config>,
    tree: DataTree,
    sessions: SessionTracker,
    conn_sessions: crate::id_hash::IdMap<ConnRef, i64>,
    commits: CommitQueue,
    /// Requests held for the next round of this pass (`commit_queue::Rounds`).
    rounds: Rounds,
    records: Vec<Bytes>,
    /// Bytes of `records`: the batch closes at `ringkeeper.batchBytesMax`.
    record_bytes: usize,
    encode_buf: BytesMut,
    txns_since_snapshot: u64,
    /// Bytes of those txns (snapSizeLimitInKb).
    bytes_since_snapshot: u64,
    /// Where the next snapshot falls (`draw_snapshot_roll`, drawn again at each snapshot).
    snapshot_roll: crate::config::SnapshotRoll,
    collections: Collections,
    /// Messages for every client core, sent after the batch.
    control: Vec<ToClientCore>,
    /// The stage histograms this core writes (`Stats::pipeline_stages`).
    stats: Arc<super::stats::Stats>,
    /// An admin `restore` taken in: nothing more is taken in until it is done (`restore`).
    restore: Option<PendingRestore>,
    /// The start of the pass (`Now::at`): every write the pass takes in was taken in then
    /// (`Stage::CoreToPipeline` ends there) and its prep began there (`Stage::Prep`).
    lap: Instant,
    /// Writes prepped in this pass since `lap`: `end_preps` shares the pass's prep time among
    /// them (one clock read per pass instead of one per write).
    preps: u64,
}

/// A restore waiting for everything ordered before it to be durable.
type PendingRestore = (Box<DataTree>, std::sync::mpsc::SyncSender<Result<i64, String>>);

impl Pipeline {
    /// A standalone server counts zxids on past 2^32 into the epoch half, as ZooKeeper's
    /// standalone server does (in an ensemble the leader starts a new epoch instead).
    fn next_header(&self, session_id: i64, cxid: i32, time_ms: i64) -> TxnHeader {
        let zxid = self.tree.last_zxid().checked_add(1).expect("zxid space exhausted");
        TxnHeader { zxid, session_id, cxid, time_ms }
    }

    /// Orders one txn: encode for the log, apply to the tree, queue for fan-out.
    fn commit_txn(&mut self, header: TxnHeader, op: TxnOp, origin: Option<(ConnRef, i32)>, fence: &Fence) {
        let txn = Txn { header, op };
        codec::encode(&txn, &mut self.encode_buf);
        let record = self.encode_buf.split().freeze();
        let record_len = storage::log::RECORD_PREFIX_BYTES + record.len();
        self.record_bytes += record_len;
        self.records.push(record);
        self.commits.apply(&mut self.tree, txn, origin, fence);
        self.txns_since_snapshot += 1;
        self.bytes_since_snapshot += record_len as u64;
    }

    /// Queues an item that changes nothing in the tree.
    fn answer(&mut self, item: Commit) {
        self.commits.push(item, &self.tree);
    }

    /// The pass's take-in is over: its writes' prep time (from the pass's start until now,
    /// with the few other messages it took in) is recorded as their mean, once per write, so
    /// the stage's count and sum are exact and its distribution is that of passes' means.
    fn end_preps(&mut self) {
        if self.preps == 0 {
            return;
        }
        let took_us = Instant::now().saturating_duration_since(self.lap).as_micros() as u64;
        self.stats.pipeline_stages.get(Stage::Prep).record_us_n(took_us / self.preps, self.preps);
        self.preps = 0;
    }

    /// Takes one message in, or holds it for the next round (`commit_queue::Rounds`).
    fn take_in(&mut self, msg: ToPipeline, now: Now) {
        if let Some(msg) = self.rounds.take_in(msg) {
            self.handle(msg, now);
        }
    }

    /// Ends a round: the open batch is sealed, and what was held is taken in again.
    fn next_round(&mut self, now: Now) {
        self.commits.seal(&self.tree);
        for msg in self.rounds.next_round() {
            self.handle(msg, now);
        }
    }

    /// The batch is full by count or by bytes (the log writer splits a larger append too;
    /// stopping here bounds what the pipeline holds).
    fn batch_full(&self) -> bool {
        self.records.len() >= self.config.batch_txns_max.max(1) || self.record_bytes >= self.config.batch_bytes_max
    }

    /// Handles one message; sessions are timed by `now.mono_ms`, txns dated `now.wall_ms`.
    fn handle(&mut self, msg: ToPipeline, now: Now) {
        match msg {
            ToPipeline::Connect { conn, session_id, passwd, timeout_ms, last_zxid_seen, .. } => {
                if let Some(refusal) = refuse_if_ahead(conn, last_zxid_seen, self.tree.last_zxid()) {
                    self.answer(refusal);
                    return;
                }
                let timeout_ms = self.config.negotiate_session_timeout(timeout_ms);
                if session_id == 0 {
                    let id = self.sessions.next_session_id();
                    self.sessions.add(id, timeout_ms, now.mono_ms);
                    self.sessions.attach(id, conn);
                    self.conn_sessions.insert(conn, id);
                    let header = self.next_header(id, 0, now.wall_ms);
                    self.commit_txn(header, TxnOp::CreateSession { timeout_ms }, None, &Fence::Free);
                    self.answer(Commit::Connected {
                        conn,
                        session_id: id,
                        timeout_ms,
                        passwd: new_passwd(&self.tree, id),
                    });
                    return;
                }
                let secret = self.tree.session_secret();
                if !self.sessions.contains(session_id) || !session::password_matches(secret, session_id, &passwd) {
                    self.answer(Commit::SessionExpired { conn });
                    return;
                }
                let expected = new_passwd(&self.tree, session_id);
                self.sessions.set_timeout(session_id, timeout_ms, now.mono_ms);
                if let Some(old) = self.sessions.attach(session_id, conn) {
                    self.conn_sessions.remove(&old);
                    self.answer(Commit::Close { conn: old });
                }
                self.conn_sessions.insert(conn, session_id);
                self.answer(Commit::Connected { conn, session_id, timeout_ms, passwd: expected });
            }
            ToPipeline::Write { conn, xid, op, auth, fence, read_at } => {
                self.stats
                    .pipeline_stages
                    .get(Stage::CoreToPipeline)
                    .record(self.lap.saturating_duration_since(read_at));
                let Some(&session_id) = self.conn_sessions.get(&conn) else {
                    // The connection was refused, moved or closed: nobody waits for a reply.
                    return;
                };
                if !self.sessions.touch(session_id, now.mono_ms) {
                    self.answer(Commit::Rejected { conn, xid, err: ErrorCode::SessionExpired.code() });
                    return;
                }
                let ctx = PrepContext {
                    session_id,
                    auth_ids: &auth,
                    extended_types_enabled: self.config.extended_types_enabled,
                    txn_bytes_max: self.config.txn_bytes_max(),
                    enforce_quota: self.config.enforce_quota,
                };
                let txn_op = match op {
                    // A standalone server cannot reconfigure (ZooKeeper: Unimplemented, once
                    // reconfigEnabled lets the request that far).
                    WriteOp::Reconfig { .. } if self.config.reconfig_enabled => {
                        TxnOp::Error { err: ErrorCode::Unimplemented.code() }
                    }
                    _ => prep(&self.tree, op, &ctx),
                };
                if matches!(txn_op, TxnOp::CloseSession) {
                    self.sessions.remove(session_id);
                    self.conn_sessions.remove(&conn);
                }
                let header = self.next_header(session_id, xid, now.wall_ms);
                self.commit_txn(header, txn_op, Some((conn, xid)), &fence);
                self.preps += 1;
            }
            ToPipeline::Sync { conn, xid, path } => {
                // A connection without a session here was refused, closed or moved: it is
                // closing, and nobody waits for the answer.
                let Some(&s) = self.conn_sessions.get(&conn) else {
                    return;
                };
                self.sessions.touch(s, now.mono_ms);
                self.answer(Commit::SyncDone { conn, xid, path });
            }
            ToPipeline::Touch { sessions } => {
                for s in sessions {
                    self.sessions.touch(s, now.mono_ms);
                }
            }
            ToPipeline::Detached { conn } => {
                if let Some(s) = self.conn_sessions.remove(&conn) {
                    self.sessions.detach(s, conn);
                }
            }
            ToPipeline::Restore { tree, reply } => {
                if self.restore.is_some() {
                    let _ = reply.try_send(Err("another restore is in progress".into()));
                } else {
                    self.restore = Some((tree, reply));
                }
            }
            msg @ (ToPipeline::Inspect { .. } | ToPipeline::Report { .. }) => {
                let sessions = &self.sessions;
                if let Some(m) =
                    relay_inspection(&mut self.collections, msg, || Some(dated(sessions.deadline_sets(), now)))
                {
                    self.control.push(m);
                }
            }
        }
    }

    /// Tracks exactly the sessions of the tree (after a restore replaced it), timed from now.
    fn track_tree_sessions(&mut self, now: Now) {
        self.sessions = SessionTracker::new(self.config.tick_time_ms, session::first_session_id(0, now.wall_ms));
        for (id, entry) in self.tree.sessions() {
            self.sessions.add(id, entry.timeout_ms, now.mono_ms);
        }
    }

    /// Makes the session-password key if the tree has none (a new data dir, one from before
    /// there was a key, or a first attempt the full disk refused): one txn, logged like any.
    fn ensure_session_secret(&mut self, now: Now) {
        if self.tree.session_secret().is_none() {
            let header = self.next_header(0, 0, now.wall_ms);
            self.commit_txn(header, TxnOp::SessionSecret { secret: random_session_secret() }, None, &Fence::Free);
        }
    }

    /// Expires sessions whose deadline passed: a closeSession txn each, and their connection
    /// closed without a message.
    fn expire_sessions(&mut self, now: Now) {
        for (id, attached) in self.sessions.expired(now.mono_ms) {
            tracing::info!("session {id:#x} expired");
            if let Some(conn) = attached {
                self.conn_sessions.remove(&conn);
                self.answer(Commit::Close { conn });
            }
            let header = self.next_header(id, 0, now.wall_ms);
            self.commit_txn(header, TxnOp::CloseSession, None, &Fence::Free);
        }
    }

    /// The log could not take the end of an append (the disk is full): none of it is durable,
    /// so none of it happened, nor anything prepped on top of it since (`refused` is the items
    /// from the append's first unlogged txn on, in order, and `refused_bytes` their records'
    /// bytes; what this pipeline holds now came after them). The prep tree goes back to
    /// `durable` (the tree as of the last logged txn; zxids with it), the sessions the refused
    /// txns created or closed are put back as they were, each write gets `ZSYSTEMERROR`
    /// (ZooKeeper has no code for a full disk), a connection whose new session was not logged
    /// is closed (its client reconnects), and the items that did not depend on the log (syncs,
    /// refusals, closes) go out as they are.
    fn undo_unlogged(&mut self, refused: Vec<Commit>, refused_bytes: usize, durable: &DataTree, now_mono_ms: i64) {
        let err = ErrorCode::SystemError.code();
        let mut created = Vec::new();
        let mut kept = Vec::new();
        let unlogged_bytes = (self.record_bytes + refused_bytes) as u64;
        self.bytes_since_snapshot = self.bytes_since_snapshot.saturating_sub(unlogged_bytes);
        let mut unlogged = refused;
        unlogged.extend(self.commits.take_items());
        for item in unlogged {
            match item {
                Commit::Txn { txn, origin, .. } => {
                    self.txns_since_snapshot = self.txns_since_snapshot.saturating_sub(1);
                    let id = txn.header.session_id;
                    match txn.op {
                        TxnOp::CreateSession { .. } => {
                            created.push(id);
                            if let Some(conn) = self.sessions.remove(id) {
                                self.conn_sessions.remove(&conn);
                            }
                        }
                        TxnOp::CloseSession => {
                            if let Some((_, entry)) = durable.sessions().find(|(s, _)| *s == id) {
                                self.sessions.add(id, entry.timeout_ms, now_mono_ms);
                                if let Some((conn, _)) = origin {
                                    self.sessions.attach(id, conn);
                                    self.conn_sessions.insert(conn, id);
                                }
                            }
                        }
                        _ => {}
                    }
                    if let Some((conn, xid)) = origin {
                        kept.push(Commit::Rejected { conn, xid, err });
                    }
                }
                Commit::Connected { conn, session_id, .. } if created.contains(&session_id) => {
                    self.conn_sessions.remove(&conn);
                    kept.push(Commit::Close { conn });
                }
                other => kept.push(other),
            }
        }
        self.tree = durable.clone();
        for item in kept {
            self.answer(item);
        }
        self.records.clear();
        self.record_bytes = 0;
    }

    /// Deletes empty containers that once had a child, and expired empty TTL nodes (a TTL
    /// runs from mtime, a date, as in ZooKeeper).
    fn reap(&mut self, now: Now) {
        for p in doomed_nodes(&self.tree, now.wall_ms) {
            let ctx = PrepContext {
                session_id: 0,
                auth_ids: &[],
                extended_types_enabled: true,
                txn_bytes_max: self.config.txn_bytes_max(),
                enforce_quota: false,
            };
            let op = prep(&self.tree, WriteOp::DeleteContainer { path: p.clone() }, &ctx);
            if matches!(op, TxnOp::Delete { .. }) {
                tracing::debug!("reaping {p}");
                let header = self.next_header(0, 0, now.wall_ms);
                self.commit_txn(header, op, None, &Fence::Free);
            }
        }
    }
}

/// Empty containers that once had a child, and expired empty TTL nodes: what the reaper
/// deletes (at most `REAP_PER_PASS_MAX` per pass). `now_wall_ms` is a date: a TTL node expires
/// once the wall clock passes its mtime + TTL, as in ZooKeeper.
pub(super) fn doomed_nodes(tree: &DataTree, now_wall_ms: i64) -> Vec<String> {
    let mut doomed: Vec<String> = Vec::new();
    for p in tree.containers() {
        if let Some(n) = tree.get(p) {
            if n.children.is_empty() && n.child_creates > 0 {
                doomed.push(p.to_string());
            }
        }
    }
    for p in tree.ttl_nodes() {
        if let Some(n) = tree.get(p) {
            if let NodeKind::Ttl(ttl) = n.kind() {
                if n.children.is_empty() && now_wall_ms > n.mtime.saturating_add(ttl) {
                    doomed.push(p.to_string());
                }
            }
        }
    }
    doomed.truncate(REAP_PER_PASS_MAX);
    doomed
}

/// The messages of the client cores, gathered by one task per channel into one bounded
/// queue; `wake` is signalled whenever something arrives.
pub(super) struct Inbox {
    pub queue: Rc<RefCell<VecDeque<ToPipeline>>>,
    room: Rc<Semaphore>,
    full: Rc<Cell<bool>>,
    receivers: Vec<glommio::task::JoinHandle<()>>,
}

impl Inbox {
    pub async fn start(
        from_cores: Vec<core_link::Rx<Vec<ToPipeline>>>,
        wake: Rc<Semaphore>,
        stats: Arc<super::stats::Stats>,
    ) -> Inbox {
        let queue: Rc<RefCell<VecDeque<ToPipeline>>> = Rc::new(RefCell::new(VecDeque::new()));
        // Receivers wait on `room` while the queue is full; `made_room` signals it.
        let room = Rc::new(Semaphore::new(0));
        let full = Rc::new(Cell::new(false));
        let mut receivers = Vec::new();
        for (core, rx) in from_cores.into_iter().enumerate() {
            let rx = rx.connect().await;
            let (queue, wake, room, full) = (queue.clone(), wake.clone(), room.clone(), full.clone());
            let stats = stats.clone();
            receivers.push(
                glommio::spawn_local(async move {
                    loop {
                        while queue.borrow().len() >= INBOX_MESSAGES_MAX {
                            full.set(true);
                            if room.acquire(1).await.is_err() {
                                return;
                            }
                        }
                        let Some(batch) = rx.recv().await else { return };
                        stats.cores[core].up_received.fetch_add(1, Ordering::Relaxed);
                        queue.borrow_mut().extend(batch);
                        wake.signal(1);
                    }
                })
                .detach(),
            );
        }
        Inbox { queue, room, full, receivers }
    }

    pub fn pop(&self) -> Option<ToPipeline> {
        self.queue.borrow_mut().pop_front()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Lets the receivers go on once the queue has room again.
    pub fn made_room(&self) {
        if self.full.get() && self.queue.borrow().len() < INBOX_MESSAGES_MAX {
            self.full.set(false);
            self.room.signal(self.receivers.len() as u64);
        }
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        for r in &self.receivers {
            r.cancel();
        }
    }
}

/// Signals `wake` and sets `ticked` every `tick_ms`, until dropped.
pub(super) fn start_ticker(tick_ms: u64, wake: Rc<Semaphore>, ticked: Rc<Cell<bool>>) -> glommio::task::JoinHandle<()> {
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(Duration::from_millis(tick_ms)).await;
            ticked.set(true);
            wake.signal(1);
        }
    })
    .detach()
}

/// Refuses a client that has seen a zxid past `ours` (it would see history go backwards):
/// its connection closes without a reply, as in ZooKeeper.
pub(super) fn refuse_if_ahead(conn: ConnRef, last_zxid_seen: i64, ours: i64) -> Option<Commit> {
    if last_zxid_seen <= ours {
        return None;
    }
    tracing::warn!("refusing connection {conn:?}: client has seen zxid {last_zxid_seen:#x}, ours is {ours:#x}");
    Some(Commit::ZxidAhead { conn })
}

/// Relays an inspection (`inspect`): a core's question goes to every core; the last core's
/// report completes the collection, which goes back to the core that asked. `session_sets`
/// gives the session deadlines a `dump` lists, where this member tracks them.
pub(super) fn relay_inspection(
    collections: &mut Collections,
    msg: ToPipeline,
    session_sets: impl FnOnce() -> Option<SessionSets>,
) -> Option<ToClientCore> {
    match msg {
        ToPipeline::Inspect { asker, token, what } => {
            collections.open(asker, token, if what == Inspect::Dump { session_sets() } else { None });
            Some(ToClientCore::Inspect { asker, token, what })
        }
        ToPipeline::Report { asker, token, report } => collections
            .report(asker, token, report)
            .map(|done| ToClientCore::Inspected { asker, token, inspected: Arc::new(done) }),
        _ => None,
    }
}

/// Opens the txn log where recovery left it (`next_zxid` is the next record's), with the
/// configured fdatasync warning threshold; synced with fdatasync (an ensemble's leader switches
/// to write-through, `SyncMode`).
pub(super) async fn open_log(
    config: &Config,
    tail: &LogTail,
    next_zxid: i64,
    stats: &Arc<super::stats::Stats>,
) -> Result<TxnLogWriter, String> {
    // With the client core on this thread (clientCoreOnPipeline), an fdatasync that blocked
    // the thread would stop reads, pings and replies too: it goes through io_uring instead.
    let sync = match (config.force_sync, config.client_core_on_pipeline) {
        (false, _) => SyncMode::Off,
        (true, false) => SyncMode::Fdatasync,
        (true, true) => SyncMode::FdatasyncAside,
    };
    let mut log = TxnLogWriter::open(&config.data_log_dir, tail, next_zxid, config.pre_alloc_size_bytes, sync)
        .await
        .map_err(|e| format!("opening the txn log in {}: {e}", config.data_log_dir.display()))?;
    log.set_fsync_warning_ms(config.fsync_warning_threshold_ms);
    log.set_batch_bytes_max(config.batch_bytes_max);
    log.time_batches_into(stats.clone());
    Ok(log)
}

/// The pipeline core's ends of the channels to every client core.
pub(super) struct CoreSenders(Vec<core_link::Sender<ToClientCore>>, Arc<super::stats::Stats>);

impl CoreSenders {
    pub async fn connect(to_cores: Vec<core_link::Tx<ToClientCore>>, stats: Arc<super::stats::Stats>) -> CoreSenders {
        let mut senders = Vec::with_capacity(to_cores.len());
        for tx in to_cores {
            senders.push(tx.connect().await);
        }
        CoreSenders(senders, stats)
    }

    /// Sends `msg` to every client core (bounded channels: waits while one is full).
    pub async fn send_all(&self, msg: ToClientCore) {
        for (core, s) in self.0.iter().enumerate() {
            self.1.cores[core].down_sent.fetch_add(1, Ordering::Relaxed);
            if s.send(msg.clone()).await.is_err() {
                tracing::error!("a client core stopped receiving commits");
            }
        }
    }

    /// Sends committed batches to every client core, stamped with the time they leave.
    pub async fn send_batches(&self, batches: Vec<super::messages::CommitBatch>) {
        self.send_all(ToClientCore::Batches(Arc::new(batches), Instant::now())).await;
    }

    /// Tells every client core to stop (one that already stopped is no error).
    pub async fn shutdown(&self) {
        for s in &self.0 {
            let _ = s.send(ToClientCore::Shutdown).await;
        }
    }
}

/// Snapshots taken at a random point of each snapCount txns (`Config::snapshot_roll`): the log
/// rolls, then a clone of the tree is written on the blocking pool (one at a time,
/// `snapshot_writer`), and old files are purged there too when autopurge is due.
pub(super) struct Snapshots {
    running: Rc<Cell<bool>>,
    written: Rc<Cell<Option<i64>>>,
    /// Monotonic ms of the last autopurge.
    last_purge_ms: i64,
    stats: Arc<super::stats::Stats>,
}

impl Snapshots {
    /// `now_mono_ms`: the monotonic clock (autopurge's schedule).
    pub fn new(now_mono_ms: i64, stats: Arc<super::stats::Stats>) -> Snapshots {
        Snapshots {
            running: Rc::new(Cell::new(false)),
            written: Rc::new(Cell::new(None)),
            last_purge_ms: now_mono_ms,
            stats,
        }
    }

    /// No snapshot is being written.
    pub fn idle(&self) -> bool {
        !self.running.get()
    }

    /// The zxid of a snapshot written since the last call.
    pub fn take_written(&self) -> Option<i64> {
        self.written.take()
    }

    /// Rolls the log and writes a snapshot of `tree` in the background; the error is a log
    /// roll that failed (the server must stop). `now` is the monotonic clock.
    pub async fn start(
        &mut self,
        config: &Arc<Config>,
        log: &mut TxnLogWriter,
        tree: DataTree,
        now: i64,
    ) -> Result<(), String> {
        // A full disk that keeps the log from rolling (its failed write's blocks cannot be
        // cleared) skips this snapshot; the writer refuses and retries writes as for any
        // full-disk write.
        if let Err(e) = log.roll().await {
            if !is_disk_full(&e) {
                return Err(format!("txn log roll failed: {e}"));
            }
            tracing::warn!("snapshot skipped: the txn log could not roll on a full disk ({e})");
            return Ok(());
        }
        let purge_due = config.autopurge_purge_interval_hours > 0
            && now - self.last_purge_ms >= config.autopurge_purge_interval_hours as i64 * 3_600_000;
        if purge_due {
            self.last_purge_ms = now;
        }
        let (running, written) = (self.running.clone(), self.written.clone());
        let stats = self.stats.clone();
        let data_dir = config.data_dir.clone();
        let purge = purge_due.then(|| snapshot_writer::PurgeJob {
            data_dir: config.data_dir.clone(),
            log_dir: config.data_log_dir.clone(),
            retain: config.autopurge_snap_retain_count as usize,
        });
        running.set(true);
        // The core only hands the clone over and awaits: encoding, writing, syncing and the
        // purge run on the blocking pool.
        glommio::spawn_local(async move {
            let zxid = tree.last_zxid();
            let began = std::time::Instant::now();
            let outcome = snapshot_writer::write_snapshot(data_dir, tree, purge).await;
            match outcome.snapshot {
                Ok(path) => {
                    stats.count_snapshot(began.elapsed().as_millis() as u64);
                    tracing::info!("snapshot at zxid {zxid:#x} written to {}", path.display());
                    written.set(Some(zxid));
                }
                Err(e) => tracing::error!("snapshot at zxid {zxid:#x} failed: {e}"),
            }
            match outcome.purge {
                Some(Ok(r)) if r.removed_snapshots.len() + r.removed_segments.len() > 0 => tracing::info!(
                    "autopurge removed {} snapshot(s) and {} log segment(s)",
                    r.removed_snapshots.len(),
                    r.removed_segments.len()
                ),
                Some(Err(e)) => tracing::warn!("purge failed: {e}"),
                _ => {}
            }
            running.set(false);
        })
        .detach();
        Ok(())
    }
}

/// Runs the pipeline core until shutdown. Returns an error only when the log cannot be
/// written (the server must stop: it can no longer make anything durable).
/// A log batch on its way to the disk, with what goes out once it is durable.
struct Landing {
    /// Its commit batches (sealed when the append started), for the client cores.
    batches: Vec<CommitBatch>,
    /// The tree as of its last txn: what a snapshot may be taken of, and what a later full
    /// disk rolls back to, once it is durable.
    tree: DataTree,
    txns: usize,
}

/// What the loop keeps about the log between passes.
struct LogState {
    slot: LogSlot<Landing>,
    /// The tree as of the last txn the log holds.
    durable: DataTree,
    /// The last append found the disk full.
    disk_full: bool,
}

/// Reports a finished append: its batches go to the client cores; a full disk refuses them
/// and everything prepped after them (`undo_unlogged`); any other error stops the server
/// (nothing after it can be made durable).
async fn land(
    p: &mut Pipeline,
    log: &mut LogState,
    landing: Landing,
    result: std::io::Result<()>,
    senders: &CoreSenders,
    now: Now,
) -> Result<(), String> {
    match result {
        Ok(()) => {
            p.stats.count_log_batch(landing.txns);
            log.durable = landing.tree;
            if std::mem::take(&mut log.disk_full) {
                tracing::info!("the txn log takes writes again (zxid {:#x})", log.durable.last_zxid());
            }
            senders.send_batches(landing.batches).await;
            Ok(())
        }
        Err(e) if is_disk_full(&e) => {
            // What the log holds ends before `next_zxid`: an append of several log batches
            // (over ringkeeper.batchBytesMax, or across an epoch) may have logged some before
            // the disk filled. Those are answered as logged; the rest is undone and refused.
            let Some(next_zxid) = log.slot.idle().map(|w| w.next_zxid()) else {
                return Err(format!("txn log write failed: {e}, and the writer is gone"));
            };
            let txns = landing.txns;
            let (logged, refused) = commit_queue::split_logged(landing.batches, &log.durable, next_zxid)
                .map_err(|why| format!("txn log write failed: {e}; its batches do not follow the log: {why}"))?;
            let refused_bytes = unlogged_record_bytes(&refused);
            // The front may hold batches without a txn (syncs, refusals, closes), with roots
            // as of the log's end before this append.
            if let Some(last) = logged.last() {
                let logged_txns =
                    txns.saturating_sub(refused.iter().filter(|c| matches!(c, Commit::Txn { .. })).count());
                if logged_txns > 0 {
                    tracing::warn!(
                        "txn log write failed: {e}, after part of an append was logged (up to zxid {:#x}): that part \
                         is answered, the rest refused",
                        last.last_zxid
                    );
                    p.stats.count_log_batch(logged_txns);
                }
                log.durable = last.root.clone();
                senders.send_batches(logged).await;
            }
            if !std::mem::replace(&mut log.disk_full, true) {
                tracing::error!(
                    "txn log write failed: {e}; refusing writes (ZSYSTEMERROR) while reads go on, and trying again \
                     with each new write: free space in {}",
                    p.config.data_log_dir.display()
                );
            }
            p.undo_unlogged(refused, refused_bytes, &log.durable, now.mono_ms);
            Ok(())
        }
        Err(e) => {
            tracing::error!("txn log write failed: {e}; stopping (nothing more can be made durable)");
            Err(format!("txn log write failed: {e}"))
        }
    }
}

/// The log record bytes of the txns among `items` (each encoded again: only a full disk's
/// undo needs the figure, for the snapshot's byte count).
fn unlogged_record_bytes(items: &[Commit]) -> usize {
    let mut buf = BytesMut::new();
    let mut bytes = 0;
    for item in items {
        if let Commit::Txn { txn, .. } = item {
            buf.clear();
            codec::encode(txn, &mut buf);
            bytes += storage::log::RECORD_PREFIX_BYTES + buf.len();
        }
    }
    bytes
}

/// Starts appending what is prepped (the log slot must be idle), with the commit batches and
/// tree that go out once it is durable.
fn start_append(p: &mut Pipeline, log: &mut LogState) {
    let landing = Landing { batches: p.commits.take(&p.tree), tree: p.tree.clone(), txns: p.records.len() };
    p.record_bytes = 0;
    log.slot.start(std::mem::take(&mut p.records), landing);
}

/// Lands the append in flight, then appends and lands what is prepped: afterwards everything
/// ordered so far is durable and sent to the client cores. The error stops the server.
async fn flush(p: &mut Pipeline, log: &mut LogState, senders: &CoreSenders, now: Now) -> Result<(), String> {
    if let Some((landing, result)) = log.slot.settle().await {
        land(p, log, landing, result, senders, now).await?;
    }
    if !p.records.is_empty() {
        start_append(p, log);
        if let Some((landing, result)) = log.slot.settle().await {
            land(p, log, landing, result, senders, now).await?;
        }
    } else if !p.commits.is_empty() {
        senders.send_batches(p.commits.take(&p.tree)).await;
    }
    Ok(())
}

/// Carries out the admin `restore` taken in (`Pipeline::restore`), once everything ordered
/// before it is durable: the restored tree takes the next zxid Z; `snapshot.<Z>` is written
/// and made durable first, then the `TxnOp::Restore` marker is logged at Z and the log rolled
/// (a restart loads that snapshot; a replay that reaches the marker without it refuses); every client connection is closed (its session lives on only if the restored
/// tree has it) and the sessions are those of the restored tree. A refusal (disk full, the
/// snapshot not written) changes nothing and is the reply; the error stops the server (the
/// log cannot be written).
async fn restore(p: &mut Pipeline, log: &mut LogState, senders: &CoreSenders, now: Now) -> Result<(), String> {
    let Some((restored, reply)) = p.restore.take() else { return Ok(()) };
    flush(p, log, senders, now).await?;
    if log.disk_full || !p.records.is_empty() {
        let _ = reply.try_send(Err("the txn log's disk is full: nothing was restored".into()));
        return Ok(());
    }
    let zxid = p.tree.last_zxid().checked_add(1).ok_or("zxid space exhausted")?;
    let mut at_z = *restored;
    at_z.rebase_zxid(zxid);
    let began = Instant::now();
    let written = snapshot_writer::write_snapshot(p.config.data_dir.clone(), at_z.clone(), None).await;
    let path = match written.snapshot {
        Ok(path) => path,
        Err(e) => {
            tracing::error!("restore: writing its snapshot at zxid {zxid:#x} failed: {e}; nothing was restored");
            let _ = reply.try_send(Err(format!("writing the snapshot failed: {e}")));
            return Ok(());
        }
    };
    let before = (p.tree.node_count(), p.tree.sessions().count());
    let mut tree = at_z;
    tree.rebase_zxid(zxid - 1);
    p.tree = tree;
    p.track_tree_sessions(now);
    for (conn, _) in std::mem::take(&mut p.conn_sessions) {
        p.answer(Commit::Close { conn });
    }
    let header = p.next_header(0, 0, now.wall_ms);
    p.commit_txn(header, TxnOp::Restore, None, &Fence::Free);
    p.txns_since_snapshot = 0;
    p.bytes_since_snapshot = 0;
    flush(p, log, senders, now).await?;
    if log.durable.last_zxid() != zxid {
        // The marker was refused (the disk filled since) and the tree rolled back to the
        // durable one: the snapshot at Z goes too, or a restart would load it under zxids the
        // log is about to reuse.
        // On the blocking pool, as the snapshot was written: never a file system call on the
        // pipeline core's event loop.
        let (doomed, dir) = (path.clone(), p.config.data_dir.clone());
        let removed = glommio::executor()
            .spawn_blocking(move || std::fs::remove_file(&doomed).and_then(|()| crate::storage::files::fsync_dir(&dir)))
            .await;
        if let Err(e) = removed {
            return Err(format!("restore: its log record was refused and {} cannot be removed: {e}", path.display()));
        }
        p.track_tree_sessions(now);
        let _ = reply.try_send(Err("the txn log's disk is full: nothing was restored".into()));
        return Ok(());
    }
    // What follows starts a new segment (purge can then drop the old ones with their
    // snapshots). A crash before the marker was durable leaves the logs ending before the
    // snapshot at Z, which recovery takes (the next segment starts after it).
    let writer = log.slot.idle().ok_or("the txn log is busy after a flush")?;
    writer.roll().await.map_err(|e| format!("txn log roll failed: {e}"))?;
    tracing::info!(
        "restore: the tree is now the restored one at zxid {zxid:#x} ({} nodes, {} sessions; before: {} nodes, {} \
         sessions), snapshot {}, in {} ms; every client connection was closed",
        p.tree.node_count(),
        p.sessions.len(),
        before.0,
        before.1,
        path.display(),
        began.elapsed().as_millis()
    );
    let _ = reply.try_send(Ok(zxid));
    Ok(())
}

pub async fn run(params: PipelineParams) -> Result<(), String> {
    let PipelineParams { config, recovered, tree, from_cores, to_cores, log_writing, shutdown, stats } = params;
    let now = Now::read();
    let mut sessions = SessionTracker::new(config.tick_time_ms, session::first_session_id(0, now.wall_ms));
    for (id, entry) in tree.sessions() {
        sessions.add(id, entry.timeout_ms, now.mono_ms);
    }
    let log_writer = open_log(&config, &recovered.tail, tree.last_zxid() + 1, &stats).await?;
    tracing::info!("pipeline core ready at zxid {:#x} with {} sessions", tree.last_zxid(), sessions.len());

    let mut p = Pipeline {
        config: config.clone(),
        tree,
        sessions,
        conn_sessions: Default::default(),
        commits: CommitQueue::new(),
        rounds: Rounds::default(),
        records: Vec::new(),
        record_bytes: 0,
        encode_buf: BytesMut::with_capacity(64 * 1024),
        txns_since_snapshot: 0,
        bytes_since_snapshot: 0,
        snapshot_roll: draw_snapshot_roll(&config),
        collections: Collections::new(config.client_cores),
        control: Vec::new(),
        stats: stats.clone(),
        restore: None,
        lap: now.at,
        preps: 0,
    };

    let wake = Rc::new(Semaphore::new(0));
    let ticked = Rc::new(Cell::new(false));
    let connected = Rc::new(Cell::new(false));
    super::startup::warn_while_waiting("the pipeline core: connecting to the client cores".into(), connected.clone());
    let inbox = Inbox::start(from_cores, wake.clone(), stats.clone()).await;
    let senders = CoreSenders::connect(to_cores, stats.clone()).await;
    connected.set(true);
    let tick_ms = (config.tick_time_ms as u64 / 2).clamp(1, TICK_INTERVAL_MS_MAX);
    let ticker = start_ticker(tick_ms, wake.clone(), ticked.clone());

    let mut snapshots = Snapshots::new(now.mono_ms, stats.clone());
    let slot = LogSlot::new(log_writer, wake.clone(), log_writing);
    let mut log = LogState { slot, durable: p.tree.clone(), disk_full: false };
    let mut last_reap_ms = now.mono_ms;
    // The first txn of a data dir without a session-password key makes one, before any
    // session is created.
    p.ensure_session_secret(now);
    wake.signal(1);
    loop {
        if wake.acquire(1).await.is_err() {
            break;
        }
        let now = Now::read();
        p.lap = now.at;
        let stopping = shutdown.load(Ordering::Relaxed);
        // What the last pass held goes first (a connection's order), then the inbox, then
        // the rounds of what this pass held, while the batch has room.
        if !p.rounds.is_empty() {
            p.next_round(now);
        }
        while !p.batch_full() && p.restore.is_none() {
            let Some(msg) = inbox.pop() else { break };
            p.take_in(msg, now);
        }
        while !p.rounds.is_empty() && !p.batch_full() {
            p.next_round(now);
        }
        p.end_preps();
        inbox.made_room();
        // After the inbox: the pings and requests that waited there (during a slow
        // fdatasync, say) have refreshed their sessions before any is expired.
        if ticked.replace(false) && !stopping {
            p.ensure_session_secret(now);
            p.expire_sessions(now);
            if now.mono_ms - last_reap_ms >= config.container_check_interval_ms as i64 {
                last_reap_ms = now.mono_ms;
                p.reap(now);
            }
        }
        // The log runs beside this loop (`log_task`): a finished append is reported, then the
        // txns prepped meanwhile go out as the next batch (one append in flight).
        if let Some((landing, result)) = log.slot.finished() {
            if let Err(e) = land(&mut p, &mut log, landing, result, &senders, now).await {
                senders.shutdown().await;
                return Err(e);
            }
            if let Some(writer) = log.slot.idle() {
                stats.publish_syncs(writer.sync_times());
            }
        }
        if !log.slot.busy() {
            if !p.records.is_empty() {
                start_append(&mut p, &mut log);
            } else if !p.commits.is_empty() {
                // Nothing to log: answers that depend on no txn (and none is in flight).
                senders.send_batches(p.commits.take(&p.tree)).await;
            }
        }
        for msg in std::mem::take(&mut p.control) {
            senders.send_all(msg).await;
        }
        stats.inbox_depth.store(inbox.len() as u64, Ordering::Relaxed);
        // A full batch waits for the append in flight, which wakes the loop when it lands.
        if (!inbox.is_empty() || !p.rounds.is_empty()) && !p.batch_full() {
            wake.signal(1);
        }
        if config.snapshot_due(p.txns_since_snapshot, p.bytes_since_snapshot, p.snapshot_roll) && snapshots.idle() {
            p.txns_since_snapshot = 0;
            p.bytes_since_snapshot = 0;
            p.snapshot_roll = draw_snapshot_roll(&config);
            // The roll needs the writer: the append in flight lands first. The snapshot is of
            // what the log holds (txns prepped since are not durable yet, and a full disk could
            // still refuse them), and the new segment starts right after it.
            if let Some((landing, result)) = log.slot.settle().await {
                if let Err(e) = land(&mut p, &mut log, landing, result, &senders, now).await {
                    senders.shutdown().await;
                    return Err(e);
                }
                wake.signal(1);
            }
            let durable = log.durable.clone();
            let writer = log.slot.idle().expect("a settled log slot holds its writer");
            if let Err(e) = snapshots.start(&config, writer, durable, now.mono_ms).await {
                tracing::error!("{e}; stopping");
                return Err(e);
            }
        }
        if p.restore.is_some() && p.rounds.is_empty() {
            if let Err(e) = restore(&mut p, &mut log, &senders, now).await {
                senders.shutdown().await;
                return Err(e);
            }
            wake.signal(1);
        }
        if stopping && inbox.is_empty() && p.rounds.is_empty() && !log.slot.busy() && p.records.is_empty() {
            tracing::info!("pipeline core stopping at zxid {:#x}", p.tree.last_zxid());
            senders.shutdown().await;
            break;
        }
    }
    ticker.cancel();
    drop(inbox);
    if let (_, Err(e)) = log.slot.close().await {
        tracing::warn!("closing the txn log: {e}");
    }
    Ok(())
}
