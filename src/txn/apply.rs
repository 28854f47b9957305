//! Deterministic apply of a committed txn to a DataTree, on every replica (the pipeline core's
//! tree; an ensemble leader's prep tree too). Rules: the outcome depends only on the tree and the txn; the changes
//! that fire watches are reported in the order they happen; a txn that does not fit the tree
//! is a replica divergence and panics (in the tree primitives).

use super::{Txn, TxnOp};
use crate::proto::opcode::event_type;
use crate::proto::{Acl, Stat};
use crate::tree::{path, DataTree};
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

/// Applies `txn` and advances the tree's last zxid. `changes` receives watch triggers.
pub fn apply(tree: &mut DataTree, txn: &Txn, changes: &mut Vec<Change>) -> OpResult {
    let result = apply_op(tree, txn, &txn.op, changes);
    tree.set_last_zxid(txn.header.zxid);
    result
}

/// Applies `op` as part of `txn` without advancing the tree's last zxid: for a caller that
/// applies one txn as several ops (the ZooKeeper importer, `zkformat::replay`, which decides
/// each of a multi's ops against the tree the previous ones left) and then calls
/// `set_last_zxid` once.
pub fn apply_part(tree: &mut DataTree, txn: &Txn, op: &TxnOp, changes: &mut Vec<Change>) -> OpResult {
    apply_op(tree, txn, op, changes)
}

fn stat_of(tree: &DataTree, path: &str) -> Stat {
    tree.get(path).map(|n| n.stat()).unwrap_or_default()
}

fn apply_op(tree: &mut DataTree, txn: &Txn, op: &TxnOp, changes: &mut Vec<Change>) -> OpResult {
    let zxid = txn.header.zxid;
    let time = txn.header.time_ms;
    match op {
        TxnOp::CreateSession { timeout_ms } => {
            tree.add_session(txn.header.session_id, *timeout_ms);
            OpResult::SessionCreated
        }
        TxnOp::CloseSession => {
            for p in tree.remove_session(txn.header.session_id) {
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
        TxnOp::Create { path, data, acl, ephemeral_owner, response_type } => {
            let acl: Arc<[_]> = acl.clone().into();
            tree.create_node(path, data.as_deref(), acl.clone(), *ephemeral_owner, zxid, time);
            changes.push(Change::Created { path: path.clone(), acl, parent_acl: parent_acl_of(tree, path) });
            OpResult::Created { path: path.clone(), stat: stat_of(tree, path), response_type: *response_type }
        }
        TxnOp::Delete { path } => {
            delete(tree, path, zxid, changes);
            OpResult::Deleted
        }
        TxnOp::SetData { path, data } => {
            let (stat, acl) = tree.set_data(path, data.as_deref(), zxid, time);
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
            OpResult::Multi(ops.iter().map(|o| apply_op(tree, txn, o, changes)).collect())
        }
    }
}
