//! Which reads may share a commit batch with their session's next write (`Fence`).
//! A read that waits behind one of its session's requests at the pipeline core (W1) is
//! answered from the root of a batch that holds W1. If the session's next write (W2) shares
//! that batch, the root holds W2 too, and everything ordered after W2. ZooKeeper answers the
//! read before W2, so the read must show nothing ordered from W2 on. Two ways keep that:
//! - `Fence::Seal`: W2 seals the batch before itself (a root of its own: each root costs the
//!   next writes a copy of the tree nodes they touch, `commit_queue`).
//! - `Fence::Guard`: W2 carries the keys of the reads waiting before it; before the first
//!   later item, of any session, W2 included, that changes a node one of them reads, the
//!   commit queue keeps that node as it is for W2 (`Commit::Txn::captured`). The reads are
//!   then answered in their place, between W1's and W2's replies, from what W2 kept of their
//!   node or else from the root (which holds their node as it was at W2), with the zxid of the
//!   last txn before W2 in their header (`client_core`). What the batch holds beyond W2, they
//!   cannot see; a txn that may change any node (closing a session) seals the batch instead.
//!
//! Rules:
//! - A guard is only for reads of one node's data, stat, ACL or children outside `/zookeeper`
//!   (quota statistics and the configuration change without a write naming them); a key is
//!   the node's path hash (`key`), and a txn changes its node's key and, if it creates or
//!   deletes, its parent's (`commit_queue`). Any other read waiting, or more than
//!   `READS_WAITING_MAX`, seals.
//! - A connection that has ever asked for a watch always seals when an answer (a read, an
//!   owed error) waits before its write: a batch queues its watch events ahead of its replies,
//!   so an event of W2 would reach that connection before a read it sent earlier.
//! - A ping waiting needs neither: it shows nothing of the tree. Its reply keeps its place
//!   among the replies, with the zxid of that place; only a watch event of W2 may come ahead
//!   of it, and no client orders a ping's reply against events (Java, C and kazoo handle xid
//!   -2 apart).
//! - W2 seals where the client core already sees it may change a read waiting before it (so
//!   that the pipeline's rounds give it the next round: `commit_queue::Rounds`); a sequential
//!   create's name is not known here, so a create there counts as changing every sibling. The
//!   commit queue checks the exact txn all the same.
//! - Only the reads between a connection's previous request at the pipeline and W2 count:
//!   those before went with the previous write's guard, which stays in force for the rest of
//!   the open batch.
//! - The hash's seed is drawn once per process, so a client cannot choose colliding paths; a
//!   collision anyway only makes the commit queue keep more nodes, never shows a read more
//!   than it may: a key stays guarded to the batch's end, and a node is kept by path, at its
//!   first change after the write.
//!
//! Pure: no I/O, no glommio.

use crate::proto::Request;
use crate::tree::path::parent;
use crate::txn::{TxnOp, WriteOp};
use std::hash::BuildHasher;

/// Reads that may wait between two writes of a connection with a guard; past it, the write seals.
pub const READS_WAITING_MAX: usize = 64;

/// The tree prefix whose nodes change without a write naming them.
const SYSTEM_PREFIX: &str = "/zookeeper";

/// What a write asks of the commit queue about the reads of its connection waiting before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// No answer of the connection waits before it, or only pings (they show nothing of the
    /// tree, and are answered in their place, `Fences::fence`).
    Free,
    /// Seal the open batch before this write if it holds an item of the same connection.
    Seal,
    /// The keys of the reads waiting before it: if the open batch holds an earlier item of the
    /// connection, the first later item that changes one of their nodes keeps that node as it
    /// was for this write's reads (`commit_queue`).
    Guard(Box<[u64]>),
}

impl Fence {
    pub fn seals(&self) -> bool {
        matches!(self, Fence::Seal)
    }
}

/// The key of a node's path, as reads and txns name it: seeded at random once per process (the
/// client cores and the pipeline share it; keys never leave the process), so a client cannot
/// aim paths at one key or one bucket of the commit queue's guard map.
pub fn key(path: &str) -> u64 {
    static STATE: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    STATE.get_or_init(foldhash::fast::RandomState::default).hash_one(path)
}

fn is_system(path: &str) -> bool {
    path == SYSTEM_PREFIX || path.strip_prefix(SYSTEM_PREFIX).is_some_and(|rest| rest.starts_with('/'))
}

/// The path of a read whose answer depends on that node alone, or None.
fn one_node(req: &Request) -> Option<&str> {
    crate::query::one_node_path(req).filter(|path| !is_system(path))
}

/// Whether a request leaves a watch (or changes the connection's watches).
fn asks_for_a_watch(req: &Request) -> bool {
    match req {
        Request::GetData { watch, .. }
        | Request::Exists { watch, .. }
        | Request::GetChildren { watch, .. }
        | Request::GetChildren2 { watch, .. } => *watch,
        Request::SetWatches { .. } | Request::SetWatches2 { .. } | Request::AddWatch { .. } => true,
        _ => false,
    }
}

/// A waiting read: its node's key and its parent's.
#[derive(Debug, Clone, Copy)]
struct Read {
    node: u64,
    parent: u64,
}

/// One connection's reads waiting since its last request sent to the pipeline core.
#[derive(Debug, Default)]
pub struct Fences {
    reads: Vec<Read>,
    /// A read waits that no guard covers.
    any: bool,
    watched: bool,
}

impl Fences {
    /// `req` is queued on the connection behind a request at the pipeline core. A ping reads
    /// nothing: it needs neither a guard nor a seal.
    pub fn read_waits(&mut self, req: &Request) {
        self.watched |= asks_for_a_watch(req);
        if matches!(req, Request::Ping) {
            return;
        }
        match one_node(req) {
            Some(path) if self.reads.len() < READS_WAITING_MAX => {
                self.reads.push(Read { node: key(path), parent: parent(path).map_or(0, key) })
            }
            _ => self.any = true,
        }
    }

    /// An error owed in order is queued on the connection behind a request at the pipeline
    /// core: the next write seals.
    pub fn error_waits(&mut self) {
        self.any = true;
    }

    /// The connection asked for a watch in a read answered at once.
    pub fn watch_asked(&mut self, req: &Request) {
        self.watched |= asks_for_a_watch(req);
    }

    /// A request other than a write went to the pipeline core (a sync): it seals the batch
    /// on a repeat of its connection, so the reads before it need no guard.
    pub fn sent(&mut self) {
        self.reads.clear();
        self.any = false;
    }

    /// What `op`, sent now, asks of the commit queue; `answer_waits`: a read, a ping or an
    /// owed error of the connection is queued right before it.
    pub fn fence(&mut self, op: &WriteOp, answer_waits: bool) -> Fence {
        let fence = if !answer_waits || (self.reads.is_empty() && !self.any) {
            // Nothing waits, or only pings (they show nothing of the tree).
            Fence::Free
        } else if self.watched || self.any || !self.outside(op) {
            Fence::Seal
        } else {
            Fence::Guard(self.reads.iter().map(|r| r.node).collect())
        };
        self.sent();
        fence
    }

    /// Whether `op` surely changes none of the waiting reads' nodes, as far as the client core
    /// can tell (a create may take any sibling's name).
    fn outside(&self, op: &WriteOp) -> bool {
        match op {
            WriteOp::SetData { path, .. } | WriteOp::SetAcl { path, .. } => {
                let k = key(path);
                self.reads.iter().all(|r| r.node != k)
            }
            WriteOp::Check { .. } => true,
            WriteOp::Create { path, .. } | WriteOp::Delete { path, .. } => {
                let k = key(path);
                let p = parent(path).map_or(0, key);
                let create = matches!(op, WriteOp::Create { .. });
                self.reads.iter().all(|r| r.node != k && r.node != p && !(create && r.parent == p))
            }
            WriteOp::Multi(ops) => ops.iter().all(|sub| self.outside(sub)),
            _ => false,
        }
    }
}

/// The nodes a committed txn changes, each given to `visit` with its key: its own node and,
/// if it creates or deletes, its parent. False when it may change any node (closing a session
/// deletes its ephemerals; the rest are rare and sealed for).
pub fn changed_nodes<'a>(op: &'a TxnOp, visit: &mut impl FnMut(u64, &'a str)) -> bool {
    match op {
        TxnOp::SetData { path, .. } | TxnOp::SetAcl { path, .. } => visit(key(path), path),
        TxnOp::Create { path, .. } | TxnOp::Delete { path, .. } => {
            visit(key(path), path);
            if let Some(p) = parent(path) {
                visit(key(p), p);
            }
        }
        TxnOp::Check { .. } | TxnOp::Error { .. } | TxnOp::CreateSession { .. } => {}
        TxnOp::Multi(ops) => return ops.iter().all(|sub| changed_nodes(sub, visit)),
        TxnOp::CloseSession | TxnOp::SessionSecret { .. } | TxnOp::Restore | TxnOp::Reconfig { .. } => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn get(path: &str) -> Request {
        Request::GetData { path: path.into(), watch: false }
    }

    fn set(path: &str) -> WriteOp {
        WriteOp::SetData { path: path.into(), data: Some(Bytes::from_static(b"x")), version: -1 }
    }

    fn create(path: &str) -> WriteOp {
        WriteOp::Create { opcode: 1, path: path.into(), data: None, acl: None, flags: 2, ttl_ms: -1 }
    }

    fn fence_after(reads: &[Request], op: &WriteOp) -> Fence {
        let mut f = Fences::default();
        for r in reads {
            f.read_waits(r);
        }
        f.fence(op, !reads.is_empty())
    }

    fn guard(paths: &[&str]) -> Fence {
        Fence::Guard(paths.iter().map(|p| key(p)).collect())
    }

    #[test]
    fn issue17_a_write_after_reads_of_other_nodes_carries_their_keys() {
        assert_eq!(fence_after(&[], &set("/a")), Fence::Free);
        assert_eq!(fence_after(&[get("/b")], &set("/a")), guard(&["/b"]));
        assert_eq!(fence_after(&[get("/b"), get("/c")], &set("/a")), guard(&["/b", "/c"]));
        assert_eq!(fence_after(&[get("/b"), get("/a")], &set("/a")), Fence::Seal);
        // A create or delete changes its parent's stat and children; a create any sibling.
        let children = Request::GetChildren { path: "/q".into(), watch: false };
        assert_eq!(fence_after(std::slice::from_ref(&children), &create("/q/n-")), Fence::Seal);
        assert_eq!(fence_after(&[get("/q")], &WriteOp::Delete { path: "/q/x".into(), version: -1 }), Fence::Seal);
        assert_eq!(fence_after(&[get("/q/n-0000000003")], &create("/q/n-")), Fence::Seal);
        assert_eq!(fence_after(&[get("/r/n-0000000003")], &create("/q/n-")), guard(&["/r/n-0000000003"]));
        // A check changes nothing; a multi whatever its parts change.
        assert_eq!(fence_after(&[get("/a")], &WriteOp::Check { path: "/a".into(), version: 1 }), guard(&["/a"]));
        assert_eq!(fence_after(&[get("/a")], &WriteOp::Multi(vec![set("/b"), set("/a")])), Fence::Seal);
        assert_eq!(fence_after(&[get("/a")], &WriteOp::Multi(vec![set("/b"), set("/c")])), guard(&["/a"]));
    }

    #[test]
    fn issue17_reads_of_no_one_node_system_nodes_other_writes_and_errors_seal() {
        assert_eq!(fence_after(&[get("/zookeeper/quota/a/zookeeper_stats")], &set("/a/b")), Fence::Seal);
        assert_eq!(fence_after(&[get("/zookeeper")], &set("/a")), Fence::Seal);
        assert_eq!(fence_after(&[get("/zookeeperx")], &set("/a")), guard(&["/zookeeperx"]));
        assert_eq!(fence_after(&[Request::GetAllChildrenNumber { path: "/b".into() }], &set("/a")), Fence::Seal);
        assert_eq!(fence_after(&[get("/b")], &WriteOp::CloseSession), Fence::Seal);
        assert_eq!(fence_after(&[get("/b")], &WriteOp::Multi(vec![WriteOp::CloseSession])), Fence::Seal);
        // An owed error waits.
        let mut f = Fences::default();
        f.error_waits();
        assert_eq!(f.fence(&set("/a"), true), Fence::Seal);
        // Past the limit.
        let many: Vec<Request> = (0..=READS_WAITING_MAX).map(|i| get(&format!("/r{i}"))).collect();
        assert_eq!(fence_after(&many, &set("/a")), Fence::Seal);
    }

    #[test]
    fn issue17_only_the_reads_since_the_last_request_sent_count() {
        let mut f = Fences::default();
        f.read_waits(&get("/a"));
        assert_eq!(f.fence(&set("/b"), true), guard(&["/a"]));
        // /a went with the write before (its guard holds for the rest of the batch).
        f.read_waits(&get("/b"));
        assert_eq!(f.fence(&set("/a"), true), guard(&["/b"]));
        f.read_waits(&get("/c"));
        f.sent();
        assert_eq!(f.fence(&set("/c"), false), Fence::Free);
    }

    #[test]
    fn issue17_pings_waiting_need_no_seal_nor_guard() {
        let mut f = Fences::default();
        f.read_waits(&Request::Ping);
        assert_eq!(f.fence(&set("/a"), true), Fence::Free);
        // With a read: the read's guard alone; with an owed error: a seal.
        f.read_waits(&Request::Ping);
        f.read_waits(&get("/b"));
        assert_eq!(f.fence(&set("/a"), true), guard(&["/b"]));
        f.error_waits();
        f.read_waits(&Request::Ping);
        assert_eq!(f.fence(&set("/a"), true), Fence::Seal);
        // A connection that asked for a watch too: a ping reply is ordered against no event.
        f.watch_asked(&Request::Exists { path: "/w".into(), watch: true });
        f.read_waits(&Request::Ping);
        assert_eq!(f.fence(&set("/a"), true), Fence::Free);
    }

    #[test]
    fn issue17_a_connection_that_asked_for_a_watch_always_seals() {
        let mut f = Fences::default();
        f.watch_asked(&Request::Exists { path: "/w".into(), watch: true });
        assert_eq!(f.fence(&set("/a"), false), Fence::Free);
        f.read_waits(&get("/b"));
        assert_eq!(f.fence(&set("/a"), true), Fence::Seal);
        assert_eq!(fence_after(&[Request::GetData { path: "/w".into(), watch: true }], &set("/a")), Fence::Seal);
    }

    #[test]
    fn issue17_changed_nodes_name_a_node_and_a_created_or_deleted_nodes_parent() {
        let changed = |op: &TxnOp| {
            let mut out = Vec::new();
            let all = changed_nodes(op, &mut |k, p: &str| out.push((k, p.to_string())));
            all.then_some(out)
        };
        let named = |paths: &[&str]| Some(paths.iter().map(|p| (key(p), p.to_string())).collect::<Vec<_>>());
        assert_eq!(changed(&TxnOp::SetData { path: "/a/b".into(), data: None }), named(&["/a/b"]));
        assert_eq!(changed(&TxnOp::Delete { path: "/a/b".into() }), named(&["/a/b", "/a"]));
        let create = TxnOp::Create { path: "/c".into(), data: None, acl: vec![], ephemeral_owner: 0, response_type: 1 };
        assert_eq!(changed(&create), named(&["/c", "/"]));
        let multi =
            TxnOp::Multi(vec![TxnOp::Check { path: "/x".into() }, TxnOp::SetAcl { path: "/y".into(), acl: vec![] }]);
        assert_eq!(changed(&multi), named(&["/y"]));
        assert_eq!(changed(&TxnOp::CloseSession), None);
        assert_eq!(changed(&TxnOp::Multi(vec![TxnOp::CloseSession])), None);
    }
}
