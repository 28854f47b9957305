//! Bytes per znode of the DataTree: builds a tree of N znodes with 100 bytes of data each,
//! spread over 1,000 parents, through the real write path (txns encoded into batch buffers,
//! decoded from slices of them as recovery and ZAB do, applied by `txn::apply`), and reports
//! what the tree holds per znode: live heap (requested bytes and malloc chunks, from a
//! counting global allocator), the process RSS growth, and allocations per znode. It then
//! restores the tree from its snapshot and reports the same for the restored copy, and times
//! a setData while an older root is held (the copy-on-write cost every write pays once roots
//! are published to client cores).
//! Usage: `cargo run --release --example tree_bytes -- [znodes] [data_bytes]`
//! (defaults 1,000,000 and 100). Figures go to docs/benchmarks.md "Bytes per znode".
//! Rules: a measurement tool, not a test: prints numbers, asserts only that the tree it built
//! holds what it created.

use bytes::{Bytes, BytesMut};
use ringkeeper::proto::{Acl, Id};
use ringkeeper::storage::snapshot;
use ringkeeper::tree::DataTree;
use ringkeeper::txn::{apply, codec, Txn, TxnHeader, TxnOp};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

/// Parents the znodes are spread over (as in issue 13's comparison with ZooKeeper).
const PARENTS: usize = 1_000;
/// Txns encoded into one batch buffer before they are decoded and applied.
const BATCH_TXNS: usize = 1_000;
/// setData calls timed with and without a held root.
const WRITES_TIMED: usize = 100_000;
/// Older roots kept alive while timing writes (as client cores hold the roots they read).
const ROOTS_HELD: usize = 16;

struct Counting;

static LIVE_REQUESTED: AtomicI64 = AtomicI64::new(0);
static LIVE_CHUNKS: AtomicI64 = AtomicI64::new(0);
static LIVE_ALLOCS: AtomicI64 = AtomicI64::new(0);
/// glibc's per-chunk header beside what malloc_usable_size reports.
const MALLOC_HEADER_BYTES: i64 = 8;

// SAFETY: every call is forwarded to the system allocator unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            note(p, layout.size() as i64, 1);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(ptr, -(layout.size() as i64), -1);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(ptr, -(layout.size() as i64), -1);
        let p = System.realloc(ptr, layout, new_size);
        if p.is_null() {
            note(ptr, layout.size() as i64, 1);
        } else {
            note(p, new_size as i64, 1);
        }
        p
    }
}

fn note(p: *mut u8, requested: i64, sign: i64) {
    // SAFETY: p is a live block of the system allocator (malloc or posix_memalign).
    let usable = unsafe { libc::malloc_usable_size(p as *mut libc::c_void) } as i64;
    LIVE_REQUESTED.fetch_add(requested, Ordering::Relaxed);
    LIVE_CHUNKS.fetch_add(sign * (usable + MALLOC_HEADER_BYTES), Ordering::Relaxed);
    LIVE_ALLOCS.fetch_add(sign, Ordering::Relaxed);
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Mark {
    requested: i64,
    chunks: i64,
    allocs: i64,
    rss: i64,
}

fn rss_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn mark() -> Mark {
    Mark {
        requested: LIVE_REQUESTED.load(Ordering::Relaxed),
        chunks: LIVE_CHUNKS.load(Ordering::Relaxed),
        allocs: LIVE_ALLOCS.load(Ordering::Relaxed),
        rss: rss_bytes(),
    }
}

fn report(what: &str, before: Mark, after: Mark, znodes: usize) {
    let n = znodes as f64;
    println!(
        "{what}: {:.0} B/znode requested, {:.0} B/znode in malloc chunks, {:.2} allocations/znode, \
         RSS +{:.0} B/znode ({:.1} MiB)",
        (after.requested - before.requested) as f64 / n,
        (after.chunks - before.chunks) as f64 / n,
        (after.allocs - before.allocs) as f64 / n,
        (after.rss - before.rss) as f64 / n,
        (after.rss - before.rss) as f64 / (1024.0 * 1024.0),
    );
}

/// CPU time of this thread, in seconds (timings stay comparable on a busy machine).
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn parent_path(i: usize) -> String {
    format!("/load/p{i:04}")
}

fn child_path(i: usize) -> String {
    format!("{}/n{i:09}", parent_path(i % PARENTS))
}

/// Encodes `ops` as one batch buffer and applies each record decoded from a slice of it.
fn apply_batch(tree: &mut DataTree, zxid: &mut i64, ops: Vec<TxnOp>) {
    let mut buf = BytesMut::new();
    let mut ends = Vec::with_capacity(ops.len());
    for op in ops {
        *zxid += 1;
        let txn = Txn { header: TxnHeader { zxid: *zxid, session_id: 0x100, cxid: 1, time_ms: 1_700_000_000_000 }, op };
        codec::encode(&txn, &mut buf);
        ends.push(buf.len());
    }
    let buf = buf.freeze();
    let mut start = 0;
    let mut changes = Vec::new();
    for end in ends {
        let txn = codec::decode(buf.slice(start..end)).expect("a record just encoded decodes");
        apply::apply(tree, &txn, &mut changes);
        changes.clear();
        start = end;
    }
}

fn create(path: String, data: Option<Bytes>, acl: &[Acl]) -> TxnOp {
    TxnOp::Create { path, data, acl: acl.to_vec(), ephemeral_owner: 0, response_type: 1 }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let znodes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let data_bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let open = vec![Acl { perms: 31, id: Id { scheme: "world".into(), id: "anyone".into() } }];
    let payload = vec![b'v'; data_bytes];

    let before = mark();
    let started = Instant::now();
    let mut tree = DataTree::new();
    let mut zxid = 0i64;
    let cpu = cpu_seconds();
    let mut ops = vec![create("/load".into(), None, &open)];
    ops.extend((0..PARENTS).map(|i| create(parent_path(i), None, &open)));
    apply_batch(&mut tree, &mut zxid, ops);
    let mut i = 0;
    while i < znodes {
        let end = (i + BATCH_TXNS).min(znodes);
        let ops = (i..end).map(|j| create(child_path(j), Some(Bytes::copy_from_slice(&payload)), &open)).collect();
        apply_batch(&mut tree, &mut zxid, ops);
        i = end;
    }
    let built = mark();
    let total = znodes + PARENTS + 1;
    assert_eq!(tree.node_count(), total + 4);
    println!(
        "built {total} znodes ({znodes} of {data_bytes} bytes under {PARENTS} parents) in {:.2} s CPU ({:.2} s wall)",
        cpu_seconds() - cpu,
        started.elapsed().as_secs_f64()
    );
    report("applied tree", before, built, total);

    let started = Instant::now();
    let bytes = snapshot::encode_snapshot(&tree);
    println!(
        "snapshot: {} bytes ({:.0} B/znode), encoded in {:.2} s",
        bytes.len(),
        bytes.len() as f64 / total as f64,
        started.elapsed().as_secs_f64()
    );
    let before_restore = mark();
    let started = Instant::now();
    let restored = snapshot::decode_snapshot(&bytes).expect("own snapshot decodes");
    let elapsed = started.elapsed().as_secs_f64();
    let after_restore = mark();
    drop(bytes);
    assert_eq!(restored.node_count(), tree.node_count());
    println!("restored in {elapsed:.2} s");
    report("restored tree", before_restore, after_restore, total);
    drop(restored);

    // setData on random nodes: alone, then with an older root held before each write (every
    // write then copies the path of map nodes from the root to its entry).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut pick = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % znodes as u64) as usize
    };
    for held in [false, true] {
        let started = Instant::now();
        let cpu = cpu_seconds();
        let mut roots = Vec::new();
        for _ in 0..WRITES_TIMED {
            let op = TxnOp::SetData { path: child_path(pick()), data: Some(Bytes::copy_from_slice(&payload)) };
            if held {
                roots.push(tree.clone());
                if roots.len() > ROOTS_HELD {
                    roots.remove(0);
                }
            }
            apply_batch(&mut tree, &mut zxid, vec![op]);
        }
        println!(
            "setData {}: {:.2} us/write CPU ({:.2} us wall)",
            if held { "with an older root held (copy-on-write)" } else { "alone" },
            (cpu_seconds() - cpu) * 1e6 / WRITES_TIMED as f64,
            started.elapsed().as_secs_f64() * 1e6 / WRITES_TIMED as f64
        );
    }
}
