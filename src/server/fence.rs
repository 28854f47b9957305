//! Which of a connection's writes need a commit batch of their own (`ToPipeline::Write::fence`).
//! A read that waits behind one of its session's writes is answered from the root of the batch
//! that answers that write; a later write of the session that shares the batch is in that root
//! too. The read must not show it, so such a write is fenced: it seals the batch first, and
//! each root costs the next writes a copy of the tree nodes they touch (`commit_queue`).
//! Rules:
//! - A write is fenced when any read waiting since the connection's last fence might show it:
//!   a read of a node the write changes (its own node; a create's or delete's parent; for a
//!   create, any sibling, since a sequential create's name is not known here), any read that
//!   is not of one node's data, stat, ACL or children, and any read under `/zookeeper` (quota
//!   statistics and the configuration change without naming those nodes).
//! - A write that is not one of create, delete, setData, setACL, check or a multi of them is
//!   always fenced when any read waits.
//! - A connection that has ever asked for a watch keeps the plain rule (fenced whenever a read
//!   waits): its write's watch events are queued ahead of the batch's replies, so an event of a
//!   write sharing the batch would reach it before the reply of a read it sent earlier.
//! - Reads are remembered as bits of their paths' hashes (`ReadSet`), so the check costs the
//!   same however many reads wait, and a collision only fences a write that needed none; after
//!   `READS_WAITING_MAX` reads the next write is fenced. The hash has a fixed seed: a client
//!   that aims paths at one bit only fences its own connection's writes.
//!
//! Pure: no I/O, no glommio.

use crate::proto::Request;
use crate::tree::path::parent;
use crate::txn::WriteOp;
use std::hash::BuildHasher;

/// Reads remembered since a connection's last fence; past it the next write is fenced.
pub const READS_WAITING_MAX: usize = 64;

/// The tree prefix whose nodes change without a write naming them.
const SYSTEM_PREFIX: &str = "/zookeeper";

/// Bits in each of a `ReadSet`'s two sets.
const READ_SET_BITS: usize = 1024;

/// What a waiting read could show of later writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadScope {
    /// One node's data, stat, ACL or children: the hashes of its path and its parent's.
    Node { path: u64, parent: u64 },
    /// Anything.
    Any,
}

/// The reads waiting since a fence: a bit per path hash, a bit per parent hash.
#[derive(Debug, Clone)]
struct ReadSet {
    paths: [u64; READ_SET_BITS / 64],
    parents: [u64; READ_SET_BITS / 64],
    count: usize,
    any: bool,
}

impl Default for ReadSet {
    fn default() -> Self {
        ReadSet { paths: [0; READ_SET_BITS / 64], parents: [0; READ_SET_BITS / 64], count: 0, any: false }
    }
}

fn bit(set: &[u64], h: u64) -> bool {
    let i = (h % READ_SET_BITS as u64) as usize;
    set[i / 64] & (1 << (i % 64)) != 0
}

fn set_bit(set: &mut [u64], h: u64) {
    let i = (h % READ_SET_BITS as u64) as usize;
    set[i / 64] |= 1 << (i % 64);
}

impl ReadSet {
    fn add(&mut self, scope: ReadScope) {
        self.count += 1;
        match scope {
            ReadScope::Node { path, parent } if self.count <= READS_WAITING_MAX => {
                set_bit(&mut self.paths, path);
                set_bit(&mut self.parents, parent);
            }
            _ => self.any = true,
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn clear(&mut self) {
        if !self.is_empty() {
            *self = ReadSet::default();
        }
    }
}

/// One connection's record of the reads waiting since its last fenced write.
#[derive(Debug, Default)]
pub struct Fences {
    reads: ReadSet,
    /// Scratch for the nodes a write may change (kept to spare an allocation per write).
    touches: Vec<Touch>,
    watched: bool,
    /// A read waited since the last fence (the plain rule, for a connection with watches).
    waited: bool,
}

fn hash(path: &str) -> u64 {
    const SEED: u64 = 0x5eed_f3ce_2025_0017;
    foldhash::fast::FixedState::with_seed(SEED).hash_one(path)
}

fn is_system(path: &str) -> bool {
    path == SYSTEM_PREFIX || path.strip_prefix(SYSTEM_PREFIX).is_some_and(|rest| rest.starts_with('/'))
}

fn scope_of(req: &Request) -> ReadScope {
    let path = match req {
        Request::GetData { path, .. }
        | Request::Exists { path, .. }
        | Request::GetAcl { path }
        | Request::GetChildren { path, .. }
        | Request::GetChildren2 { path, .. } => path,
        _ => return ReadScope::Any,
    };
    if is_system(path) {
        return ReadScope::Any;
    }
    ReadScope::Node { path: hash(path), parent: parent(path).map_or(0, hash) }
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

/// A node a write may change, by hash: its own, its parent's (a create or delete), and with
/// `siblings` any child of that parent (a create, whose name may be a sequential one).
#[derive(Debug, Clone, Copy)]
struct Touch {
    node: u64,
    parent: Option<u64>,
    siblings: bool,
}

impl Touch {
    fn may_change(&self, reads: &ReadSet) -> bool {
        reads.any
            || bit(&reads.paths, self.node)
            || self.parent.is_some_and(|p| bit(&reads.paths, p) || (self.siblings && bit(&reads.parents, p)))
    }
}

/// The nodes `op` may change, added to `out`; false for a write whose reach is not worked out
/// here (always fenced).
fn touches(op: &WriteOp, out: &mut Vec<Touch>) -> bool {
    let node = |path: &str, create: bool, delete: bool| Touch {
        node: hash(path),
        parent: (create || delete).then(|| parent(path).map_or(0, hash)),
        siblings: create,
    };
    match op {
        WriteOp::SetData { path, .. } | WriteOp::SetAcl { path, .. } => out.push(node(path, false, false)),
        WriteOp::Check { .. } => {}
        WriteOp::Delete { path, .. } => out.push(node(path, false, true)),
        WriteOp::Create { path, .. } => out.push(node(path, true, false)),
        WriteOp::Multi(ops) => return ops.iter().all(|sub| touches(sub, out)),
        _ => return false,
    }
    true
}

impl Fences {
    /// `req` is queued on the connection behind a request at the pipeline core.
    pub fn read_waits(&mut self, req: &Request) {
        self.waited = true;
        self.watched |= asks_for_a_watch(req);
        self.reads.add(scope_of(req));
    }

    /// The connection asked for a watch without a waiting read (one answered at once).
    pub fn watch_asked(&mut self, req: &Request) {
        self.watched |= asks_for_a_watch(req);
    }

    /// Whether `op`, sent now, needs a batch of its own; a fence forgets the reads before it.
    pub fn fence(&mut self, op: &WriteOp) -> bool {
        let fence = if self.watched {
            self.waited
        } else if self.reads.is_empty() {
            false
        } else {
            let mut reach = std::mem::take(&mut self.touches);
            reach.clear();
            let known = touches(op, &mut reach);
            let fence = !known || reach.iter().any(|t| t.may_change(&self.reads));
            self.touches = reach;
            fence
        };
        if fence {
            self.reads.clear();
            self.waited = false;
        }
        fence
    }
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

    fn fenced_after(reads: &[Request], op: &WriteOp) -> bool {
        let mut f = Fences::default();
        for r in reads {
            f.read_waits(r);
        }
        f.fence(op)
    }

    #[test]
    fn a_write_is_fenced_only_by_a_waiting_read_it_might_change() {
        assert!(!fenced_after(&[], &set("/a")));
        assert!(!fenced_after(&[get("/b")], &set("/a")));
        assert!(fenced_after(&[get("/b"), get("/a")], &set("/a")));
        // A create or delete changes its parent's stat and children.
        let children = Request::GetChildren { path: "/q".into(), watch: false };
        assert!(fenced_after(std::slice::from_ref(&children), &create("/q/n-")));
        assert!(fenced_after(&[get("/q")], &WriteOp::Delete { path: "/q/x".into(), version: -1 }));
        assert!(!fenced_after(&[children], &WriteOp::Delete { path: "/r/x".into(), version: -1 }));
        // A sequential create's node is not named yet: any sibling may be it.
        assert!(fenced_after(&[get("/q/n-0000000003")], &create("/q/n-")));
        assert!(!fenced_after(&[get("/r/n-0000000003")], &create("/q/n-")));
        // A check changes nothing; a multi whatever its parts change.
        assert!(!fenced_after(&[get("/a")], &WriteOp::Check { path: "/a".into(), version: 1 }));
        assert!(fenced_after(&[get("/a")], &WriteOp::Multi(vec![set("/b"), set("/a")])));
        assert!(!fenced_after(&[get("/a")], &WriteOp::Multi(vec![set("/b"), set("/c")])));
    }

    #[test]
    fn reads_of_no_one_node_system_nodes_and_other_writes_always_fence() {
        assert!(fenced_after(&[get("/zookeeper/quota/a/zookeeper_stats")], &set("/a/b")));
        assert!(fenced_after(&[get("/zookeeper")], &set("/a")));
        assert!(!fenced_after(&[get("/zookeeperx")], &set("/a")));
        let count = Request::GetAllChildrenNumber { path: "/b".into() };
        assert!(fenced_after(&[count], &set("/a")));
        assert!(fenced_after(&[get("/b")], &WriteOp::CloseSession));
        assert!(fenced_after(&[get("/b")], &WriteOp::Multi(vec![WriteOp::CloseSession])));
    }

    #[test]
    fn the_reads_since_the_last_fence_all_count_and_a_fence_forgets_them() {
        let mut f = Fences::default();
        f.read_waits(&get("/a"));
        assert!(!f.fence(&set("/b")));
        // The read of /a still waits for a root that must not hold this write.
        f.read_waits(&get("/b"));
        assert!(f.fence(&set("/a")));
        assert!(!f.fence(&set("/a")));
        // Past the limit the next write is fenced.
        for i in 0..=READS_WAITING_MAX {
            f.read_waits(&get(&format!("/r{i}")));
        }
        assert!(f.fence(&set("/a")));
    }

    #[test]
    fn a_connection_that_asked_for_a_watch_keeps_the_plain_rule() {
        let mut f = Fences::default();
        f.watch_asked(&Request::Exists { path: "/w".into(), watch: true });
        assert!(!f.fence(&set("/a")));
        f.read_waits(&get("/b"));
        assert!(f.fence(&set("/a")));
        let mut g = Fences::default();
        g.read_waits(&Request::GetData { path: "/w".into(), watch: true });
        assert!(g.fence(&set("/a")));
    }
}
