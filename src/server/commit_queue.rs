//! Commit batches as the pipeline core builds them: each committed txn is applied ONCE, here,
//! to the one committed tree (read-copy-update), and every batch carries the root of that tree
//! after its last item, each txn's result (what the origin's reply is made of) and its change
//! list (what fires watches). Client cores answer reads from the root of the last batch they
//! took, and apply nothing.
//! Rules: a client core takes a batch's items in order, each txn's watch events before its
//! reply; a read waiting behind a reply is answered from the batch's root once all the items
//! are taken, or, where its connection has a later reply in the batch, in its place before
//! that reply (below). So a read never sees a change whose watch event is not queued ahead of
//! it. A batch holds two items for one connection with a read of that connection waiting
//! between them only under that read's guard (`server::fence`; a ping waiting there needs
//! none): from the later item (W2) on, before any item, of any session, that changes a node a
//! guarded read reads, the node as it is then is kept with W2 (`Commit::Txn::captured`, the
//! first change only: later ones must not show), and the client core answers the read in its
//! place from what W2 kept, or else from the root, where the node is as it was at W2; either
//! way nothing ordered after its session's later item. A txn that may change any node (closing
//! a session) seals the batch instead. A write says what its waiting reads need
//! (`ToPipeline::Write::fence`): a seal on a repeat, a guard, or nothing; other items always
//! seal on a repeat. Roots are O(1) clones; what one costs is the copy-on-write of the trie
//! nodes the next txns touch (and freeing them later), so batches are sealed only where a
//! read needs a root of its own; a kept node costs one reference, and its change one znode's
//! copy.

use super::fence::{self, Fence};
use super::messages::{Captured, Commit, CommitBatch, ToPipeline};
use crate::id_hash::{IdMap, IdSet};
use crate::session::ConnRef;
use crate::tree::DataTree;
use crate::txn::{apply, Txn, TxnOp};
use std::collections::VecDeque;
use std::sync::Arc;

/// Sets of this core's connections (`id_hash`: connection numbers are assigned by the client
/// cores, never chosen by a client).
type ConnSet = IdSet<ConnRef>;

/// The guarded reads of the open batch, by key (a read's node's path hash, `fence::key`).
#[derive(Debug, Default)]
struct Guard {
    keys: IdMap<u64, Guarded>,
}

/// One guarded key: the writes whose reads read it (item indexes, in order), and for each
/// path of that key a txn changed since, how many of those writes kept it already (only the
/// writes after them still need to: a node is kept at its first change after the write). More
/// than one path per key only where 64-bit hashes collide.
#[derive(Debug, Default)]
struct Guarded {
    writes: Vec<usize>,
    kept: Vec<(Box<str>, usize)>,
}

/// What a txn does to the open batch's guarded reads.
enum Crossing<'a> {
    /// It changes none of their nodes.
    Clear,
    /// It may change any node: the batch ends before it.
    Any,
    /// It changes these nodes (path) that the reads of these writes (item index) read.
    Nodes(Vec<(usize, &'a str)>),
}

impl Guard {
    fn add(&mut self, keys: &[u64], write: usize) {
        for &k in keys {
            let writes = &mut self.keys.entry(k).or_default().writes;
            if writes.last() != Some(&write) {
                writes.push(write);
            }
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
    }

    /// Which guarded reads `op` changes a node of, for the first time since their write (each
    /// write with a node is named once: the work is bounded by the writes and the txns).
    fn crossing<'a>(&mut self, op: &'a TxnOp) -> Crossing<'a> {
        if self.keys.is_empty() {
            return Crossing::Clear;
        }
        let mut nodes = Vec::new();
        let keys = &mut self.keys;
        let named = fence::changed_nodes(op, &mut |k, path| {
            let Some(guarded) = keys.get_mut(&k) else { return };
            let from = match guarded.kept.iter_mut().find(|(p, _)| **p == *path) {
                Some((_, upto)) => std::mem::replace(upto, guarded.writes.len()),
                None => {
                    guarded.kept.push((path.into(), guarded.writes.len()));
                    0
                }
            };
            nodes.extend(guarded.writes[from..].iter().map(|&write| (write, path)));
        });
        match (named, nodes.is_empty()) {
            (false, _) => Crossing::Any,
            (true, true) => Crossing::Clear,
            (true, false) => Crossing::Nodes(nodes),
        }
    }
}

/// Keeps `path` as it is in `tree` for the reads of a write (`Guard::crossing` names each
/// write with a path once: at the path's first change after the write).
fn capture(into: &mut Vec<Captured>, path: &str, tree: &DataTree) {
    debug_assert!(!into.iter().any(|c| &*c.path == path), "commit queue: {path} kept twice for one write");
    let entry = tree.snapshot_of(path);
    let path = entry.as_ref().map_or_else(|| Arc::from(path), |e| e.path.clone());
    into.push(Captured { path, entry });
}

/// Items of the open batch, and the batches sealed since the last `take`.
#[derive(Debug, Default)]
pub struct CommitQueue {
    open: Vec<Commit>,
    /// Connections the open batch answers.
    conns: ConnSet,
    /// The reads answered in their place, from what their write kept or the batch's root.
    guard: Guard,
    sealed: Vec<CommitBatch>,
}

impl CommitQueue {
    pub fn new() -> CommitQueue {
        CommitQueue::default()
    }

    /// Adds an item that changes nothing in the tree (a session established or refused, a
    /// sync answered, a write refused, a connection closed). `tree` is the committed state.
    pub fn push(&mut self, item: Commit, tree: &DataTree) {
        self.split_for(item.conn(), tree);
        self.open.push(item);
    }

    /// Applies `txn` to `tree` (the committed tree; the standalone pipeline's tree, which
    /// is committed once the log batch is durable) and adds it with its result and changes.
    /// `fence`: what the reads of the origin connection waiting before this write need.
    pub fn apply(&mut self, tree: &mut DataTree, txn: Txn, origin: Option<(ConnRef, i32)>, fence: &Fence) {
        match (&origin, fence) {
            (Some((c, _)), Fence::Seal) => self.split_for(Some(c), tree),
            (Some((c, _)), Fence::Guard(keys)) => {
                // Without an earlier item of the connection here, its reads are answered from
                // an earlier batch's root, which holds none of this one.
                if !self.conns.insert(*c) {
                    self.guard.add(keys, self.open.len());
                }
            }
            (Some((c, _)), Fence::Free) => {
                self.conns.insert(*c);
            }
            (None, _) => {}
        }
        // A read answered in its place must not see this txn: it gets the nodes this txn
        // changes as they are now (this item's own reads included: their write may change a
        // node they read, e.g. a sequential create's sibling).
        let mut captured = Vec::new();
        match self.guard.crossing(&txn.op) {
            Crossing::Clear => {}
            Crossing::Any => {
                self.seal(tree);
                if let Some((c, _)) = &origin {
                    self.conns.insert(*c);
                }
            }
            Crossing::Nodes(nodes) => {
                for (write, path) in nodes {
                    let into = match self.open.get_mut(write) {
                        Some(Commit::Txn { captured, .. }) => captured,
                        Some(other) => panic!("commit queue: a guard names item {write}, not a txn: {other:?}"),
                        None => {
                            assert_eq!(write, self.open.len(), "commit queue: a guard names an item past the batch");
                            &mut captured
                        }
                    };
                    capture(into, path, tree);
                }
            }
        }
        let mut changes = Vec::new();
        let result = apply::apply(tree, &txn, &mut changes);
        if matches!(txn.op, TxnOp::CloseSession) && super::audit::enabled() {
            let lost = changes.iter().filter_map(|c| match c {
                apply::Change::Deleted { path, .. } => Some(path.clone()),
                _ => None,
            });
            super::audit::record_ephemerals_deleted(txn.header.session_id, lost);
        }
        self.open.push(Commit::Txn { txn, origin, result, changes, captured });
    }

    /// The open batch already holds an item for `conn`.
    pub fn answers(&self, conn: &ConnRef) -> bool {
        self.conns.contains(conn)
    }

    /// A second item for one connection: the open batch ends here, with the root as of
    /// before that item.
    fn split_for(&mut self, conn: Option<&ConnRef>, tree: &DataTree) {
        if let Some(c) = conn {
            if !self.conns.insert(*c) {
                self.seal(tree);
                self.conns.insert(*c);
            }
        }
    }

    /// Ends the open batch at `tree`'s state (which must include every txn of it).
    pub fn seal(&mut self, tree: &DataTree) {
        if self.open.is_empty() {
            return;
        }
        self.conns.clear();
        self.guard.clear();
        // The next batch starts with room for as many items (no regrowth from empty of a
        // vector of large items on every batch).
        let room = self.open.len();
        self.sealed.push(CommitBatch {
            items: std::mem::replace(&mut self.open, Vec::with_capacity(room)),
            last_zxid: tree.last_zxid(),
            root: tree.clone(),
        });
    }

    /// Every batch so far, the open one sealed at `tree`'s state.
    pub fn take(&mut self, tree: &DataTree) -> Vec<CommitBatch> {
        self.seal(tree);
        std::mem::take(&mut self.sealed)
    }

    /// Every item so far, in order, without their roots (the standalone pipeline's undo of a
    /// batch the log could not take: the roots include txns that never happened).
    pub fn take_items(&mut self) -> Vec<Commit> {
        self.conns.clear();
        self.guard.clear();
        let mut items: Vec<Commit> = Vec::new();
        for b in std::mem::take(&mut self.sealed) {
            items.extend(b.items);
        }
        items.append(&mut self.open);
        items
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.sealed.is_empty()
    }
}

/// Splits sealed batches at the log's end when an append was only partly logged (the disk
/// filled between its log batches): the batches, or the front of one, whose txns are all below
/// `next_zxid` (the first zxid the log does not hold), and every item from the first txn at or
/// above it on, in order. `before` is the tree as of the last txn before the first batch. A
/// batch cut in two gets its root again by applying its logged txns to the root before it, as
/// recovery would; the items between its last logged txn and its first unlogged one (syncs,
/// refusals, closes) stay in front, where they were ordered. The error is a batch that does
/// not follow from `before` (an impossible state: the caller stops).
pub fn split_logged(
    batches: Vec<CommitBatch>,
    before: &DataTree,
    next_zxid: i64,
) -> Result<(Vec<CommitBatch>, Vec<Commit>), String> {
    let mut logged = Vec::with_capacity(batches.len());
    let mut unlogged = Vec::new();
    let mut root = before.clone();
    for b in batches {
        if !unlogged.is_empty() {
            unlogged.extend(b.items);
            continue;
        }
        if b.last_zxid < next_zxid {
            root = b.root.clone();
            logged.push(b);
            continue;
        }
        let mut front = Vec::new();
        let mut changes = Vec::new();
        let mut items = b.items.into_iter();
        for item in items.by_ref() {
            if let Commit::Txn { txn, .. } = &item {
                if txn.header.zxid >= next_zxid {
                    unlogged.push(item);
                    break;
                }
                if txn.header.zxid <= root.last_zxid() {
                    return Err(format!(
                        "txn {:#x} of a batch follows a tree already at {:#x}",
                        txn.header.zxid,
                        root.last_zxid()
                    ));
                }
                apply::apply(&mut root, txn, &mut changes);
                changes.clear();
            }
            front.push(item);
        }
        unlogged.extend(items);
        if unlogged.is_empty() {
            return Err(format!("a batch ends at {:#x} beyond the log's end, with no txn past it", b.last_zxid));
        }
        if !front.is_empty() {
            logged.push(CommitBatch { items: front, last_zxid: root.last_zxid(), root: root.clone() });
        }
    }
    Ok((logged, unlogged))
}

/// Requests taken in by rounds, so that the fenced writes of many connections share one
/// commit batch root per round instead of one each (a root costs the next txn a copy-on-write
/// of the tree's path). A fenced write of a connection already taken in this round is held,
/// with every later message of that connection, for the next round of the same pass. A
/// connection's messages keep their order; sessions are independent, so their txns may
/// interleave in any order. Where the pipeline applies at intake (standalone), it seals the
/// open batch at each round's end; in an ensemble the batches are sealed at delivery, which
/// follows the order the rounds gave the proposals.
/// Held messages wait in a queue per connection, so a round moves only the messages it takes:
/// a message is held once and released once, however many rounds its pass has.
#[derive(Debug, Default)]
pub struct Rounds {
    /// Each holding connection's messages, in order.
    held: IdMap<ConnRef, VecDeque<ToPipeline>>,
    /// The holding connections, in the order they began to hold.
    order: VecDeque<ConnRef>,
    /// Connections with a message taken in this round.
    taken: ConnSet,
}

fn is_fenced_write(msg: &ToPipeline) -> bool {
    matches!(msg, ToPipeline::Write { fence, .. } if fence.seals())
}

impl Rounds {
    /// The message to handle now, or None when it is held for the next round.
    pub fn take_in(&mut self, msg: ToPipeline) -> Option<ToPipeline> {
        let Some(conn) = msg.conn() else { return Some(msg) };
        if let Some(queue) = self.held.get_mut(&conn) {
            queue.push_back(msg);
            return None;
        }
        if is_fenced_write(&msg) && self.taken.contains(&conn) {
            self.held.insert(conn, VecDeque::from([msg]));
            self.order.push_back(conn);
            return None;
        }
        self.taken.insert(conn);
        Some(msg)
    }

    /// Ends a round and begins the next: the messages it takes from what was held, to be
    /// handled now in this order. Each holding connection's first message is taken (so
    /// every round makes progress), then its messages up to its next fenced write; what is
    /// left stays held, and later messages of that connection queue behind it.
    pub fn next_round(&mut self) -> Vec<ToPipeline> {
        self.taken.clear();
        let mut now = Vec::new();
        for _ in 0..self.order.len() {
            let Some(conn) = self.order.pop_front() else { break };
            // `order` names exactly the connections of `held`, each with a queue not empty.
            let queue = self.held.get_mut(&conn).expect("a holding connection has its queue");
            now.extend(queue.pop_front());
            while queue.front().is_some_and(|m| !is_fenced_write(m)) {
                now.extend(queue.pop_front());
            }
            self.taken.insert(conn);
            if queue.is_empty() {
                self.held.remove(&conn);
            } else {
                self.order.push_back(conn);
            }
        }
        now
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{apply::OpResult, TxnHeader, TxnOp};
    use bytes::Bytes;
    use std::collections::{HashMap, HashSet};

    fn conn(n: u64) -> ConnRef {
        ConnRef { core: 0, conn: n }
    }

    /// A tree with /a, /b and /c, and a commit queue whose batch of those creates is taken.
    fn abc_taken() -> (DataTree, CommitQueue) {
        let mut tree = DataTree::new();
        let mut q = CommitQueue::new();
        for p in ["/a", "/b", "/c"] {
            let t = create(&tree, p, 9);
            q.apply(&mut tree, t, None, &Fence::Free);
        }
        let _ = q.take(&tree);
        (tree, q)
    }

    fn set(tree: &DataTree, path: &str, data: &'static [u8], session: i64) -> Txn {
        Txn {
            header: TxnHeader { zxid: tree.last_zxid() + 1, session_id: session, cxid: 1, time_ms: 5 },
            op: TxnOp::SetData { path: path.into(), data: Some(Bytes::from_static(data)) },
        }
    }

    /// Batches of an append the disk filled part-way through: the logged front is answered
    /// with roots as of its own last txn (a cut batch's root made again from the one before),
    /// the rest is everything from the first unlogged txn on, in order.
    #[test]
    fn issue17_an_append_logged_in_part_splits_at_the_logs_end() {
        let data = |root: &DataTree, p: &str| root.get(p).and_then(|n| n.data.clone());
        // The tree before the append, the tree after it, and its batches: [set /a (4), set /b
        // (5)], then [set /c (6), a close, set /a (7), a sync, set /b (8)].
        let append = || {
            let (mut tree, mut q) = abc_taken();
            let before = tree.clone();
            for (p, d, c) in [("/a", b"4", 1), ("/b", b"5", 2)] {
                let t = set(&tree, p, d, c as i64);
                q.apply(&mut tree, t, Some((conn(c), 1)), &Fence::Free);
            }
            let t = set(&tree, "/c", b"6", 1);
            q.apply(&mut tree, t, Some((conn(1), 2)), &Fence::Seal);
            q.push(Commit::Close { conn: conn(3) }, &tree);
            let t = set(&tree, "/a", b"7", 4);
            q.apply(&mut tree, t, Some((conn(4), 1)), &Fence::Free);
            q.push(Commit::SyncDone { conn: conn(6), xid: 1, path: "/".into() }, &tree);
            let t = set(&tree, "/b", b"8", 5);
            q.apply(&mut tree, t, Some((conn(5), 1)), &Fence::Free);
            let batches = q.take(&tree);
            (before, tree, batches)
        };
        let (before, after, batches) = append();
        assert_eq!(shape(&batches), vec![(2, 5), (5, 8)]);
        let again = || append().2;
        let zxids = |items: &[Commit]| {
            items
                .iter()
                .map(|c| match c {
                    Commit::Txn { txn, .. } => txn.header.zxid,
                    _ => 0,
                })
                .collect::<Vec<_>>()
        };

        // Logged up to 7: the second batch is cut before set /b (8); the sync before it stays in
        // front, and the cut batch's root is as of 7.
        let (logged, refused) = split_logged(again(), &before, 8).unwrap();
        assert_eq!(shape(&logged), vec![(2, 5), (4, 7)]);
        assert_eq!(zxids(&logged[1].items), vec![6, 0, 7, 0]);
        assert_eq!(zxids(&refused), vec![8]);
        let root = &logged[1].root;
        assert_eq!(root.last_zxid(), 7);
        assert_eq!(data(root, "/a"), Some(Bytes::from_static(b"7")));
        assert_eq!(data(root, "/b"), Some(Bytes::from_static(b"5")));
        assert_eq!(data(root, "/c"), Some(Bytes::from_static(b"6")));
        assert_eq!(root.get("/b").map(|n| n.stat().version), Some(1));
        // At a batch's end: the whole first batch, nothing of the second.
        let (logged, refused) = split_logged(again(), &before, 6).unwrap();
        assert_eq!(shape(&logged), vec![(2, 5)]);
        assert_eq!(zxids(&refused), vec![6, 0, 7, 0, 8]);
        // Nothing logged, and everything logged.
        let (logged, refused) = split_logged(again(), &before, 4).unwrap();
        assert!(logged.is_empty());
        assert_eq!(zxids(&refused), vec![4, 5, 6, 0, 7, 0, 8]);
        let (logged, refused) = split_logged(again(), &before, 9).unwrap();
        assert_eq!(shape(&logged), vec![(2, 5), (5, 8)]);
        assert!(refused.is_empty());
        // A cut batch that does not follow from the tree given is an impossible state.
        assert!(split_logged(again(), &after, 5).is_err());
    }

    #[test]
    fn issue13_a_fenced_write_seals_the_batch_with_the_root_as_of_before_it() {
        let mut tree = DataTree::new();
        let create = create(&tree, "/x", 1);
        let mut q = CommitQueue::new();
        q.apply(&mut tree, create, Some((conn(1), 1)), &Fence::Free);
        let t = set(&tree, "/x", b"1", 2);
        q.apply(&mut tree, t, Some((conn(2), 1)), &Fence::Free);
        // Connection 2 again, no read waiting in between: same batch.
        let t = set(&tree, "/x", b"1", 2);
        q.apply(&mut tree, t, Some((conn(2), 2)), &Fence::Free);
        // Connection 1 again, a read waiting: the open batch is sealed before this write.
        let t = set(&tree, "/x", b"2", 1);
        q.apply(&mut tree, t, Some((conn(1), 2)), &Fence::Seal);
        q.push(Commit::Close { conn: conn(3) }, &tree);
        let batches = q.take(&tree);
        assert!(q.is_empty());
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].items.len(), 3);
        assert_eq!(batches[0].last_zxid, 3);
        assert_eq!(batches[0].root.get("/x").and_then(|n| n.data.clone()), Some(Bytes::from_static(b"1")));
        assert_eq!(batches[1].items.len(), 2);
        assert_eq!(batches[1].root.get("/x").and_then(|n| n.data.clone()), Some(Bytes::from_static(b"2")));
        // Each txn carries the result its reply is made of, and its watch triggers.
        match &batches[1].items[0] {
            Commit::Txn { result: OpResult::DataSet { stat }, changes, .. } => {
                assert_eq!(stat.version, 3);
                assert_eq!(changes.len(), 1);
            }
            other => panic!("unexpected item {other:?}"),
        }
        // The tree itself went on: the roots are snapshots, not the tree.
        assert_eq!(tree.get("/x").map(|n| n.stat().version), Some(3));
    }

    fn create(tree: &DataTree, path: &str, session: i64) -> Txn {
        Txn {
            header: TxnHeader { zxid: tree.last_zxid() + 1, session_id: session, cxid: 1, time_ms: 5 },
            op: TxnOp::Create {
                path: path.into(),
                data: Some(Bytes::from_static(b"0")),
                acl: crate::tree::acl::open_acl_unsafe(),
                ephemeral_owner: 0,
                response_type: 1,
            },
        }
    }

    fn guard(paths: &[&str]) -> Fence {
        Fence::Guard(paths.iter().map(|p| fence::key(p)).collect())
    }

    /// Items per sealed batch, and each batch's last zxid.
    fn shape(batches: &[CommitBatch]) -> Vec<(usize, i64)> {
        batches.iter().map(|b| (b.items.len(), b.last_zxid)).collect()
    }

    /// A kept node: its path, and its version and child count (None: absent).
    type Kept = (String, Option<(i32, usize)>);

    /// The nodes each item keeps for its reads.
    fn captured(batch: &CommitBatch) -> Vec<Vec<Kept>> {
        batch
            .items
            .iter()
            .map(|item| match item {
                Commit::Txn { captured, .. } => captured
                    .iter()
                    .map(|c| (c.path.to_string(), c.entry.as_ref().map(|e| (e.node.version, e.node.children.len()))))
                    .collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn issue17_a_guard_keeps_a_node_as_of_its_write_from_the_first_later_item_that_changes_it() {
        let mut tree = DataTree::new();
        let mut q = CommitQueue::new();
        for (i, p) in ["/x", "/y", "/z"].into_iter().enumerate() {
            let t = create(&tree, p, 9);
            q.apply(&mut tree, t, Some((conn(9), i as i32)), &Fence::Free);
        }
        let _ = q.take(&tree);
        // Connection 1: W1, a read of /y waiting, W2 with its guard; others' writes after it.
        let t = set(&tree, "/x", b"1", 1);
        q.apply(&mut tree, t, Some((conn(1), 1)), &Fence::Free);
        let t = set(&tree, "/z", b"1", 2);
        q.apply(&mut tree, t, Some((conn(2), 1)), &Fence::Free);
        let t = set(&tree, "/x", b"2", 1);
        q.apply(&mut tree, t, Some((conn(1), 2)), &guard(&["/y"]));
        // Not /y: nothing kept.
        let t = set(&tree, "/z", b"2", 3);
        q.apply(&mut tree, t, Some((conn(3), 1)), &Fence::Free);
        // /y, by another session: W2 keeps /y as before it (version 0), and only that.
        let t = set(&tree, "/y", b"1", 4);
        q.apply(&mut tree, t, Some((conn(4), 1)), &Fence::Free);
        let t = set(&tree, "/y", b"2", 5);
        q.apply(&mut tree, t, Some((conn(5), 1)), &Fence::Free);
        // Connection 4 again, its read of /y guarded by its write: it keeps /y as of then.
        let t = set(&tree, "/z", b"3", 4);
        q.apply(&mut tree, t, Some((conn(4), 2)), &guard(&["/y"]));
        let t = set(&tree, "/y", b"3", 6);
        q.apply(&mut tree, t, Some((conn(6), 1)), &Fence::Free);
        let batches = q.take(&tree);
        assert_eq!(shape(&batches), vec![(8, 11)], "no seal");
        let y = |version| vec![("/y".to_string(), Some((version, 0)))];
        assert_eq!(captured(&batches[0]), vec![vec![], vec![], y(0), vec![], vec![], vec![], y(2), vec![]]);
        assert_eq!(batches[0].root.get("/y").map(|n| n.stat().version), Some(3));
        // A child created changes its parent's read: the parent is kept without it.
        let t = set(&tree, "/x", b"3", 1);
        q.apply(&mut tree, t, Some((conn(1), 3)), &Fence::Free);
        let t = set(&tree, "/x", b"4", 1);
        q.apply(&mut tree, t, Some((conn(1), 4)), &guard(&["/y"]));
        let t = create(&tree, "/y/c", 2);
        q.apply(&mut tree, t, Some((conn(2), 2)), &Fence::Free);
        // A session closed may delete any node: sealed before it.
        let t = set(&tree, "/x", b"5", 1);
        q.apply(&mut tree, t, Some((conn(1), 5)), &Fence::Free);
        let t = set(&tree, "/x", b"6", 1);
        q.apply(&mut tree, t, Some((conn(1), 6)), &guard(&["/q"]));
        let t = Txn {
            header: TxnHeader { zxid: tree.last_zxid() + 1, session_id: 7, cxid: 0, time_ms: 5 },
            op: TxnOp::CloseSession,
        };
        q.apply(&mut tree, t, None, &Fence::Free);
        let batches = q.take(&tree);
        assert_eq!(shape(&batches), vec![(5, 16), (1, 17)]);
        assert_eq!(captured(&batches[0])[1], vec![("/y".to_string(), Some((3, 0)))]);
        assert_eq!(batches[0].root.get("/y").map(|n| n.children.len()), Some(1));
    }

    #[test]
    fn issue17_a_write_that_changes_its_own_guarded_read_keeps_the_node_as_before_it() {
        let mut tree = DataTree::new();
        let mut q = CommitQueue::new();
        let t = create(&tree, "/x", 9);
        q.apply(&mut tree, t, Some((conn(1), 1)), &Fence::Free);
        // The exact name: a create (sequential, say) of the read node itself.
        let t = create(&tree, "/y", 1);
        q.apply(&mut tree, t, Some((conn(1), 2)), &guard(&["/y"]));
        let batches = q.take(&tree);
        assert_eq!(shape(&batches), vec![(2, 2)]);
        assert_eq!(captured(&batches[0]), vec![vec![], vec![("/y".to_string(), None)]]);
        assert!(batches[0].root.get("/y").is_some());
    }

    #[test]
    fn issue17_a_guard_without_an_earlier_item_of_its_connection_in_the_batch_is_not_kept() {
        let mut tree = DataTree::new();
        let mut q = CommitQueue::new();
        let t = create(&tree, "/x", 9);
        q.apply(&mut tree, t, Some((conn(9), 1)), &Fence::Free);
        // Connection 1's earlier item is in an earlier batch: its read is answered there.
        let t = set(&tree, "/x", b"1", 1);
        q.apply(&mut tree, t, Some((conn(1), 2)), &guard(&["/x"]));
        let t = set(&tree, "/x", b"2", 2);
        q.apply(&mut tree, t, Some((conn(2), 1)), &Fence::Free);
        assert_eq!(shape(&q.take(&tree)), vec![(3, 3)]);
    }

    fn write(c: u64, xid: i32, seal: bool) -> ToPipeline {
        ToPipeline::Write {
            conn: conn(c),
            xid,
            op: crate::txn::WriteOp::Delete { path: "/x".into(), version: -1 },
            auth: std::sync::Arc::from(Vec::new()),
            fence: if seal { Fence::Seal } else { Fence::Free },
            read_at: std::time::Instant::now(),
        }
    }

    fn xids(msgs: &[ToPipeline]) -> Vec<(u64, i32)> {
        msgs.iter()
            .map(|m| match m {
                ToPipeline::Write { conn, xid, .. } => (conn.conn, *xid),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn issue13_rounds_hold_a_fenced_repeat_and_what_follows_it_in_order() {
        let mut r = Rounds::default();
        let mut now = Vec::new();
        for m in [write(1, 1, false), write(1, 2, false), write(2, 1, true), write(1, 3, true), write(1, 4, false)] {
            now.extend(r.take_in(m));
        }
        now.extend(r.take_in(write(2, 2, true)));
        // Connection 1's fenced write 3 and its write 4 wait; connection 2's second write too.
        assert_eq!(xids(&now), vec![(1, 1), (1, 2), (2, 1)]);
        let next = r.next_round();
        assert_eq!(xids(&next), vec![(1, 3), (1, 4), (2, 2)]);
        assert!(r.is_empty());
    }

    proptest::proptest! {
        /// Rounds over any arrival of messages (connection, fenced or not; some arriving
        /// between rounds): every message comes out exactly once, each connection's in order,
        /// and no round takes a fenced write of a connection after another of its messages.
        #[test]
        fn issue17_rounds_keep_each_connection_in_order_with_one_fence_per_round(
            arrivals in proptest::collection::vec((0u64..5, proptest::bool::ANY, 0u8..4), 0..200)
        ) {
            let mut r = Rounds::default();
            let mut rounds: Vec<Vec<ToPipeline>> = vec![Vec::new()];
            let mut sent: Vec<(u64, i32)> = Vec::new();
            for (i, (c, fence, between)) in arrivals.into_iter().enumerate() {
                if between == 0 && !r.is_empty() {
                    rounds.push(r.next_round());
                }
                sent.push((c, i as i32));
                let taken = r.take_in(write(c, i as i32, fence));
                rounds.last_mut().unwrap().extend(taken);
            }
            while !r.is_empty() {
                rounds.push(r.next_round());
            }
            let out: Vec<(u64, i32)> = rounds.iter().flat_map(|m| xids(m)).collect();
            for c in 0..5 {
                let want: Vec<i32> = sent.iter().filter(|(x, _)| *x == c).map(|(_, i)| *i).collect();
                let got: Vec<i32> = out.iter().filter(|(x, _)| *x == c).map(|(_, i)| *i).collect();
                proptest::prop_assert_eq!(got, want, "connection {}'s messages", c);
            }
            for round in &rounds {
                let mut seen = HashSet::new();
                for m in round {
                    let ToPipeline::Write { conn, fence, .. } = m else { unreachable!() };
                    proptest::prop_assert!(!(fence.seals() && seen.contains(&conn.conn)), "a fenced repeat in one round");
                    seen.insert(conn.conn);
                }
            }
        }
    }

    #[test]
    fn issue13_take_items_returns_every_item_in_order() {
        let mut tree = DataTree::new();
        let mut q = CommitQueue::new();
        q.push(Commit::Close { conn: conn(1) }, &tree);
        q.push(Commit::Close { conn: conn(1) }, &tree);
        let t = Txn {
            header: TxnHeader { zxid: 1, session_id: 9, cxid: 0, time_ms: 5 },
            op: TxnOp::CreateSession { timeout_ms: 4000 },
        };
        q.apply(&mut tree, t, None, &Fence::Free);
        let items = q.take_items();
        assert_eq!(items.len(), 3);
        assert!(matches!(items[2], Commit::Txn { .. }));
        assert!(q.is_empty());
    }

    // Random runs: every guarded read answered in its place sees its node as of its write.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const POOL: [&str; 8] = ["/", "/a", "/a/b", "/a/c", "/b", "/b/x", "/b/y", "/c"];

    fn parent_of(p: &str) -> Option<&str> {
        crate::tree::path::parent(p)
    }

    fn creatable(tree: &DataTree, p: &str) -> bool {
        p != "/"
            && !tree.contains(p)
            && parent_of(p).is_some_and(|q| tree.get(q).is_some_and(|n| n.ephemeral_owner == 0 || q == "/"))
    }

    fn deletable(tree: &DataTree, p: &str) -> bool {
        p != "/" && tree.get(p).is_some_and(|n| n.children.is_empty())
    }

    fn mk_create(p: &str, owner: i64) -> TxnOp {
        TxnOp::Create {
            path: p.into(),
            data: Some(Bytes::from_static(b"c")),
            acl: crate::tree::acl::open_acl_unsafe(),
            ephemeral_owner: owner,
            response_type: 1,
        }
    }

    type Snap = Option<(Option<Bytes>, crate::proto::Stat, Vec<String>, usize)>;
    fn snap(n: Option<&crate::tree::Znode>) -> Snap {
        n.map(|n| (n.data.clone(), n.stat(), n.children.iter().map(|c| c.to_string()).collect(), n.acl.len()))
    }

    /// One random run: the tree before, the batches, and for each guarded txn (zxid) its
    /// guarded paths with their state just before it.
    #[allow(clippy::type_complexity)]
    fn random_run(
        seed: u64,
        steps: usize,
    ) -> (DataTree, DataTree, Vec<CommitBatch>, HashMap<i64, Vec<(String, Snap)>>) {
        let mut r = Lcg(seed);
        let (mut tree, mut q) = abc_taken();
        let before = tree.clone();
        let mut sessions: Vec<i64> = Vec::new();
        let mut next_session = 100;
        let mut expect = HashMap::new();
        for _ in 0..steps {
            let zxid = tree.last_zxid() + 1;
            let roll = r.below(100);
            if roll < 4 {
                q.seal(&tree);
                continue;
            }
            if roll < 8 {
                let c = 1 + r.below(4);
                q.push(Commit::SyncDone { conn: conn(c), xid: 0, path: "/".into() }, &tree);
                continue;
            }
            let pick = |r: &mut Lcg| POOL[r.below(POOL.len() as u64) as usize];
            let mut session = 1;
            let op = match r.below(10) {
                0 | 1 => {
                    let p = pick(&mut r);
                    if tree.contains(p) {
                        TxnOp::SetData { path: p.into(), data: Some(Bytes::from(format!("{zxid}"))) }
                    } else {
                        TxnOp::Check { path: p.into() }
                    }
                }
                2 => {
                    let p = pick(&mut r);
                    if tree.contains(p) {
                        TxnOp::SetAcl { path: p.into(), acl: crate::tree::acl::read_acl_unsafe() }
                    } else {
                        TxnOp::Check { path: p.into() }
                    }
                }
                3 | 4 => {
                    let p = pick(&mut r);
                    if creatable(&tree, p) {
                        let leaf = matches!(p, "/a/b" | "/a/c" | "/b/x" | "/b/y");
                        let owner = if leaf && !sessions.is_empty() && r.below(2) == 0 {
                            sessions[r.below(sessions.len() as u64) as usize]
                        } else {
                            0
                        };
                        mk_create(p, owner)
                    } else if deletable(&tree, p) {
                        TxnOp::Delete { path: p.into() }
                    } else {
                        TxnOp::Check { path: p.into() }
                    }
                }
                5 => {
                    let p = pick(&mut r);
                    if deletable(&tree, p) && tree.get(p).is_some_and(|n| n.ephemeral_owner == 0) {
                        TxnOp::Multi(vec![TxnOp::Delete { path: p.into() }, mk_create(p, 0)])
                    } else if creatable(&tree, p) {
                        TxnOp::Multi(vec![
                            mk_create(p, 0),
                            TxnOp::SetData { path: p.into(), data: None },
                            TxnOp::Delete { path: p.into() },
                        ])
                    } else {
                        TxnOp::Check { path: p.into() }
                    }
                }
                6 => {
                    next_session += 1;
                    sessions.push(next_session);
                    session = next_session;
                    TxnOp::CreateSession { timeout_ms: 1000 }
                }
                7 if !sessions.is_empty() && r.below(3) == 0 => {
                    session = sessions.swap_remove(r.below(sessions.len() as u64) as usize);
                    TxnOp::CloseSession
                }
                _ => {
                    let p = pick(&mut r);
                    if creatable(&tree, p) {
                        mk_create(p, 0)
                    } else {
                        TxnOp::Check { path: p.into() }
                    }
                }
            };
            let origin = if r.below(5) == 0 { None } else { Some((conn(1 + r.below(4)), 0)) };
            let fence = match r.below(4) {
                0 => Fence::Seal,
                1 => Fence::Free,
                _ => {
                    let n = 1 + r.below(3);
                    let paths: Vec<&str> = (0..n).map(|_| pick(&mut r)).collect();
                    expect.insert(zxid, paths.iter().map(|p| (p.to_string(), snap(tree.get(p)))).collect());
                    guard(&paths)
                }
            };
            let t = Txn { header: TxnHeader { zxid, session_id: session, cxid: 1, time_ms: zxid }, op };
            q.apply(&mut tree, t, origin, &fence);
        }
        let batches = q.take(&tree);
        (before, tree, batches, expect)
    }

    /// Every guarded write answered in place (its connection has an earlier item in its batch)
    /// sees each guarded node exactly as it was right before the write.
    fn check_batches(batches: &[CommitBatch], expect: &HashMap<i64, Vec<(String, Snap)>>) -> usize {
        let mut checked = 0;
        for b in batches {
            for (i, item) in b.items.iter().enumerate() {
                let Commit::Txn { txn, origin: Some((c, _)), captured, .. } = item else { continue };
                let Some(want) = expect.get(&txn.header.zxid) else { continue };
                if !b.items[..i].iter().any(|x| x.conn() == Some(c)) {
                    continue;
                }
                for (p, s) in want {
                    let got = match captured.iter().find(|k| &*k.path == p.as_str()) {
                        Some(k) => snap(k.entry.as_deref().map(|e| &e.node)),
                        None => snap(b.root.get(p)),
                    };
                    assert_eq!(&got, s, "zxid {:#x} read {p}", txn.header.zxid);
                    checked += 1;
                }
            }
        }
        checked
    }

    #[test]
    fn issue17_random_batches_show_each_guarded_read_its_node_as_of_its_write() {
        let mut total = 0;
        for seed in 0..3000u64 {
            let (_, _, batches, expect) = random_run(seed, 120);
            total += check_batches(&batches, &expect);
        }
        assert!(total > 1000, "checked {total}");
    }

    #[test]
    fn issue17_random_batches_cut_by_split_logged_still_show_guarded_reads_their_node() {
        let mut total = 0;
        for seed in 0..1500u64 {
            let (before, after, batches, expect) = random_run(seed, 120);
            let first = before.last_zxid() + 1;
            let last = after.last_zxid();
            let mut r = Lcg(seed ^ 0xabc);
            let cut = first + r.below((last - first + 2) as u64) as i64;
            let (logged, _) = split_logged(batches, &before, cut).unwrap();
            total += check_batches(&logged, &expect);
        }
        assert!(total > 500);
    }
}
