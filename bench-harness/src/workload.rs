//! What each connection of a run asks for: the paper's getData/setData mix, create + delete,
//! and a watch-heavy load (many sessions watching, one writer), plus the set-up that creates
//! the znodes they use.
//! Rules: deterministic given the seed (a small xorshift, no clock); paths live under
//! `BENCH_ROOT`; a read share is in per mille so the sweep points are exact.

use bytes::Bytes;
use ringkeeper::client::acl::perms;
use ringkeeper::proto::records::{Acl, Id};
use ringkeeper::proto::request::Request;
use ringkeeper::proto::OpCode;

/// Every znode a run uses lives under this path.
pub const BENCH_ROOT: &str = "/rkbench";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// getData / setData of `payload` bytes on random pre-created znodes (ZooKeeper paper §5).
    GetSet,
    /// Reads are getData; each write creates a znode of the connection's own, the next deletes it.
    CreateDelete,
    /// Connection 0 writes (setData on random znodes); every other connection keeps a data
    /// watch on one znode and sets it again after each event.
    Watch,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::GetSet => "get-set",
            Workload::CreateDelete => "create-delete",
            Workload::Watch => "watch",
        }
    }
}

/// xorshift64*: cheap, deterministic, good enough to pick znodes and operations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }
}

pub fn node_path(i: u64) -> String {
    format!("{BENCH_ROOT}/n{i}")
}

/// One connection's request stream.
#[derive(Debug)]
pub struct Generator {
    workload: Workload,
    read_permille: u32,
    znodes: u64,
    payload: Bytes,
    conn: usize,
    rng: Rng,
    /// create-delete: the own znode exists (the next write deletes it).
    created: bool,
}

impl Generator {
    pub fn new(workload: Workload, read_permille: u32, znodes: u64, payload: Bytes, conn: usize, seed: u64) -> Self {
        assert!(read_permille <= 1000, "a read share is at most 1000 per mille");
        assert!(znodes > 0, "a run needs at least one znode");
        Generator { workload, read_permille, znodes, payload, conn, rng: Rng::new(seed), created: false }
    }

    /// The connection's index in the run.
    pub fn conn(&self) -> usize {
        self.conn
    }

    /// The connection only watches (the watch workload's readers).
    pub fn is_watcher(&self) -> bool {
        self.workload == Workload::Watch && self.conn != 0
    }

    /// A watcher's getData with a watch, on its own znode.
    pub fn watch_request(&self) -> Request {
        Request::GetData { path: node_path(self.conn as u64 % self.znodes), watch: true }
    }

    pub fn next(&mut self) -> (OpCode, Request) {
        let read = self.workload != Workload::Watch && (self.rng.below(1000) as u32) < self.read_permille;
        let path = node_path(self.rng.below(self.znodes));
        if read {
            return (OpCode::GetData, Request::GetData { path, watch: false });
        }
        match self.workload {
            Workload::GetSet | Workload::Watch => {
                (OpCode::SetData, Request::SetData { path, data: Some(self.payload.clone()), version: -1 })
            }
            Workload::CreateDelete => {
                let own = format!("{BENCH_ROOT}/c{}", self.conn);
                self.created = !self.created;
                if self.created {
                    let req = Request::Create {
                        opcode: OpCode::Create,
                        path: own,
                        data: Some(self.payload.clone()),
                        acl: Some(ringkeeper::client::acl::OPEN_ACL_UNSAFE.clone()),
                        flags: 0,
                        ttl_ms: -1,
                    };
                    (OpCode::Create, req)
                } else {
                    (OpCode::Delete, Request::Delete { path: own, version: -1 })
                }
            }
        }
    }
}

/// The ACL of the set-up's znodes: open to all, or, for a run that authenticates with SASL
/// (`--sasl`), every permission for that user alone (`sasl:<user>`), so that every request of
/// the run is checked against it.
pub fn setup_acl(sasl_user: Option<&str>) -> Vec<Acl> {
    match sasl_user {
        None => ringkeeper::client::acl::OPEN_ACL_UNSAFE.clone(),
        Some(user) => vec![Acl { perms: perms::ALL, id: Id { scheme: "sasl".into(), id: user.into() } }],
    }
}

/// The set-up: `BENCH_ROOT` and `znodes` znodes of `payload` bytes with `acl` (NodeExists is
/// fine).
pub fn setup_requests(znodes: u64, payload: &Bytes, acl: &[Acl]) -> Vec<Request> {
    let create = |path: String, data: Bytes| Request::Create {
        opcode: OpCode::Create,
        path,
        data: Some(data),
        acl: Some(acl.to_vec()),
        flags: 0,
        ttl_ms: -1,
    };
    let mut out = vec![create(BENCH_ROOT.to_string(), Bytes::new())];
    out.extend((0..znodes).map(|i| create(node_path(i), payload.clone())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_share_is_what_was_asked() {
        for permille in [0, 100, 500, 900, 1000] {
            let mut g = Generator::new(Workload::GetSet, permille, 50, Bytes::from_static(b"x"), 1, 7);
            let reads = (0..20_000).filter(|_| g.next().0 == OpCode::GetData).count();
            let share = reads as f64 / 20_000.0 * 1000.0;
            assert!((share - permille as f64).abs() < 20.0, "{permille}: {share}");
        }
    }

    #[test]
    fn create_delete_alternates_on_the_connections_own_znode() {
        let mut g = Generator::new(Workload::CreateDelete, 0, 10, Bytes::new(), 3, 1);
        let ops: Vec<OpCode> = (0..4).map(|_| g.next().0).collect();
        assert_eq!(ops, vec![OpCode::Create, OpCode::Delete, OpCode::Create, OpCode::Delete]);
        match g.next().1 {
            Request::Create { path, .. } => assert_eq!(path, "/rkbench/c3"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_watch_workload_has_one_writer() {
        let w = Generator::new(Workload::Watch, 500, 10, Bytes::new(), 0, 1);
        assert!(!w.is_watcher());
        let mut w = w;
        assert!((0..100).all(|_| w.next().0 == OpCode::SetData), "the writer only writes");
        assert!(Generator::new(Workload::Watch, 500, 10, Bytes::new(), 4, 1).is_watcher());
    }
}
