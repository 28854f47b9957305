//! ZooKeeper's tree digest (`DigestCalculator`, digest version 2, and `NodeHashMapImpl`): each
//! node's CRC-32 over its path ("" for the root), its data and 60 bytes of stat (czxid, mzxid,
//! pzxid, ctime, mtime as longs, version, cversion, aversion as ints, ephemeralOwner as a
//! long; cversion and ephemeralOwner as stored), summed (wrapping) over every node except
//! those under "/zookeeper/". ZooKeeper logs it with every txn and writes it in snapshots.
//! Rules: pure; over our DataTree, whose stored counters are ZooKeeper's.

use crate::tree::{DataTree, Znode};

/// Nodes under this prefix are left out of the digest (ZooDefs.ZOOKEEPER_NODE_SUBTREE).
const DIGEST_EXCLUDED_PREFIX: &str = "/zookeeper/";

/// One node's digest, as `DigestCalculator.calculateDigest`.
pub fn node_digest(path: &str, n: &Znode) -> u32 {
    let path = if path == "/" { "" } else { path };
    let mut h = crc32fast::Hasher::new();
    h.update(path.as_bytes());
    if let Some(d) = &n.data {
        h.update(d);
    }
    let mut b = Vec::with_capacity(60);
    for v in [n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    for v in [n.version, n.child_creates, n.aversion] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(&n.ephemeral_owner.to_be_bytes());
    h.update(&b);
    h.finalize()
}

/// The tree's digest as ZooKeeper computes it (`DataTree.getTreeDigest`).
pub fn tree_digest(tree: &DataTree) -> i64 {
    tree.walk()
        .iter()
        .filter(|(p, _)| !p.starts_with(DIGEST_EXCLUDED_PREFIX))
        .fold(0i64, |sum, (p, n)| sum.wrapping_add(i64::from(node_digest(p, n))))
}
