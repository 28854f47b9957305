//! Quotas in the tree and in prep: a quota's stats node counts its subtree as txns apply
//! (creates, deletes, setData, nested paths; nothing outside it), recounts when the stats node
//! is created and when a snapshot is restored (also over stats a client scribbled on), leaves the
//! stats node's Stat alone, stops counting once the limits node is deleted, keeps the
//! approximate data size exact; prep refuses past a hard limit only with enforceQuota, also
//! inside a multi, where earlier sub-ops count.
//! Rules: deterministic, no I/O.

use super::acl::open_acl_unsafe;
use super::quota::{limit_path, stat_path};
use super::DataTree;
use crate::proto::opcode::create_flags;
use crate::proto::ErrorCode;
use crate::storage::snapshot::{decode_snapshot, encode_snapshot};
use crate::txn::apply::apply;
use crate::txn::prep::{prep, PrepContext};
use crate::txn::{Txn, TxnHeader, TxnOp, WriteOp};
use bytes::Bytes;

struct World {
    tree: DataTree,
    zxid: i64,
}

impl World {
    fn write(&mut self, op: WriteOp, enforce: bool) -> TxnOp {
        let ctx = PrepContext {
            session_id: 0,
            auth_ids: &[],
            extended_types_enabled: true,
            txn_bytes_max: crate::txn::codec::txn_record_bytes_max(crate::config::JUTE_MAX_BUFFER_BYTES_DEFAULT),
            enforce_quota: enforce,
        };
        let txn_op = prep(&self.tree, op, &ctx);
        self.zxid += 1;
        let txn = Txn {
            header: TxnHeader { zxid: self.zxid, session_id: 0, cxid: 0, time_ms: self.zxid },
            op: txn_op.clone(),
        };
        apply(&mut self.tree, &txn, &mut Vec::new());
        txn_op
    }

    fn create(&mut self, p: &str, data: Option<&str>, enforce: bool) -> TxnOp {
        self.write(create(p, data), enforce)
    }

    fn usage(&self, real: &str) -> String {
        let node = self.tree.get(&stat_path(real)).expect("stats node");
        String::from_utf8(node.data.as_deref().unwrap_or_default().to_vec()).unwrap()
    }
}

fn create(p: &str, data: Option<&str>) -> WriteOp {
    WriteOp::Create {
        opcode: 1,
        path: p.into(),
        data: data.map(|d| Bytes::from(d.to_string())),
        acl: Some(open_acl_unsafe()),
        flags: create_flags::PERSISTENT,
        ttl_ms: -1,
    }
}

fn set(p: &str, data: &str) -> WriteOp {
    WriteOp::SetData { path: p.into(), data: Some(Bytes::from(data.to_string())), version: -1 }
}

fn error_of(op: &TxnOp) -> Option<i32> {
    match op {
        TxnOp::Error { err } if *err != 0 => Some(*err),
        TxnOp::Multi(ops) => ops.iter().find_map(error_of),
        _ => None,
    }
}

fn recounted_size(t: &DataTree) -> i64 {
    t.walk().iter().map(|(p, n)| p.len() as i64 + n.data.as_ref().map_or(0, |d| d.len() as i64)).sum()
}

/// /a with two nodes under a quota of at most 4 znodes (hard) and 10 bytes (soft).
fn world_with_a_quota() -> World {
    let mut w = World { tree: DataTree::new(), zxid: 0 };
    w.create("/a", Some("xx"), false);
    w.create("/a/b", Some("yyy"), false);
    w.create("/x", Some("outside"), false);
    w.create("/zookeeper/quota/a", None, false);
    w.create(&limit_path("/a"), Some("count=-1,bytes=10=;byteHardLimit=-1;countHardLimit=4"), false);
    w.create(&stat_path("/a"), Some("count=0,bytes=0"), false);
    w
}

#[test]
fn quota_usage_follows_the_subtree_and_survives_restore() {
    let mut w = world_with_a_quota();
    assert_eq!(w.usage("/a"), "count=2,bytes=5", "the stats node's create recounts the subtree");
    let stats_stat = w.tree.get(&stat_path("/a")).unwrap().stat();
    w.create("/a/b/c", Some("z"), false);
    w.write(set("/a/b", ""), false);
    assert_eq!(w.usage("/a"), "count=3,bytes=3");
    w.write(WriteOp::Delete { path: "/a/b/c".into(), version: -1 }, false);
    w.create("/x/y", Some("not counted"), false);
    w.write(set("/x", "still not"), false);
    assert_eq!(w.usage("/a"), "count=2,bytes=2");
    let after = w.tree.get(&stat_path("/a")).unwrap().stat();
    assert_eq!((after.version, after.mzxid), (stats_stat.version, stats_stat.mzxid), "no txn touched the stats node");
    assert_eq!(w.tree.approximate_data_size(), recounted_size(&w.tree));
    // A restore recounts: usage a client overwrote is corrected, and the quota is tracked.
    w.write(set(&stat_path("/a"), "count=99,bytes=nonsense"), false);
    let mut restored = decode_snapshot(&encode_snapshot(&w.tree)).expect("decodes");
    assert_eq!(
        String::from_utf8_lossy(restored.get(&stat_path("/a")).unwrap().data.as_deref().unwrap()),
        "count=2,bytes=2"
    );
    assert_eq!(restored.quota_prefix("/a/b/q").as_deref(), Some("/a"));
    assert_eq!(restored.approximate_data_size(), recounted_size(&restored));
    w.tree = std::mem::take(&mut restored);
    w.create("/a/n", Some("1234"), false);
    assert_eq!(w.usage("/a"), "count=3,bytes=6");
    // Without the limits node there is no quota: nothing counts any more.
    w.write(WriteOp::Delete { path: limit_path("/a"), version: -1 }, false);
    w.create("/a/m", Some("123"), false);
    assert_eq!(w.usage("/a"), "count=3,bytes=6");
    assert_eq!(w.tree.quota_prefix("/a/m"), None);
}

#[test]
fn enforce_quota_refuses_past_a_hard_limit_only() {
    let mut w = world_with_a_quota();
    let quota_exceeded = Some(ErrorCode::QuotaExceeded.code());
    assert_eq!(error_of(&w.create("/a/c", Some("1234"), true)), None, "3 znodes, 9 bytes: within");
    assert_eq!(error_of(&w.create("/a/d", Some("12"), true)), None, "past the soft byte limit: only logged");
    assert_eq!(w.usage("/a"), "count=4,bytes=11");
    assert_eq!(error_of(&w.create("/a/e", None, true)), quota_exceeded, "a fifth znode");
    assert!(w.tree.get("/a/e").is_none());
    assert_eq!(error_of(&w.create("/a/e", None, false)), None, "counted but not enforced without enforceQuota");
    assert_eq!(w.usage("/a"), "count=5,bytes=11");
    // setData changes no count: only a byte hard limit refuses it.
    w.write(set(&limit_path("/a"), "count=-1,bytes=-1=;byteHardLimit=12;countHardLimit=-1"), false);
    assert_eq!(error_of(&w.write(set("/a/c", "12345"), true)), None, "12 bytes: at the limit");
    assert_eq!(error_of(&w.write(set("/a/c", "123456"), true)), quota_exceeded);
    assert_eq!(error_of(&w.create("/x/z", Some("far too many bytes for /a"), true)), None, "outside the quota");
    // In a multi, earlier sub-ops count: two creates of 1 byte each, the second one past 12.
    w.write(set("/a/c", "1234"), true);
    assert_eq!(w.usage("/a"), "count=5,bytes=11");
    let multi = WriteOp::Multi(vec![create("/a/f", Some("1")), create("/a/g", Some("1"))]);
    assert_eq!(error_of(&w.write(multi, true)), quota_exceeded);
    assert!(w.tree.get("/a/f").is_none(), "the whole multi failed");
    assert_eq!(w.tree.approximate_data_size(), recounted_size(&w.tree));
}
