//! ZooKeeper data into our DataTree: a ZooKeeper snapshot restored node by node, then its
//! logged txns mapped to our txns and applied by our `txn::apply`, with ZooKeeper's replay
//! semantics. ZooKeeper's snapshots are fuzzy (written while txns kept being applied), so its
//! own replay tolerates txns the snapshot already holds: a create of an existing node, a
//! delete or setData of a missing one change nothing (`DataTree.processTxn` records an error),
//! and versions come from the txn (setData's version, setACL's aversion, a create's parent
//! cversion and pzxid only when that cversion is higher) instead of being counted. This module
//! decides each of those against the tree, applies what ZooKeeper would apply through
//! `txn::apply`, and then sets the counters ZooKeeper would have (`set_stored_counters`).
//! Rules: pure (no I/O); a txn kind that has no meaning here is refused by name (the decoder
//! already refused unknown ones); the result is checked against the tree digest ZooKeeper
//! logged with its last txn (and in its snapshot).

use super::digest::tree_digest;
use super::records::{txn_type, ZkCreate, ZkTxn, ZkTxnHeader};
use super::snapshot::{ZkSnapshot, ZxidDigest, DIGEST_VERSION};
use super::txnlog::ZkLogEntry;
use super::ZkFormatError;
use crate::proto::Acl;
use crate::tree::datatree::{StoredCounters, EPHEMERAL_OWNER_CONTAINER, EPHEMERAL_OWNER_TTL_MASK, TTL_MS_MAX};
use crate::tree::{path, DataTree, NodeKind, Znode};
use crate::txn::{apply, Txn, TxnHeader, TxnOp};
use std::sync::Arc;

/// Create response types our Create op records (CreateResponse / Create2Response).
const RESPONSE_CREATE: i32 = 1;
const RESPONSE_CREATE2: i32 = 15;

/// Builds the tree a ZooKeeper snapshot holds, at `zxid` (the snapshot file's name).
pub fn tree_from_snapshot(snap: &ZkSnapshot, zxid: i64) -> Result<DataTree, ZkFormatError> {
    let mut tree = DataTree::restore_begin(zxid);
    for (id, timeout) in &snap.sessions {
        tree.add_session(*id, *timeout);
    }
    let mut seen = std::collections::HashSet::new();
    for n in &snap.nodes {
        let bad = |reason| ZkFormatError::BadTree { path: n.path.clone(), reason };
        if path::validate(&n.path).is_err() {
            return Err(bad("not a valid path"));
        }
        if !seen.insert(n.path.as_str()) {
            return Err(bad("appears twice"));
        }
        if let Some(parent) = path::parent(&n.path) {
            if !seen.contains(parent) {
                return Err(bad("its parent comes later or not at all"));
            }
        }
        let acl: Arc<[Acl]> = snap.acl_of(n.acl).ok_or_else(|| bad("ACL id not in the ACL cache"))?.into();
        let s = &n.stat;
        let mut node = Znode::new(n.data.as_ref().map(|d| bytes::Bytes::copy_from_slice(d)), acl, s.czxid, s.ctime, 0);
        node.mzxid = s.mzxid;
        node.pzxid = s.pzxid;
        node.mtime = s.mtime;
        node.ephemeral_owner = s.ephemeral_owner;
        node.version = s.version;
        node.child_creates = s.cversion;
        node.aversion = s.aversion;
        tree.restore_node(&n.path, node);
    }
    if !seen.contains("/") {
        return Err(ZkFormatError::BadTree { path: "/".into(), reason: "the snapshot has no root node" });
    }
    Ok(tree)
}

/// Applies ZooKeeper txns to a tree restored from its snapshot.
pub struct Replay {
    pub tree: DataTree,
    /// The snapshot's digest, until the replay reaches its zxid (ZooKeeper's rule: inside the
    /// fuzzy range the tree matches no logged digest).
    snapshot_digest: Option<ZxidDigest>,
    /// The digest logged with the last txn applied, if it can be compared.
    last_digest: Option<(i64, i64)>,
    pub applied: u64,
}

impl Replay {
    pub fn new(tree: DataTree, snapshot_digest: Option<ZxidDigest>) -> Replay {
        let snapshot_digest = snapshot_digest.filter(|d| d.zxid > 0 && d.version == DIGEST_VERSION);
        Replay { tree, snapshot_digest, last_digest: None, applied: 0 }
    }

    /// Applies one op of the txn `h` heads (the zxid advances once, in `apply_entry`).
    fn run(&mut self, h: &ZkTxnHeader, op: TxnOp) {
        let header = TxnHeader { zxid: h.zxid, session_id: h.client_id, cxid: h.cxid, time_ms: h.time };
        let txn = Txn { header, op };
        apply::apply_part(&mut self.tree, &txn, &txn.op, &mut Vec::new());
    }

    /// A txn ZooKeeper records as an error: it takes its zxid and changes nothing.
    fn nothing(&mut self, h: &ZkTxnHeader) {
        self.run(h, TxnOp::Error { err: 0 });
    }

    /// Applies one logged txn (entries at or below the tree's zxid are the caller's to skip).
    pub fn apply_entry(&mut self, e: &ZkLogEntry) -> Result<(), ZkFormatError> {
        self.apply_txn(&e.header, &e.txn)?;
        self.tree.set_last_zxid(e.header.zxid);
        self.applied += 1;
        if let Some(d) = self.snapshot_digest {
            if e.header.zxid >= d.zxid {
                self.snapshot_digest = None;
                if e.header.zxid == d.zxid {
                    self.last_digest = Some((d.zxid, d.digest));
                }
            }
        }
        if self.snapshot_digest.is_none() {
            if let Some(d) = e.digest.filter(|d| d.version == DIGEST_VERSION) {
                self.last_digest = Some((e.header.zxid, d.tree_digest));
            }
        }
        Ok(())
    }

    /// The snapshot's own digest, when it is exact at the snapshot's zxid and nothing is
    /// replayed after it.
    pub fn use_snapshot_digest_at(&mut self, zxid: i64) {
        if let Some(d) = self.snapshot_digest.filter(|d| d.zxid == zxid) {
            self.last_digest = Some((d.zxid, d.digest));
        }
    }

    /// Ends the replay as ZooKeeper's start does (ephemerals whose session is not in the
    /// session table are deleted, at the last zxid) and checks the tree's digest against the
    /// last one ZooKeeper logged. Returns the zxid and digest checked, if any.
    pub fn finish(mut self) -> Result<(DataTree, Option<(i64, i64)>), ZkFormatError> {
        let checked = match self.last_digest {
            Some((zxid, zk)) => {
                let ours = tree_digest(&self.tree);
                if ours != zk {
                    return Err(ZkFormatError::DigestMismatch { zxid, ours, zookeeper: zk });
                }
                Some((zxid, zk))
            }
            None => None,
        };
        let mut orphans: Vec<i64> = self
            .tree
            .walk()
            .iter()
            .filter_map(|(_, n)| match n.kind() {
                NodeKind::Ephemeral(s) if self.tree.session(s).is_none() => Some(s),
                _ => None,
            })
            .collect();
        orphans.sort_unstable();
        orphans.dedup();
        let zxid = self.tree.last_zxid();
        for s in orphans {
            let h = ZkTxnHeader { client_id: s, cxid: 0, zxid, time: 0, txn_type: txn_type::CLOSE_SESSION };
            self.run(&h, TxnOp::CloseSession);
        }
        Ok((self.tree, checked))
    }

    fn apply_txn(&mut self, h: &ZkTxnHeader, txn: &ZkTxn) -> Result<(), ZkFormatError> {
        match txn {
            ZkTxn::CreateSession { timeout_ms } => self.run(h, TxnOp::CreateSession { timeout_ms: *timeout_ms }),
            ZkTxn::CloseSession { paths } => {
                self.run(h, TxnOp::CloseSession);
                // ZooKeeper also deletes the paths the txn lists (normally the same ones).
                for p in paths.iter().flatten() {
                    if self.tree.contains(p) {
                        self.delete(h, p);
                    }
                }
            }
            ZkTxn::Create { c, ephemeral, type_code } => {
                let owner = if *ephemeral { h.client_id } else { 0 };
                let rt = if *type_code == txn_type::CREATE2 { RESPONSE_CREATE2 } else { RESPONSE_CREATE };
                self.create(h, c, owner, rt)?;
            }
            ZkTxn::CreateContainer { c } => self.create(h, c, EPHEMERAL_OWNER_CONTAINER, RESPONSE_CREATE2)?,
            ZkTxn::CreateTtl { c, ttl_ms } => {
                if !(1..=TTL_MS_MAX).contains(ttl_ms) {
                    return Err(ZkFormatError::BadTree { path: c.path.clone(), reason: "TTL out of range" });
                }
                self.create(h, c, EPHEMERAL_OWNER_TTL_MASK | ttl_ms, RESPONSE_CREATE2)?;
            }
            ZkTxn::Delete { path, .. } => self.delete(h, path),
            ZkTxn::SetData { path, data, version, .. } => match self.tree.get(path).map(StoredCounters::of) {
                Some(c) => {
                    self.run(h, TxnOp::SetData { path: path.clone(), data: data.clone() });
                    self.tree.set_stored_counters(path, StoredCounters { version: *version, ..c });
                }
                None => self.nothing(h),
            },
            ZkTxn::SetAcl { path, acl, version } => match self.tree.get(path).map(StoredCounters::of) {
                Some(c) => {
                    self.run(h, TxnOp::SetAcl { path: path.clone(), acl: acl.clone() });
                    self.tree.set_stored_counters(path, StoredCounters { aversion: *version, ..c });
                }
                None => self.nothing(h),
            },
            ZkTxn::Check { .. } | ZkTxn::Error { .. } => self.nothing(h),
            ZkTxn::Multi(subs) => {
                // A failed multi is all errors and changes nothing; otherwise ZooKeeper applies
                // each sub-txn in turn with the multi's header.
                if subs.iter().any(|s| matches!(s, ZkTxn::Error { .. })) {
                    self.nothing(h);
                } else {
                    for s in subs {
                        self.apply_txn(h, s)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn create(&mut self, h: &ZkTxnHeader, c: &ZkCreate, owner: i64, response_type: i32) -> Result<(), ZkFormatError> {
        if path::validate(&c.path).is_err() {
            return Err(ZkFormatError::BadTree { path: c.path.clone(), reason: "a create of an invalid path" });
        }
        let Some(parent) = path::parent(&c.path) else {
            self.nothing(h);
            return Ok(());
        };
        let parent_before = match self.tree.get(parent) {
            Some(p) if !self.tree.contains(&c.path) => StoredCounters::of(p),
            // NoNode (parent) or NodeExists (a txn the fuzzy snapshot holds): no change.
            _ => {
                self.nothing(h);
                return Ok(());
            }
        };
        let op = TxnOp::Create {
            path: c.path.clone(),
            data: c.data.clone(),
            acl: c.acl.clone(),
            ephemeral_owner: owner,
            response_type,
        };
        self.run(h, op);
        let cversion =
            if c.parent_cversion == -1 { parent_before.child_creates.wrapping_add(1) } else { c.parent_cversion };
        let after = if cversion > parent_before.child_creates {
            StoredCounters { child_creates: cversion, pzxid: h.zxid, ..parent_before }
        } else {
            parent_before
        };
        self.tree.set_stored_counters(parent, after);
        Ok(())
    }

    fn delete(&mut self, h: &ZkTxnHeader, p: &str) {
        let Some(parent) = path::parent(p) else {
            self.nothing(h);
            return;
        };
        let Some(parent_before) = self.tree.get(parent).map(StoredCounters::of) else {
            self.nothing(h);
            return;
        };
        if !self.tree.contains(p) {
            // ZooKeeper still moves the parent's pzxid forward before its NoNode.
            self.nothing(h);
            if h.zxid > parent_before.pzxid {
                self.tree.set_stored_counters(parent, StoredCounters { pzxid: h.zxid, ..parent_before });
            }
            return;
        }
        if self.tree.get(p).is_some_and(|n| n.children.is_empty()) {
            self.run(h, TxnOp::Delete { path: p.to_string() });
            return;
        }
        // Children can only be here when the fuzzy snapshot holds later creates under p (which
        // the replay recreates): delete them first, deepest first, as ZooKeeper drops them.
        let mut doomed: Vec<String> = self
            .tree
            .walk()
            .iter()
            .filter(|(q, _)| q.len() > p.len() && q.starts_with(p) && q.as_bytes()[p.len()] == b'/')
            .map(|(q, _)| q.to_string())
            .collect();
        doomed.sort_by_key(|q| std::cmp::Reverse(q.matches('/').count()));
        doomed.push(p.to_string());
        for q in doomed {
            self.run(h, TxnOp::Delete { path: q });
        }
    }
}
