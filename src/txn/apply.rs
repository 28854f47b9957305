//! Deterministic apply of a committed txn to a DataTree, on every replica (the pipeline's and
//! each client core's). Rules: the outcome depends only on the tree and the txn; the changes
//! that fire watches are reported in the order they happen; a txn that does not fit the tree
//! is a replica divergence and panics (in the tree primitives).

use super::{Txn, TxnHeader, TxnOp};
use crate::proto::opcode::event_type;
use crate::proto::{Acl, Stat};
use crate::tree::{own_data, path, DataTree};
use bytes::Bytes;
use std::sync::Arc;

/// A change that may fire watches, in apply order, with the ACLs in force when it happened:
/// an event reaches a connection only if it may READ the node (the parent, for
/// NodeChildrenChanged), as in ZooKeeper 3.8.4+ (a multi may create and delete the same node,
/// so the tree after the txn cannot answer this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created { path: String, acl: Arc<[Acl]>, parent_acl: Arc<[Acl]> },
    Deleted { path: String, acl: Arc<[Acl]>, parent_acl: Arc<[Acl]> },
    DataChanged { path: String, acl: Arc<[Acl]> },
}

impl Change {
    pub fn path(&self) -> &str {
        match self {
            Change::Created { path, .. } | Change::Deleted { path, .. } | Change::DataChanged { path, .. } => path,
        }
    }

    /// The ACL that decides who may see `event` (a WatcherEvent type) of this change.
    pub fn acl_for_event(&self, event: i32) -> &[Acl] {
        match self {
            Change::Created { acl, parent_acl, .. } | Change::Deleted { acl, parent_acl, .. } => {
                if event == event_type::NODE_CHILDREN_CHANGED {
                    parent_acl
                } else {
                    acl
                }
            }
            Change::DataChanged { acl, .. } => acl,
        }
    }
}

fn acl_of(tree: &DataTree, p: &str) -> Arc<[Acl]> {
    tree.get(p).map(|n| n.acl.clone()).unwrap_or_else(|| Arc::from(Vec::new()))
}

fn parent_acl_of(tree: &DataTree, p: &str) -> Arc<[Acl]> {
    path::parent(p).map(|parent| acl_of(tree, parent)).unwrap_or_else(|| Arc::from(Vec::new()))
}

/// Deletes `p` and reports it.
fn delete(tree: &mut DataTree, p: &str, zxid: i64, changes: &mut Vec<Change>) {
    let (acl, parent_acl) = (acl_of(tree, p), parent_acl_of(tree, p));
    tree.delete_node(p, zxid);
    changes.push(Change::Deleted { path: p.to_string(), acl, parent_acl });
}

/// What the origin connection's reply is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    SessionCreated,
    SessionClosed,
    SecretSet,
    /// A restore marker (`TxnOp::Restore`): nobody waits for its reply.
    Restored,
    Created {
        path: String,
        stat: Stat,
        response_type: i32,
    },
    Deleted,
    DataSet {
        stat: Stat,
    },
    AclSet {
        stat: Stat,
    },
    /// A reconfiguration: the reply is the new configuration's text and the config node's
    /// Stat (ZooKeeper's GetDataResponse to a reconfig).
    Reconfigured {
        data: Bytes,
        stat: Stat,
    },
    Checked,
    Error(i32),
    Multi(Vec<OpResult>),
}

/// Applies `txn` and advances the tree's last zxid. `changes` receives watch triggers. The
/// tree keeps copies of the txn's data (`own_data`): it may be a slice of a request frame, a
/// peer's batch or a log buffer.
pub fn apply(tree: &mut DataTree, txn: &Txn, changes: &mut Vec<Change>) -> OpResult {
    let result = apply_op(tree, &txn.header, Op::Shared(&txn.op), changes);
    tree.set_last_zxid(txn.header.zxid);
    result
}

/// `apply`, moving the txn's data into the tree instead of copying it: the caller guarantees
/// that each data is its own allocation of exactly its bytes (`WriteOp::own_data`, done by
/// the client core that read the request). The txn is left without data.
pub fn apply_moving_data(tree: &mut DataTree, txn: &mut Txn, changes: &mut Vec<Change>) -> OpResult {
    let result = apply_op(tree, &txn.header, Op::Owned(&mut txn.op), changes);
    tree.set_last_zxid(txn.header.zxid);
    result
}

/// How a caller that holds the txn hands its data to the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataIn {
    /// Copied (`apply`): the data may be a slice of a frame, a batch or a log buffer.
    Copied,
    /// Moved (`apply_moving_data`): each data is its own allocation of exactly its bytes.
    Moved,
}

/// The op being applied, and whether its data may move into the tree.
enum Op<'a> {
    Shared(&'a TxnOp),
    Owned(&'a mut TxnOp),
}

impl Op<'_> {
    fn get(&self) -> &TxnOp {
        match self {
            Op::Shared(op) => op,
            Op::Owned(op) => op,
        }
    }

    /// The data of a create or setData as the tree keeps it: a copy of shared data, owned
    /// data itself (taken out of the op).
    fn data_for_tree(&mut self) -> Option<Bytes> {
        match self {
            Op::Shared(TxnOp::Create { data, .. } | TxnOp::SetData { data, .. }) => own_data(data.as_deref()),
            Op::Owned(TxnOp::Create { data, .. } | TxnOp::SetData { data, .. }) => data.take(),
            _ => None,
        }
    }
}

/// Applies `op` as part of `txn` without advancing the tree's last zxid: for a caller that
/// applies one txn as several ops (the ZooKeeper importer, `zkformat::replay`, which decides
/// each of a multi's ops against the tree the previous ones left) and then calls
/// `set_last_zxid` once.
pub fn apply_part(tree: &mut DataTree, txn: &Txn, op: &TxnOp, changes: &mut Vec<Change>) -> OpResult {
    apply_op(tree, &txn.header, Op::Shared(op), changes)
}

fn stat_of(tree: &DataTree, path: &str) -> Stat {
    tree.get(path).map(|n| n.stat()).unwrap_or_default()
}

fn apply_op(tree: &mut DataTree, header: &TxnHeader, mut op: Op<'_>, changes: &mut Vec<Change>) -> OpResult {
    let zxid = header.zxid;
    let time = header.time_ms;
    let data = op.data_for_tree();
    match op.get() {
        TxnOp::CreateSession { timeout_ms } => {
            tree.add_session(header.session_id, *timeout_ms);
            OpResult::SessionCreated
        }
        TxnOp::CloseSession => {
            for p in tree.remove_session(header.session_id) {
                delete(tree, &p, zxid, changes);
            }
            OpResult::SessionClosed
        }
        // The tree was replaced whole before this record was logged (its snapshot holds it).
        TxnOp::Restore => OpResult::Restored,
        TxnOp::SessionSecret { secret } => {
            tree.set_session_secret(*secret);
            OpResult::SecretSet
        }
        TxnOp::Create { path, acl, ephemeral_owner, response_type, .. } => {
            let acl: Arc<[_]> = acl.clone().into();
            tree.create_node_keeping(path, data, acl.clone(), *ephemeral_owner, zxid, time);
            changes.push(Change::Created { path: path.clone(), acl, parent_acl: parent_acl_of(tree, path) });
            OpResult::Created { path: path.clone(), stat: stat_of(tree, path), response_type: *response_type }
        }
        TxnOp::Delete { path } => {
            delete(tree, path, zxid, changes);
            OpResult::Deleted
        }
        TxnOp::SetData { path, .. } => {
            let (stat, acl) = tree.set_data_keeping(path, data, zxid, time);
            changes.push(Change::DataChanged { path: path.clone(), acl });
            OpResult::DataSet { stat }
        }
        TxnOp::Reconfig { data } => {
            let path = path::CONFIG_NODE;
            tree.set_config(data.clone(), zxid, time);
            changes.push(Change::DataChanged { path: path.into(), acl: acl_of(tree, path) });
            OpResult::Reconfigured { data: data.clone(), stat: stat_of(tree, path) }
        }
        TxnOp::SetAcl { path, acl } => {
            tree.set_acl(path, acl.clone().into(), zxid);
            OpResult::AclSet { stat: stat_of(tree, path) }
        }
        TxnOp::Check { .. } => OpResult::Checked,
        TxnOp::Error { err } => OpResult::Error(*err),
        TxnOp::Multi(ops) => {
            if ops.iter().any(|o| matches!(o, TxnOp::Error { .. })) {
                // A failed multi changes nothing; every result is an error.
                return OpResult::Multi(
                    ops.iter()
                        .map(|o| match o {
                            TxnOp::Error { err } => OpResult::Error(*err),
                            _ => OpResult::Error(0),
                        })
                        .collect(),
                );
            }
            match op {
                Op::Shared(TxnOp::Multi(ops)) => {
                    OpResult::Multi(ops.iter().map(|o| apply_op(tree, header, Op::Shared(o), changes)).collect())
                }
                Op::Owned(TxnOp::Multi(ops)) => {
                    OpResult::Multi(ops.iter_mut().map(|o| apply_op(tree, header, Op::Owned(o), changes)).collect())
                }
                _ => unreachable!("matched a multi"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::request::Request;
    use crate::txn::TxnHeader;
    use crate::txn::WriteOp;

    fn txn(zxid: i64, op: TxnOp) -> Txn {
        Txn { header: TxnHeader { zxid, session_id: 1, cxid: 1, time_ms: 1_000 }, op }
    }

    fn data_ptr(tree: &DataTree, p: &str) -> *const u8 {
        tree.get(p).and_then(|n| n.data.as_ref()).map(|d| d.as_ptr()).expect("the node has data")
    }

    /// The standalone pipeline's write path: the client core copies a write's data out of the
    /// request frame (so no znode pins the frame), and apply moves that copy into the tree
    /// instead of copying it again; anything else applies by copy.
    #[test]
    fn owned_data_moves_into_the_tree_and_shared_data_is_copied() {
        // A frame with two requests' bytes in it: the decoded data are slices of it.
        let frame = Bytes::from(vec![7u8; 64]);
        let (create_data, set_data) = (frame.slice(0..16), frame.slice(16..48));
        let mut write =
            WriteOp::from_request(Request::SetData { path: "/a".into(), data: Some(set_data.clone()), version: -1 })
                .expect("a write");
        write.own_data();
        let WriteOp::SetData { data: Some(owned), .. } = &write else { panic!("{write:?}") };
        assert_eq!(owned, &set_data, "the same bytes");
        assert!(!std::ptr::eq(owned.as_ptr(), set_data.as_ptr()), "but not the frame's");

        let mut tree = DataTree::new();
        let acl = crate::tree::acl::open_acl_unsafe();
        let mut changes = Vec::new();
        let created = txn(
            1,
            TxnOp::Create {
                path: "/a".into(),
                data: Some(create_data.clone()),
                acl,
                ephemeral_owner: 0,
                response_type: 1,
            },
        );
        apply(&mut tree, &created, &mut changes);
        assert_ne!(data_ptr(&tree, "/a"), create_data.as_ptr(), "shared data is copied");

        let owned_ptr = owned.as_ptr();
        let mut set = txn(2, TxnOp::SetData { path: "/a".into(), data: Some(owned.clone()) });
        drop(write);
        let r = apply_moving_data(&mut tree, &mut set, &mut changes);
        assert!(matches!(r, OpResult::DataSet { stat } if stat.version == 1 && stat.data_length == 32), "{r:?}");
        assert_eq!(data_ptr(&tree, "/a"), owned_ptr, "owned data moves in");
        assert!(matches!(set.op, TxnOp::SetData { data: None, .. }), "the txn keeps none");
        assert_eq!(tree.get("/a").and_then(|n| n.data.clone()), Some(set_data));

        // Inside a multi too.
        let sub = |p: &str, d: &Bytes| TxnOp::Create {
            path: p.into(),
            data: Some(d.clone()),
            acl: crate::tree::acl::open_acl_unsafe(),
            ephemeral_owner: 0,
            response_type: 1,
        };
        let (b, c) = (Bytes::copy_from_slice(b"b-data"), Bytes::copy_from_slice(b"c-data"));
        let (b_ptr, c_ptr) = (b.as_ptr(), c.as_ptr());
        let mut multi = txn(3, TxnOp::Multi(vec![sub("/b", &b), sub("/c", &c)]));
        drop((b, c));
        apply_moving_data(&mut tree, &mut multi, &mut changes);
        assert_eq!((data_ptr(&tree, "/b"), data_ptr(&tree, "/c")), (b_ptr, c_ptr));
        assert_eq!(tree.get("/c").and_then(|n| n.data.clone()).as_deref(), Some(&b"c-data"[..]));
    }
}
