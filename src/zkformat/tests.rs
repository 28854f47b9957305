//! Tests of the ZooKeeper formats: jute round trips of every txn record, snapshots and logs
//! (property tests), damage and unknown formats refused by name, and the replay's fuzzy
//! snapshot semantics: replaying a txn sequence onto any prefix of itself (what a fuzzy
//! snapshot holds) ends in the same tree, stored counters and digest as replaying it onto the
//! start, which is also what our own apply makes.

use super::digest::tree_digest;
use super::migrate::zk_snapshot_of;
use super::records::{decode_txn_entry, encode_txn_entry, txn_type, TxnDigest, ZkCreate, ZkTxn, ZkTxnHeader};
use super::replay::{tree_from_snapshot, Replay};
use super::snapshot::{decode_snapshot, encode_snapshot, ZxidDigest, DIGEST_VERSION};
use super::txnlog::{decode_log, encode_log, LogEnd, ZkLogEntry};
use super::ZkFormatError;
use crate::proto::{Acl, Id};
use crate::tree::DataTree;
use bytes::Bytes;
use proptest::prelude::*;

fn acl(scheme: &str, id: &str, perms: i32) -> Acl {
    Acl { perms, id: Id { scheme: scheme.into(), id: id.into() } }
}

fn acls() -> impl Strategy<Value = Vec<Acl>> {
    prop_oneof![
        Just(vec![acl("world", "anyone", 31)]),
        Just(vec![acl("ip", "127.0.0.1", 1), acl("digest", "u:x+QXqtnVnVgJbGn5G2zIXhXwwQI=", 31)]),
        Just(vec![acl("world", "anyone", 1)]),
    ]
}

fn data() -> impl Strategy<Value = Option<Bytes>> {
    prop_oneof![Just(None), prop::collection::vec(any::<u8>(), 0..40).prop_map(|v| Some(Bytes::from(v)))]
}

fn create() -> impl Strategy<Value = ZkCreate> {
    ("/[a-c]{1,3}(/[a-c]{1,2}){0,2}", data(), acls(), -1..50i32)
        .prop_map(|(path, data, acl, parent_cversion)| ZkCreate { path, data, acl, parent_cversion })
}

fn sub_txn() -> impl Strategy<Value = ZkTxn> {
    prop_oneof![
        (create(), any::<bool>(), prop_oneof![Just(txn_type::CREATE), Just(txn_type::CREATE2)])
            .prop_map(|(c, ephemeral, type_code)| ZkTxn::Create { c, ephemeral, type_code }),
        create().prop_map(|c| ZkTxn::CreateContainer { c }),
        (create(), 1..1_000_000i64).prop_map(|(c, ttl_ms)| ZkTxn::CreateTtl { c, ttl_ms }),
        "/[a-c]{1,3}".prop_map(|path| ZkTxn::Delete { path, type_code: txn_type::DELETE }),
        ("/[a-c]{1,3}", data(), 0..9i32).prop_map(|(path, data, version)| ZkTxn::SetData {
            path,
            data,
            version,
            type_code: txn_type::SET_DATA
        }),
        ("/[a-c]{1,3}", acls(), 0..9i32).prop_map(|(path, acl, version)| ZkTxn::SetAcl { path, acl, version }),
        ("/[a-c]{1,3}", 0..9i32).prop_map(|(path, version)| ZkTxn::Check { path, version }),
        (-130..0i32).prop_map(|err| ZkTxn::Error { err }),
    ]
}

fn any_txn() -> impl Strategy<Value = ZkTxn> {
    prop_oneof![
        sub_txn(),
        (1..60_000i32).prop_map(|timeout_ms| ZkTxn::CreateSession { timeout_ms }),
        // ZooKeeper 3.6+ always writes paths2Delete (the older empty record is tested apart).
        prop::collection::vec("/[a-c]{1,3}", 0..3).prop_map(|p| ZkTxn::CloseSession { paths: Some(p) }),
        prop::collection::vec(sub_txn(), 0..4).prop_map(ZkTxn::Multi),
    ]
}

fn header(zxid: i64, t: &ZkTxn) -> ZkTxnHeader {
    ZkTxnHeader {
        client_id: 0x100 + zxid % 3,
        cxid: zxid as i32,
        zxid,
        time: 1_700_000_000_000 + zxid,
        txn_type: t.type_code(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every txn record reads back as written, with or without a digest after it.
    #[test]
    fn txn_records_round_trip(t in any_txn(), zxid in 1..1_000_000i64, digest in any::<Option<i64>>()) {
        let d = digest.map(|tree_digest| TxnDigest { version: DIGEST_VERSION, tree_digest });
        let h = header(zxid, &t);
        let bytes = encode_txn_entry(&h, &t, d);
        prop_assert_eq!(decode_txn_entry(bytes.clone(), 0).unwrap(), (h, t, d));
        // Every truncation is an error, never a panic (or decodes as a shorter valid entry when
        // it cuts exactly the optional digest).
        for cut in 0..bytes.len() {
            let _ = decode_txn_entry(bytes.slice(..cut), 0);
        }
    }

    /// A log file reads back entry by entry; its zero tail ends it cleanly, and a cut inside
    /// an entry is a partial write that keeps every entry before it.
    #[test]
    fn logs_round_trip_and_a_cut_is_partial(ts in prop::collection::vec(any_txn(), 1..8), tail in 0..64usize) {
        let entries: Vec<_> = ts.iter().enumerate().map(|(i, t)| {
            let zxid = i as i64 + 1;
            (header(zxid, t), t.clone(), Some(TxnDigest { version: DIGEST_VERSION, tree_digest: zxid * 7 }))
        }).collect();
        let bytes = Bytes::from(encode_log(&entries, tail));
        let scan = decode_log(&bytes).unwrap();
        prop_assert_eq!(scan.entries.len(), entries.len());
        for (e, (h, t, d)) in scan.entries.iter().zip(&entries) {
            prop_assert_eq!((&e.header, &e.txn, &e.digest), (h, t, d));
        }
        let clean = matches!(scan.end, LogEnd::Clean { .. });
        prop_assert!(clean, "{:?}", scan.end);
        let last = scan.entries.last().unwrap().offset;
        let cut = bytes.slice(..last + 14);
        let scan = decode_log(&cut).unwrap();
        prop_assert_eq!(scan.entries.len(), entries.len() - 1);
        let partial = matches!(scan.end, LogEnd::Partial { offset, .. } if offset == last);
        prop_assert!(partial, "{:?}", scan.end);
    }
}

/// A deterministic txn sequence as ZooKeeper's leader makes it (each txn valid at its zxid:
/// the parent cversion and versions it carries are the tree's + 1), over a few paths.
fn leader_txns(seed: u64, n: usize) -> (DataTree, Vec<ZkLogEntry>) {
    let mut tree = DataTree::new();
    let mut out = Vec::new();
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let paths = ["/a", "/a/b", "/a/c", "/a/b/d", "/e", "/e/f"];
    let mut zxid = 0;
    while out.len() < n {
        let p = paths[(next() % paths.len() as u64) as usize];
        let parent = crate::tree::path::parent(p).unwrap();
        let exists = tree.get(p).map(|n| (n.version, n.aversion, n.children.is_empty()));
        let txn = match (exists, next() % 4) {
            (None, _) => match tree.get(parent) {
                Some(pn) => ZkTxn::Create {
                    c: ZkCreate {
                        path: p.into(),
                        data: Some(Bytes::from(format!("v{zxid}"))),
                        acl: vec![acl("world", "anyone", 31)],
                        parent_cversion: pn.child_creates + 1,
                    },
                    ephemeral: next() % 3 == 0 && ["/a/c", "/a/b/d", "/e/f"].contains(&p),
                    type_code: txn_type::CREATE2,
                },
                None => continue,
            },
            (Some((_, _, true)), 0) => ZkTxn::Delete { path: p.into(), type_code: txn_type::DELETE },
            (Some((v, _, _)), 1) => ZkTxn::SetData {
                path: p.into(),
                data: Some(Bytes::from(format!("s{zxid}"))),
                version: v + 1,
                type_code: txn_type::SET_DATA,
            },
            (Some((_, a, _)), 2) => ZkTxn::SetAcl {
                path: p.into(),
                acl: vec![acl("ip", "10.0.0.1", (zxid % 31) as i32 + 1)],
                version: a + 1,
            },
            _ => continue,
        };
        zxid += 1;
        let e = ZkLogEntry { header: header(zxid, &txn), txn, digest: None, offset: 0 };
        let mut r = Replay::new(tree, None);
        r.apply_entry(&e).unwrap();
        tree = r.tree;
        let digest = Some(TxnDigest { version: DIGEST_VERSION, tree_digest: tree_digest(&tree) });
        out.push(ZkLogEntry { digest, ..e });
    }
    (DataTree::new(), out)
}

/// The tree `leader_txns(seed, n)` makes.
fn replayed(seed: u64, n: usize) -> DataTree {
    let (start, txns) = leader_txns(seed, n);
    let mut r = Replay::new(start, None);
    for e in &txns {
        r.apply_entry(e).unwrap();
    }
    r.tree
}

/// A node as compared: path, data, ACL, and every stored stat field.
type NodeImage = (String, Option<Bytes>, Vec<Acl>, [i64; 9]);

fn snapshot_tree(t: &DataTree) -> Vec<NodeImage> {
    t.walk()
        .iter()
        .map(|(p, n)| {
            let c = [
                n.czxid,
                n.mzxid,
                n.pzxid,
                n.ctime,
                n.mtime,
                n.version as i64,
                n.child_creates as i64,
                n.aversion as i64,
                n.ephemeral_owner,
            ];
            (p.to_string(), n.data.clone(), n.acl.to_vec(), c)
        })
        .collect()
}

/// Replaying the whole sequence onto any prefix's tree (written as a ZooKeeper snapshot and
/// read back) ends where replaying it from the start does, digests matching at every step
/// after the prefix.
#[test]
fn replay_onto_a_fuzzy_snapshot_is_idempotent() {
    for seed in [1u64, 7, 42, 99, 12345] {
        let (start, txns) = leader_txns(seed, 120);
        let mut full = Replay::new(start.clone(), None);
        for e in &txns {
            full.apply_entry(e).unwrap();
        }
        let (want, checked) = full.finish().unwrap();
        assert_eq!(checked.map(|c| c.0), Some(120));
        for k in [0usize, 1, 5, 40, 77, 119] {
            let mut pre = Replay::new(start.clone(), None);
            for e in &txns[..k] {
                pre.apply_entry(e).unwrap();
            }
            let snap_tree = pre.tree;
            // The snapshot is named by an earlier zxid than it holds (fuzzy): replay from 0.
            let zk = zk_snapshot_of(&snap_tree);
            let bytes = Bytes::from(encode_snapshot(&zk));
            let read = decode_snapshot(&bytes).unwrap();
            assert_eq!(read, zk);
            let tree = tree_from_snapshot(&read, 0).unwrap();
            let mut r = Replay::new(tree, read.digest);
            for e in &txns {
                r.apply_entry(e).unwrap();
            }
            let (got, _) = r.finish().unwrap();
            assert_eq!(snapshot_tree(&got), snapshot_tree(&want), "seed {seed} prefix {k}");
            assert_eq!(tree_digest(&got), tree_digest(&want));
        }
    }
}

/// A snapshot's seals are checked: any flipped byte is refused (a checksum, or a field that
/// no longer reads), never a panic; compressed snapshots and other files are refused by name.
#[test]
fn damaged_compressed_and_foreign_snapshots_are_refused() {
    let tree = replayed(3, 30);
    let zk = zk_snapshot_of(&tree);
    let bytes = encode_snapshot(&zk);
    for i in (0..bytes.len()).step_by(7) {
        let mut bad = bytes.clone();
        bad[i] ^= 0x20;
        assert!(decode_snapshot(&Bytes::from(bad)).is_err(), "flip at {i}");
    }
    // A gzip stream (zookeeper.snapshot.compression.method=gz) is inflated and read; snappy is
    // refused by name; a gzip stream that does not inflate is an error.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &bytes).unwrap();
    let gz = Bytes::from(gz.finish().unwrap());
    let inflated = super::snapshot::snapshot_stream("snapshot.1e.gz", gz.clone()).unwrap();
    assert_eq!(decode_snapshot(&inflated).unwrap(), zk);
    assert!(matches!(
        super::snapshot::snapshot_stream("snapshot.1e.gz", gz.slice(..gz.len() / 2)),
        Err(ZkFormatError::Gzip(_))
    ));
    assert_eq!(
        super::snapshot::snapshot_stream("snapshot.1e.snappy", Bytes::from(bytes.clone())),
        Err(ZkFormatError::Compressed { method: "snappy" })
    );
    assert_eq!(super::snapshot::snapshot_stream("snapshot.1e", Bytes::from(bytes.clone())).unwrap(), bytes);
    let ours = crate::storage::snapshot::encode_snapshot(&tree);
    assert!(matches!(decode_snapshot(&Bytes::from(ours)), Err(ZkFormatError::BadMagic { .. })));
    let mut v3 = bytes.clone();
    v3[7] = 3;
    assert_eq!(decode_snapshot(&Bytes::from(v3)), Err(ZkFormatError::UnsupportedVersion(3)));
}

/// An unknown txn type is refused with its name and number; a CRC mismatch is corruption.
#[test]
fn unknown_txn_types_and_bad_crcs_are_refused() {
    let t = ZkTxn::Check { path: "/a".into(), version: 1 };
    let mut h = header(5, &t);
    h.txn_type = 9; // sync: never logged
    let mut bytes = encode_txn_entry(&h, &t, None).to_vec();
    bytes[28..32].copy_from_slice(&9i32.to_be_bytes());
    let err = decode_txn_entry(Bytes::from(bytes), 0).unwrap_err();
    assert_eq!(err, ZkFormatError::UnsupportedTxn { zxid: 5, type_name: "sync", type_code: 9 });
    assert!(err.to_string().contains("record type sync (9) cannot be carried over"), "{err}");
    // A closeSession from before 3.6 has no record (and no digest).
    let old = ZkTxn::CloseSession { paths: None };
    let h = header(6, &old);
    assert_eq!(decode_txn_entry(encode_txn_entry(&h, &old, None), 0).unwrap(), (h, old, None));
    let log = encode_log(&[(header(1, &t), t.clone(), None)], 100);
    let mut bad = log.clone();
    let last = 16 + 12 + 5; // inside the first entry's bytes
    bad[last] ^= 1;
    assert!(matches!(decode_log(&Bytes::from(bad)), Err(ZkFormatError::Checksum { at: 16, .. })));
}

/// The snapshot's own digest is checked when nothing is replayed after it, and a tree that
/// differs from the digest is refused.
#[test]
fn a_digest_that_does_not_match_is_refused() {
    let zk = zk_snapshot_of(&replayed(11, 20));
    let tree = tree_from_snapshot(&zk, 20).unwrap();
    let mut ok = Replay::new(tree.clone(), zk.digest);
    ok.use_snapshot_digest_at(20);
    assert_eq!(ok.finish().unwrap().1, Some((20, zk.digest.unwrap().digest)));
    let wrong = ZxidDigest { digest: zk.digest.unwrap().digest ^ 1, ..zk.digest.unwrap() };
    let mut bad = Replay::new(tree, Some(wrong));
    bad.use_snapshot_digest_at(20);
    assert!(matches!(bad.finish(), Err(ZkFormatError::DigestMismatch { zxid: 20, .. })));
}
