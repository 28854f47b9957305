//! The messages that cross cores: client core → pipeline core (requests that need ordering) and
//! pipeline core → every client core (committed, durable batches, each with the root of the one
//! committed tree after it: see `commit_queue`).
//! Rules: every message is `Send` and owns its data (`Bytes`, `Arc`, tree roots), never an
//! `Rc`; a batch goes to every client core as one `Arc`, and each core picks out what concerns
//! its own connections; items of a batch are in the order the pipeline decided them.

use super::fence::Fence;
use super::inspect::{CoreReport, Inspect, Inspected};
use crate::proto::Id;
use crate::session::{ConnRef, SESSION_PASSWD_LEN};
use crate::tree::node_map::Entry;
use crate::tree::DataTree;
use crate::txn::apply::{Change, OpResult};
use crate::txn::{Txn, WriteOp};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

/// A client core asks the pipeline core for something that must be ordered.
#[derive(Debug)]
pub enum ToPipeline {
    /// A ConnectRequest: create a session (id 0) or resume one.
    /// `read_only`: the request's trailing readOnly flag (None: an old client without it).
    Connect {
        conn: ConnRef,
        session_id: i64,
        passwd: Bytes,
        timeout_ms: i32,
        last_zxid_seen: i64,
        read_only: Option<bool>,
    },
    /// A write of the session bound to `conn`, with the connection's ids at the time it was sent.
    /// `fence`: what the reads of this connection waiting between its previous request still
    /// in process (a write, sync or connect) and this one need of the commit batches (they are
    /// answered from a batch's root: `commit_queue`, `fence`). `read_at`: when the
    /// client core's socket read completed it (the pipeline times `stage_latency::Stage::CoreToPipeline` from it).
    Write { conn: ConnRef, xid: i32, op: WriteOp, auth: Arc<[Id]>, fence: Fence, read_at: Instant },
    /// A sync: answered once everything ordered before it is applied on the origin core.
    Sync { conn: ConnRef, xid: i32, path: String },
    /// Sessions that sent something since the last report.
    Touch { sessions: Vec<i64> },
    /// The connection is gone; its session lives on until it expires or is resumed.
    Detached { conn: ConnRef },
    /// A four-letter word or admin command needs every core's report (`inspect`).
    Inspect { asker: u16, token: u64, what: Inspect },
    /// This core's answer to `ToClientCore::Inspect`.
    Report { asker: u16, token: u64, report: CoreReport },
    /// The admin `restore` command (relayed by client core 0): replace the whole tree with
    /// `tree` (a decoded snapshot) once everything ordered before is durable; `reply` gets the
    /// zxid the restore took, or why it was refused (an ensemble member refuses).
    Restore { tree: Box<DataTree>, reply: std::sync::mpsc::SyncSender<Result<i64, String>> },
}

impl ToPipeline {
    /// The connection whose requests this message carries (their order is that connection's).
    pub fn conn(&self) -> Option<ConnRef> {
        match self {
            ToPipeline::Connect { conn, .. }
            | ToPipeline::Write { conn, .. }
            | ToPipeline::Sync { conn, .. }
            | ToPipeline::Detached { conn } => Some(*conn),
            ToPipeline::Touch { .. }
            | ToPipeline::Inspect { .. }
            | ToPipeline::Report { .. }
            | ToPipeline::Restore { .. } => None,
        }
    }
}

/// A node as it was when a guarded write was applied, kept for the reads waiting before that
/// write: a later txn of the same batch changed it (`commit_queue`).
#[derive(Debug, Clone)]
pub struct Captured {
    pub path: Arc<str>,
    /// None: the node did not exist.
    pub entry: Option<Arc<Entry>>,
}

/// What a client core does with one item of a committed batch.
#[derive(Debug)]
pub enum Commit {
    /// A committed txn, applied on the pipeline core: fire the watches of `changes`; if
    /// `origin` is a connection of this core, reply to request `xid` with `result`, after
    /// answering the reads waiting before it; a read of a node in `captured` is answered from
    /// that node as it was when this txn was applied (`commit_queue`: the read's guard).
    Txn { txn: Txn, origin: Option<(ConnRef, i32)>, result: OpResult, changes: Vec<Change>, captured: Vec<Captured> },
    /// The session is established for `conn`: send the ConnectResponse.
    Connected { conn: ConnRef, session_id: i64, timeout_ms: i32, passwd: [u8; SESSION_PASSWD_LEN] },
    /// Resume refused: the session is unknown, expired, or the password is wrong.
    SessionExpired { conn: ConnRef },
    /// The client has seen a zxid this server does not have: close without a reply.
    ZxidAhead { conn: ConnRef },
    /// Reply to the sync `xid` of `conn` (everything before it is applied by now).
    SyncDone { conn: ConnRef, xid: i32, path: String },
    /// A write whose session is gone: reply `err` to `xid`.
    Rejected { conn: ConnRef, xid: i32, err: i32 },
    /// Close the connection without a message (its session expired or moved elsewhere).
    Close { conn: ConnRef },
    /// Reply `result` to write `xid` of `conn`, decided on this member without a txn (a
    /// local session's closeSession).
    Local { conn: ConnRef, xid: i32, result: OpResult },
}

impl Commit {
    /// The connection this item answers or closes, if any.
    pub fn conn(&self) -> Option<&ConnRef> {
        match self {
            Commit::Txn { origin, .. } => origin.as_ref().map(|(c, _)| c),
            Commit::Connected { conn, .. }
            | Commit::SessionExpired { conn }
            | Commit::ZxidAhead { conn }
            | Commit::SyncDone { conn, .. }
            | Commit::Rejected { conn, .. }
            | Commit::Local { conn, .. }
            | Commit::Close { conn } => Some(conn),
        }
    }
}

/// One committed, durable batch, shared by all client cores. It answers each connection at
/// most once (`commit_queue`).
#[derive(Debug)]
pub struct CommitBatch {
    pub items: Vec<Commit>,
    /// The last zxid of the batch (or of the tree, when the batch has no txn).
    pub last_zxid: i64,
    /// The committed tree after the batch's last item: what the client cores read from next.
    pub root: DataTree,
}

/// What a server is, as `srvr` and `mntr` say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerMode {
    Standalone,
    Leader,
    Follower,
    Observer,
    /// An ensemble member outside a quorum (electing, or syncing with a new leader).
    NotServing,
    /// An ensemble member outside a quorum serving read-only sessions (`readonlymode.enabled`).
    ReadOnly,
}

impl ServerMode {
    pub const ALL: [ServerMode; 6] = [
        ServerMode::Standalone,
        ServerMode::Leader,
        ServerMode::Follower,
        ServerMode::Observer,
        ServerMode::NotServing,
        ServerMode::ReadOnly,
    ];

    pub fn index(self) -> u8 {
        ServerMode::ALL.iter().position(|m| *m == self).unwrap_or(0) as u8
    }

    pub fn from_index(i: u8) -> ServerMode {
        ServerMode::ALL.get(i as usize).copied().unwrap_or(ServerMode::NotServing)
    }

    /// ZooKeeper's word for it (`Mode:` in srvr, `zk_server_state` in mntr).
    pub fn name(self) -> &'static str {
        match self {
            ServerMode::Standalone => "standalone",
            ServerMode::Leader => "leader",
            ServerMode::Follower => "follower",
            ServerMode::Observer => "observer",
            ServerMode::NotServing => "not serving",
            ServerMode::ReadOnly => "read-only",
        }
    }

    pub fn serving(self) -> bool {
        self != ServerMode::NotServing
    }
}

/// What travels on the pipeline → client core channel.
#[derive(Debug, Clone)]
pub enum ToClientCore {
    /// Committed batches, in order (one message for every batch a pipeline pass made), and
    /// when the pipeline core sent them (`stage_latency::Stage::CommitToCore`).
    Batches(Arc<Vec<CommitBatch>>, Instant),
    /// Ensemble: this member serves clients in this mode, or (NotServing) stops: every
    /// connection closes, and new ones are refused until it serves again.
    Serving(ServerMode),
    /// Ensemble: the committed tree was replaced by the leader's snapshot (a SNAP): read from
    /// this root, and drop every watch.
    Reset(DataTree),
    /// Report on this core's connections / watches to the pipeline for `asker`.
    Inspect { asker: u16, token: u64, what: Inspect },
    /// Every core's report, for the core `asker` (the others ignore it).
    Inspected { asker: u16, token: u64, inspected: Arc<Inspected> },
    /// Ensemble: a committed reconfiguration moved this member's client address: accept
    /// clients at this address from now on instead of the plain client port's old one
    /// (established connections stay).
    Listen(std::net::SocketAddr),
    /// Stop accepting, flush every connection, and exit.
    Shutdown,
}
