//! Issue 13's checks of the DataTree's compact bookkeeping: the counts the mutation primitives
//! maintain (approximate data size, node count, ephemeral count, interned ACL lists) equal a
//! full recount after a random mix of creates, deletes, setData, setACL and session closes
//! applied as txns; nodes with equal ACL lists share one interned copy, also after a snapshot
//! restore; a child's path is one allocation shared by the node map and its parent's set.
//! Rules: deterministic (a fixed xorshift seed), no I/O.

use super::acl::open_acl_unsafe;
use super::DataTree;
use crate::proto::{Acl, Id};
use crate::storage::snapshot::{decode_snapshot, encode_snapshot};
use crate::txn::apply::apply;
use crate::txn::{Txn, TxnHeader, TxnOp};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;

/// Txns applied by the random mix.
const STEPS: usize = 6_000;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn acl_lists() -> Vec<Vec<Acl>> {
    let digest = |u: &str| Acl { perms: 31, id: Id { scheme: "digest".into(), id: format!("{u}:hash=") } };
    vec![open_acl_unsafe(), vec![digest("a")], vec![digest("b"), open_acl_unsafe()[0].clone()]]
}

/// Every count recomputed from a walk of the whole tree, and checks that every node's ACL is
/// the one interned copy of its list.
fn recount(t: &DataTree) -> (i64, usize, usize, usize) {
    let mut size = 0;
    let mut ephemerals = 0;
    let mut interned: HashMap<Vec<Acl>, Arc<[Acl]>> = HashMap::new();
    let walked = t.walk();
    for (p, n) in &walked {
        size += p.len() as i64 + n.data.as_ref().map_or(0, |d| d.len() as i64);
        if matches!(n.kind(), super::NodeKind::Ephemeral(_)) {
            ephemerals += 1;
        }
        let first = interned.entry(n.acl.to_vec()).or_insert_with(|| n.acl.clone());
        assert!(Arc::ptr_eq(first, &n.acl), "{p}: its ACL list is a second copy, not the interned one");
    }
    (size, walked.len(), ephemerals, interned.len())
}

fn counts(t: &DataTree) -> (i64, usize, usize, usize) {
    (t.approximate_data_size(), t.node_count(), t.ephemeral_count(), t.acl_list_count())
}

#[test]
fn issue13_counts_are_maintained_by_apply_and_acls_are_interned() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut t = DataTree::new();
    let acls = acl_lists();
    let sessions = [0x11_i64, 0x22, 0x33];
    let mut zxid = 0;
    let mut live: Vec<String> = Vec::new();
    for step in 0..STEPS {
        zxid += 1;
        let mut session = sessions[rng.below(sessions.len())];
        let op = match rng.below(10) {
            0..=3 => {
                // Children only under persistent nodes (prep refuses them under ephemerals).
                let parent = match live.get(rng.below(live.len() + 1)) {
                    Some(p) if t.get(p).is_some_and(|n| n.ephemeral_owner == 0) => p.as_str(),
                    _ => "",
                };
                let path = format!("{parent}/n{step}");
                let owner = if rng.below(3) == 0 { session } else { 0 };
                if t.session(session).is_none() {
                    TxnOp::CreateSession { timeout_ms: 4000 }
                } else {
                    let data = (rng.below(4) > 0).then(|| Bytes::from(vec![b'd'; rng.below(300)]));
                    TxnOp::Create {
                        path,
                        data,
                        acl: acls[rng.below(acls.len())].clone(),
                        ephemeral_owner: owner,
                        response_type: 1,
                    }
                }
            }
            4..=5 if !live.is_empty() => {
                let p = live[rng.below(live.len())].clone();
                if t.get(&p).is_some_and(|n| n.children.is_empty()) {
                    TxnOp::Delete { path: p }
                } else {
                    TxnOp::SetData { path: p, data: None }
                }
            }
            6..=7 if !live.is_empty() => TxnOp::SetData {
                path: live[rng.below(live.len())].clone(),
                data: (rng.below(5) > 0).then(|| Bytes::from(vec![b's'; rng.below(500)])),
            },
            8 if !live.is_empty() => {
                TxnOp::SetAcl { path: live[rng.below(live.len())].clone(), acl: acls[rng.below(acls.len())].clone() }
            }
            _ if t.session(session).is_some() => TxnOp::CloseSession,
            _ => {
                session = sessions[0];
                TxnOp::Check { path: "/".into() }
            }
        };
        let txn = Txn { header: TxnHeader { zxid, session_id: session, cxid: 0, time_ms: step as i64 }, op };
        let mut changes = Vec::new();
        apply(&mut t, &txn, &mut changes);
        live = t.walk().iter().map(|(p, _)| p.to_string()).filter(|p| p.starts_with("/n")).collect();
        if step % 97 == 0 || step == STEPS - 1 {
            assert_eq!(counts(&t), recount(&t), "after step {step}: {:?}", txn.op);
        }
    }
    assert!(t.node_count() > 100 && t.ephemeral_count() > 0, "the mix left a tree worth checking");
    let restored = decode_snapshot(&encode_snapshot(&t)).expect("own snapshot decodes");
    assert_eq!(counts(&restored), recount(&restored));
    assert_eq!(counts(&restored), counts(&t));
    // Deleting every node but the built-in ones leaves only their ACL lists interned.
    let mut t = restored;
    for s in sessions {
        if t.session(s).is_some() {
            zxid += 1;
            let txn = Txn { header: TxnHeader { zxid, session_id: s, cxid: 0, time_ms: 0 }, op: TxnOp::CloseSession };
            apply(&mut t, &txn, &mut Vec::new());
        }
    }
    let mut doomed: Vec<String> = t.walk().iter().map(|(p, _)| p.to_string()).filter(|p| p.starts_with("/n")).collect();
    doomed.reverse();
    for p in doomed {
        zxid += 1;
        t.delete_node(&p, zxid);
    }
    assert_eq!(counts(&t), counts(&DataTree::new()));
    assert_eq!(t.acl_list_count(), 2, "open and read-only (of /zookeeper/config)");
}

#[test]
fn issue13_a_childs_path_is_stored_once() {
    let mut t = DataTree::new();
    t.create_node("/leaf", None::<&[u8]>, open_acl_unsafe().into(), 0, 1, 1);
    assert!(t.get("/leaf").expect("created").children.is_empty());
    let root = t.get("/").expect("root");
    let child = root.children.paths().find(|p| &***p == "/leaf").expect("linked").clone();
    // The parent's set holds the same Arc as the map's key, not a second copy of the name:
    // key, parent's set and this clone.
    assert_eq!(Arc::strong_count(&child), 3);
    assert_eq!(root.children.iter().collect::<Vec<_>>(), vec!["leaf", "zookeeper"]);
}
