//! Whatever is acknowledged can be read back (issue 14, item 1), and log batches stay under
//! their byte cap (item 5): the path of a client write from its frame to a restart, without
//! I/O. A frame the frame decoder admits (at most jute.maxbuffer) is decoded as a client core
//! decodes it, turned into a `WriteOp`, prepped, encoded as the log record, decoded back (as
//! recovery reads it) and applied; the tree rebuilt from the records (`rebuild_tree`, what a
//! restart does) must equal the pipeline's, and its snapshot must round-trip.
//! Rules: tests only; the fuzz run's length comes from RK_FUZZ_CASES / RK_FUZZ_SECS (small by
//! default: 15 s, so CI stays under 30 s), its seed from RK_FUZZ_SEED (printed, to replay a find).

use super::codec::{self, txn_record_bytes_max, TXN_HEADER_BYTES};
use super::prep::{prep, PrepContext};
use super::{apply, Txn, TxnHeader, TxnOp, WriteOp};
use crate::config::JUTE_MAX_BUFFER_BYTES_DEFAULT;
use crate::proto::frame::FrameDecoder;
use crate::proto::request::{decode_request, encode_request, Request};
use crate::proto::{Acl, ErrorCode, Id, OpCode};
use crate::storage::recovery::{rebuild_tree, Recovered};
use crate::storage::snapshot::tests::assert_same_tree;
use crate::storage::snapshot::{decode_snapshot, encode_snapshot};
use crate::tree::DataTree;
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};
use std::time::{Duration, Instant};

const SESSION: i64 = 0x77;

fn id(scheme: &str, id: &str) -> Id {
    Id { scheme: scheme.into(), id: id.into() }
}

fn acl(perms: i32, scheme: &str, i: &str) -> Acl {
    Acl { perms, id: id(scheme, i) }
}

/// `n` distinct valid ACL entries (ip addresses).
fn distinct_ip_acl(n: usize) -> Vec<Acl> {
    (0..n).map(|i| acl(31, "ip", &format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255))).collect()
}

/// A client write on its way from the frame to a restart: the pipeline's tree and the log.
struct Replica {
    tree: DataTree,
    records: Vec<Bytes>,
    auth: Vec<Id>,
    jute_max_buffer_bytes: usize,
    txn_bytes_max: usize,
    frames: FrameDecoder,
}

impl Replica {
    fn new(jute_max_buffer_bytes: usize, auth: Vec<Id>) -> Replica {
        let mut r = Replica {
            tree: DataTree::new(),
            records: Vec::new(),
            auth,
            jute_max_buffer_bytes,
            txn_bytes_max: txn_record_bytes_max(jute_max_buffer_bytes),
            frames: FrameDecoder::new(jute_max_buffer_bytes),
        };
        r.commit(TxnOp::CreateSession { timeout_ms: 30_000 }, 0);
        r
    }

    /// Orders a prepped op as the pipeline does: apply, encode; and checks the record reads
    /// back as the same txn.
    fn commit(&mut self, op: TxnOp, cxid: i32) -> Txn {
        let header =
            TxnHeader { zxid: self.tree.last_zxid() + 1, session_id: SESSION, cxid, time_ms: 1_700_000_000_000 };
        let txn = Txn { header, op };
        apply::apply(&mut self.tree, &txn, &mut Vec::new());
        let mut buf = BytesMut::new();
        codec::encode(&txn, &mut buf);
        let record = buf.freeze();
        assert_eq!(record.len(), TXN_HEADER_BYTES + codec::op_encoded_len(&txn.op), "op_encoded_len is exact");
        assert!(
            record.len() <= self.txn_bytes_max,
            "a {} byte record passed prep's limit {}",
            record.len(),
            self.txn_bytes_max
        );
        let back = codec::decode(record.clone())
            .unwrap_or_else(|e| panic!("logged txn {:#x} unreadable: {e}", txn.header.zxid));
        assert_eq!(back, txn);
        self.records.push(record);
        txn
    }

    fn prep(&self, op: &WriteOp) -> TxnOp {
        let ctx = PrepContext {
            session_id: SESSION,
            auth_ids: &self.auth,
            extended_types_enabled: true,
            txn_bytes_max: self.txn_bytes_max,
            enforce_quota: true,
        };
        prep(&self.tree, op.clone(), &ctx)
    }

    /// One client frame (payload without its length prefix), as a client core and the pipeline
    /// take it. Returns the record of the write it made, if any.
    fn frame(&mut self, frame: Bytes) -> Option<Txn> {
        let mut wire = BytesMut::new();
        wire.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        wire.extend_from_slice(&frame);
        let frame = match self.frames.next_frame(&mut wire) {
            Ok(Some(f)) => f,
            // Refused by length (over jute.maxbuffer, or negative): the connection closes.
            _ => return None,
        };
        let (hdr, req) = decode_request(frame.clone()).ok()?;
        let op = WriteOp::from_request(req.clone()).ok()?;
        let txn_op = self.prep(&op);
        let txn = self.commit(txn_op, hdr.xid);
        if !acl_has_auth(&req) {
            // Without `auth` expansion a record stays within 1.25 × its frame + 64 bytes
            // (codec::TXN_RECORD_RATIO's argument), so the size limit never refuses it.
            let record_len = TXN_HEADER_BYTES + codec::op_encoded_len(&txn.op);
            assert!(record_len * 4 <= frame.len() * 5 + 256, "record {record_len} for a frame of {}", frame.len());
        }
        Some(txn)
    }

    /// Rebuilds the tree from the log records alone, as a restart does, and checks it and its
    /// snapshot against the pipeline's tree.
    fn check_restart(&self) {
        let rec = Recovered { records: self.records.clone(), last_zxid: self.tree.last_zxid(), ..Recovered::default() };
        let rebuilt = rebuild_tree(&rec).expect("the log reads back after a restart");
        assert_same_tree(&self.tree, &rebuilt);
        let snap = encode_snapshot(&self.tree);
        let restored = decode_snapshot(&snap).expect("the snapshot reads back");
        assert_same_tree(&self.tree, &restored);
        assert_eq!(encode_snapshot(&restored), snap);
    }
}

fn acl_has_auth(req: &Request) -> bool {
    let has = |a: &Option<Vec<Acl>>| a.as_ref().is_some_and(|a| a.iter().any(|e| e.id.scheme == "auth"));
    match req {
        Request::Create { acl, .. } | Request::SetAcl { acl, .. } => has(acl),
        Request::Multi(ops) => ops.iter().any(acl_has_auth),
        _ => false,
    }
}

fn wire(xid: i32, req: &Request) -> Bytes {
    let mut out = BytesMut::new();
    encode_request(&mut out, xid, req);
    out.freeze().slice(4..)
}

fn create(path: &str, acl: Vec<Acl>) -> Request {
    Request::Create { opcode: OpCode::Create, path: path.into(), data: None, acl: Some(acl), flags: 0, ttl_ms: -1 }
}

#[test]
fn hardening_1_create_with_4097_acl_entries_is_logged_and_read_back() {
    let mut r = Replica::new(JUTE_MAX_BUFFER_BYTES_DEFAULT, vec![id("ip", "127.0.0.1")]);
    for (i, n) in [4095, 4096, 4097, 40_000].into_iter().enumerate() {
        let frame = wire(1, &create(&format!("/acl{i}"), distinct_ip_acl(n)));
        assert!(frame.len() < JUTE_MAX_BUFFER_BYTES_DEFAULT);
        let txn = r.frame(frame).expect("a write");
        assert!(matches!(&txn.op, TxnOp::Create { acl, .. } if acl.len() == n), "{n} entries: {:?}", txn.op);
    }
    r.check_restart();
}

#[test]
fn hardening_1_multi_of_65537_checks_is_logged_and_read_back() {
    // 65,537 checks take a 1.2 MB frame: jute.maxbuffer raised, as in the issue.
    let mut r = Replica::new(2 * 1024 * 1024, vec![]);
    for (path, fails) in [("/missing", true), ("/", false)] {
        let checks = vec![Request::Check { path: path.into(), version: -1 }; 65_537];
        let txn = r.frame(wire(2, &Request::Multi(checks))).expect("a write");
        let TxnOp::Multi(ops) = &txn.op else { panic!("{:?}", txn.op) };
        assert_eq!(ops.len(), 65_537);
        assert_eq!(matches!(ops[0], TxnOp::Error { .. }), fails);
    }
    r.check_restart();
}

/// The one way a record can outgrow its request: `auth` entries expand into one entry per
/// digest id of the session. Prep stops at the limit, to the byte.
#[test]
fn hardening_1_auth_acl_expansion_is_refused_past_the_txn_limit() {
    let ids: Vec<Id> = (0..64).map(|i| id("digest", &format!("user{i:03}:aYXlLOpEooaV1cRAvUL1fp9Qt7E="))).collect();
    // 64 auth entries of distinct perms × 64 ids = 4096 entries from a 1 KB request.
    let auth_acl: Vec<Acl> = (0..64).map(|p| acl(p, "auth", "")).collect();
    let single =
        WriteOp::Create { opcode: 1, path: "/x".into(), data: None, acl: Some(auth_acl.clone()), flags: 0, ttl_ms: -1 };
    // In a multi, the op that takes the txn past the limit fails (the check before it is ok).
    let multi = WriteOp::Multi(vec![WriteOp::Check { path: "/".into(), version: -1 }, single.clone()]);
    for op in [single, multi] {
        let mut r = Replica::new(JUTE_MAX_BUFFER_BYTES_DEFAULT, ids.clone());
        let ok = r.prep(&op);
        let len = TXN_HEADER_BYTES + codec::op_encoded_len(&ok);
        assert!(len > 4096 * 40, "{len}");
        // Exactly at the limit: accepted; one byte under it: InvalidACL.
        r.txn_bytes_max = len;
        assert_eq!(r.prep(&op), ok);
        r.txn_bytes_max = len - 1;
        let refused = r.prep(&op);
        let invalid_acl = ErrorCode::InvalidAcl.code();
        match &refused {
            TxnOp::Error { err } => assert_eq!(*err, invalid_acl),
            TxnOp::Multi(errs) => assert_eq!(errs, &vec![TxnOp::Error { err: 0 }, TxnOp::Error { err: invalid_acl }]),
            other => panic!("{other:?}"),
        }
        r.commit(refused, 3);
        r.txn_bytes_max = len;
        r.commit(ok, 4);
        r.check_restart();
    }
    // With the default limit, 1,000 ids and 1,000 auth entries (a 16 KB request, a 60 MB
    // ACL) are refused without building the list.
    let many: Vec<Id> = (0..1000).map(|i| id("digest", &format!("u{i:04}:aYXlLOpEooaV1cRAvUL1fp9Qt7E="))).collect();
    let r = Replica::new(JUTE_MAX_BUFFER_BYTES_DEFAULT, many);
    let big = (0..1000).map(|p| acl(p, "auth", "")).collect();
    let op = WriteOp::Create { opcode: 1, path: "/y".into(), data: None, acl: Some(big), flags: 0, ttl_ms: -1 };
    assert_eq!(r.prep(&op), TxnOp::Error { err: ErrorCode::InvalidAcl.code() });
}

// ---- generated requests ----

const PATHS: &[&str] = &[
    "/",
    "/a",
    "/a/b",
    "/a/b/c",
    "/b",
    "/b/x",
    "/a/b-",
    "/zookeeper",
    "/zookeeper/quota",
    "/zookeeper/config",
    "/a/",
    "a",
    "",
    "/a//b",
    "/a\0",
    "/\u{e9}",
];

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(PATHS).prop_map(String::from),
        2 => "(/[a-c]{1,2}){1,4}",
        1 => prop::sample::select(vec![200usize, 1000, 4000, 60_000]).prop_map(|n| format!("/{}", "l".repeat(n))),
    ]
}

fn acl_entry() -> impl Strategy<Value = Acl> {
    prop_oneof![
        4 => (0..=31i32).prop_map(|p| acl(p, "world", "anyone")),
        2 => (0..=31i32, 0..=255u8).prop_map(|(p, i)| acl(p, "ip", &format!("10.0.0.{i}"))),
        1 => (0..=31i32).prop_map(|p| acl(p, "digest", "alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=")),
        2 => (any::<i32>()).prop_map(|p| acl(p, "auth", "")),
        1 => prop::sample::select(vec![("world", "x"), ("nope", "x"), ("ip", "1.2.3.4/40"), ("ip", "::1"), ("", "")])
            .prop_map(|(s, i)| acl(31, s, i)),
    ]
}

fn acl_list() -> impl Strategy<Value = Option<Vec<Acl>>> {
    prop_oneof![
        1 => Just(None),
        6 => prop::collection::vec(acl_entry(), 0..6).prop_map(Some),
        2 => prop::sample::select(vec![1usize, 100, 1000, 4095, 4096, 4097, 50_000]).prop_map(|n| Some(distinct_ip_acl(n))),
    ]
}

fn data() -> impl Strategy<Value = Option<Bytes>> {
    prop_oneof![
        1 => Just(None),
        4 => prop::collection::vec(any::<u8>(), 0..40).prop_map(|v| Some(Bytes::from(v))),
        1 => prop::sample::select(vec![4000usize, 65_000, 1_048_000, 1_048_575, 2_000_000])
            .prop_map(|n| Some(Bytes::from(vec![7u8; n]))),
    ]
}

fn version() -> impl Strategy<Value = i32> {
    prop::sample::select(vec![-1, 0, 1, 2, 7])
}

fn create_req() -> impl Strategy<Value = Request> {
    (
        prop::sample::select(vec![OpCode::Create, OpCode::Create2, OpCode::CreateContainer, OpCode::CreateTtl]),
        path(),
        data(),
        acl_list(),
        -1..=8i32,
        prop::sample::select(vec![-1i64, 0, 1, 1000, 0xff_ffff_ffff, 0x100_0000_0000]),
    )
        .prop_map(|(opcode, path, data, acl, flags, ttl)| Request::Create {
            opcode,
            path,
            data,
            acl,
            flags,
            ttl_ms: if opcode == OpCode::CreateTtl { ttl } else { -1 },
        })
}

fn multi_sub_op() -> impl Strategy<Value = Request> {
    prop_oneof![
        3 => create_req(),
        1 => (path(), version()).prop_map(|(path, version)| Request::Delete { path, version }),
        1 => (path(), data(), version()).prop_map(|(path, data, version)| Request::SetData { path, data, version }),
        1 => (path(), version()).prop_map(|(path, version)| Request::Check { path, version }),
    ]
}

fn write_req() -> impl Strategy<Value = Request> {
    prop_oneof![
        // A top-level check is no write (the decoder refuses it): make it a setData.
        6 => multi_sub_op().prop_map(|r| match r {
            Request::Check { path, version } => Request::SetData { path, data: None, version },
            r => r,
        }),
        1 => (path(), acl_list(), version()).prop_map(|(path, acl, version)| Request::SetAcl { path, acl, version }),
        3 => prop::collection::vec(multi_sub_op(), 0..12).prop_map(Request::Multi),
        // Short paths: 65,537 copies of a 60 KB path would be a 4 GB frame to build.
        1 => (prop::sample::select(vec![0usize, 1, 1000, 65_535, 65_536, 65_537]), prop::sample::select(PATHS), version())
            .prop_map(|(n, path, version)| Request::Multi(vec![Request::Check { path: path.into(), version }; n])),
        1 => (0..3000usize).prop_map(|n| Request::Multi(
            (0..n).map(|i| create(&format!("/s{}-", i % 3), vec![acl(31, "world", "anyone")]))
                .map(|r| match r { Request::Create { opcode, path, data, acl, ttl_ms, .. } => Request::Create { opcode, path, data, acl, flags: 2, ttl_ms }, r => r })
                .collect())),
        1 => Just(Request::CloseSession),
    ]
}

fn session_ids() -> impl Strategy<Value = Vec<Id>> {
    (0..4usize).prop_map(|n| {
        let mut ids = vec![id("ip", "127.0.0.1")];
        ids.extend((0..n).map(|i| id("digest", &format!("user{i}:aYXlLOpEooaV1cRAvUL1fp9Qt7E="))));
        ids
    })
}

fn jute() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![4096usize, 65_536, JUTE_MAX_BUFFER_BYTES_DEFAULT, 2 * 1024 * 1024])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every request prep accepts (and every one it answers with an error) is logged as a
    /// record that decodes to the same txn, and the records rebuild the same tree.
    #[test]
    fn hardening_1_every_prepped_write_reads_back_and_replays(
        jute in jute(),
        auth in session_ids(),
        reqs in prop::collection::vec(write_req(), 1..24),
    ) {
        let mut r = Replica::new(jute, auth);
        for (i, req) in reqs.iter().enumerate() {
            let frame = wire(i as i32 + 1, req);
            let admitted = frame.len() <= r.jute_max_buffer_bytes;
            // A request the client encoded decodes to itself, and one within the frame limit
            // always makes a txn.
            if admitted {
                let (_, back) = decode_request(frame.clone()).expect("a client's encoding decodes");
                prop_assert_eq!(&back, req);
            }
            prop_assert_eq!(r.frame(frame).is_some(), admitted);
        }
        r.check_restart();
    }
}

// ---- the fuzz run: arbitrary frames through decode → prep → encode → decode → apply ----

/// How a generated frame is damaged before it is sent.
#[derive(Debug, Clone)]
enum Mutation {
    None,
    Flip { at: usize, bits: u8 },
    Truncate { at: usize },
    Word { at: usize, value: i32 },
    Raw(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => Just(Mutation::None),
        2 => (any::<usize>(), 1..=255u8).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        2 => (any::<usize>(), prop::sample::select(vec![-2, -1, 0, 1, 13, 14, 65_537, 0x7fff_ffff, i32::MIN]))
            .prop_map(|(at, value)| Mutation::Word { at, value }),
        1 => (prop::sample::select(vec![1, 2, 5, 7, 9, 14, 15, 16, 19, 21, -11]), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(op, body)| {
                let mut raw = 1i32.to_be_bytes().to_vec();
                raw.extend_from_slice(&(op as i32).to_be_bytes());
                raw.extend_from_slice(&body);
                Mutation::Raw(raw)
            }),
    ]
}

fn damaged(frame: Bytes, m: &Mutation) -> Bytes {
    let mut b = frame.to_vec();
    match m {
        Mutation::None => {}
        Mutation::Flip { at, bits } if !b.is_empty() => {
            let i = at % b.len();
            b[i] ^= bits;
        }
        Mutation::Truncate { at } => b.truncate(at % (b.len() + 1)),
        Mutation::Word { at, value } if b.len() >= 4 => {
            let i = at % (b.len() - 3);
            b[i..i + 4].copy_from_slice(&value.to_be_bytes());
        }
        Mutation::Raw(raw) => b = raw.clone(),
        _ => {}
    }
    Bytes::from(b)
}

/// Small requests (many per second), with now and then one of the large ones above.
fn small_req() -> impl Strategy<Value = Request> {
    let path = || prop::sample::select(PATHS).prop_map(String::from);
    let acl = || prop::option::of(prop::collection::vec(acl_entry(), 0..4));
    let data = || prop::option::of(prop::collection::vec(any::<u8>(), 0..16).prop_map(Bytes::from));
    let sub = prop_oneof![
        (path(), data(), acl(), -1..=8i32).prop_map(|(path, data, acl, flags)| Request::Create {
            opcode: OpCode::Create2,
            path,
            data,
            acl,
            flags,
            ttl_ms: -1
        }),
        (path(), version()).prop_map(|(path, version)| Request::Delete { path, version }),
        (path(), data(), version()).prop_map(|(path, data, version)| Request::SetData { path, data, version }),
        (path(), version()).prop_map(|(path, version)| Request::Check { path, version }),
    ];
    prop_oneof![
        3 => sub.clone().prop_map(|r| match r {
            Request::Check { path, version } => Request::SetData { path, data: None, version },
            r => r,
        }),
        1 => (path(), acl(), version()).prop_map(|(path, acl, version)| Request::SetAcl { path, acl, version }),
        2 => prop::collection::vec(sub, 0..8).prop_map(Request::Multi),
    ]
}

fn fuzz_case() -> impl Strategy<Value = (usize, Vec<Id>, Vec<(Request, Mutation)>)> {
    let req = prop_oneof![30 => small_req(), 1 => write_req()];
    (jute(), session_ids(), prop::collection::vec((req, mutation()), 1..32))
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Bounded by RK_FUZZ_CASES (default 100,000) and RK_FUZZ_SECS (default 15); nothing may panic,
/// every logged record must decode to its txn, and the log must rebuild the same tree.
#[test]
fn hardening_1_fuzz_frames_through_decode_prep_encode_decode_apply() {
    let cases_max = env_number("RK_FUZZ_CASES", 100_000);
    let secs = env_number("RK_FUZZ_SECS", 15);
    let seed = env_number(
        "RK_FUZZ_SEED",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1),
    );
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner =
        TestRunner::new_with_rng(ProptestConfig::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    let strategy = fuzz_case();
    let began = Instant::now();
    let deadline = began + Duration::from_secs(secs);
    let (mut cases, mut frames, mut writes) = (0u64, 0u64, 0u64);
    while cases < cases_max && Instant::now() < deadline {
        let (jute, auth, reqs) = strategy.new_tree(&mut runner).expect("a case").current();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut r = Replica::new(jute, auth.clone());
            let mut w = 0;
            for (i, (req, m)) in reqs.iter().enumerate() {
                let fr = damaged(wire(i as i32 + 1, req), m);
                if r.frame(fr).is_some() {
                    w += 1;
                }
            }
            r.check_restart();
            w
        }));
        match outcome {
            Ok(w) => {
                writes += w;
            }
            Err(e) => {
                eprintln!(
                    "fuzz: case {cases} of seed {seed} failed (replay: RK_FUZZ_SEED={seed}); jute {jute}, ids {auth:?}"
                );
                for (req, m) in &reqs {
                    let text = format!("{req:?}");
                    eprintln!("  {:.300} / {m:?}", text);
                }
                std::panic::resume_unwind(e);
            }
        }
        cases += 1;
        frames += reqs.len() as u64;
    }
    eprintln!(
        "fuzz: seed {seed}: {cases} cases, {frames} frames, {writes} writes logged and replayed in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(cases > 0);
}

// ---- item 5: log batches in bytes ----

/// Many large txns appended at once go out as several batches, each under the cap, in zxid
/// order, none empty (before: one batch of everything, and over 1 GiB `BatchEncoder::push`'s
/// assert aborted the pipeline).
#[test]
fn hardening_5_large_txns_split_into_batches_under_the_byte_cap() {
    use crate::server::log_writer::plan_batches;
    use crate::storage::log::{BATCH_BODY_BYTES_MAX, BATCH_HEADER_BYTES, RECORD_PREFIX_BYTES};
    let record = |zxid: i64, len: usize| {
        let mut b = BytesMut::new();
        let txn = Txn {
            header: TxnHeader { zxid, session_id: 1, cxid: 1, time_ms: 1 },
            op: TxnOp::SetData { path: "/d".into(), data: Some(Bytes::from(vec![1u8; len])) },
        };
        codec::encode(&txn, &mut b);
        b.freeze()
    };
    let cap = 3 * 1024 * 1024;
    let records: Vec<Bytes> = (1..=40).map(|z| record(z, 1_000_000 + z as usize * 1000)).collect();
    let total: usize = records.iter().map(|r| RECORD_PREFIX_BYTES + r.len()).sum();
    let batches = plan_batches(&records, 1, cap).unwrap();
    assert!(batches.len() >= total / cap, "{} batches for {total} bytes", batches.len());
    let mut next = 1;
    for b in batches {
        assert_eq!(b.first_zxid(), Some(next));
        next = b.last_zxid().unwrap() + 1;
        assert!(b.encoded_len() <= (BATCH_HEADER_BYTES + cap).next_multiple_of(4096));
        // A batch closes only when the next record would not fit.
        let sealed = b.finish();
        assert!(sealed.len() > 0);
    }
    assert_eq!(next, 41);
    // The largest txn of the largest jute.maxbuffer fits an empty batch of the format.
    assert!(codec::TXN_RECORD_BYTES_LIMIT + RECORD_PREFIX_BYTES <= BATCH_BODY_BYTES_MAX);
    // A record over the configured cap (a leader's, with a larger jute.maxbuffer) is a batch
    // of its own, not an error.
    let big = vec![record(1, 10), record(2, 5_000_000), record(3, 10)];
    let b = plan_batches(&big, 1, cap).unwrap();
    assert_eq!(b.iter().map(|b| b.record_count()).collect::<Vec<_>>(), vec![1, 1, 1]);
}

/// Found by the property test: `DataTree::walk` (snapshot dumps, tree comparisons) lost
/// nodes under a parent with thousands of children, through im-rc's reverse iteration.
#[test]
fn hardening_1_walk_lists_every_child_of_a_wide_node() {
    let mut r = Replica::new(2 * 1024 * 1024, vec![]);
    let creates = (0..3000)
        .map(|i| Request::Create {
            opcode: OpCode::Create,
            path: format!("/s{}-", i % 3),
            data: None,
            acl: Some(vec![acl(31, "world", "anyone")]),
            flags: 2,
            ttl_ms: -1,
        })
        .collect();
    r.frame(wire(1, &Request::Multi(creates))).expect("a write");
    assert_eq!(r.tree.walk().len(), r.tree.node_count());
    assert_eq!(r.tree.node_count(), 3004);
    r.check_restart();
}
