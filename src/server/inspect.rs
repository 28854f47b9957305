//! Inspection across cores, for the four-letter words and admin commands that list
//! connections, watches and sessions (`stat`, `cons`, `crst`, `dump`, `wchs`, `wchc`, `wchp`):
//! what one client core reports about itself, and the pipeline core's collection of every
//! core's report for the core that asked.
//! Rules: an inspection reads, it never changes data (`crst` zeroes connection statistics
//! only); it travels on the ordinary bounded channels (core → pipeline → every core →
//! pipeline → the asking core), so it never overtakes a commit; at most
//! `INSPECTIONS_PER_CORE_MAX` are in flight per core, and the pipeline drops a collection whose
//! asker is gone only when it completes (every core answers every inspection it receives).

use crate::proto::OpCode;
use std::collections::HashMap;
use std::net::SocketAddr;

/// Inspections one client core may have in flight; more four-letter words wait for a slot.
pub const INSPECTIONS_PER_CORE_MAX: usize = 8;

/// What an inspection collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inspect {
    /// Every connection with its statistics (`stat`, `cons`).
    Connections,
    /// Zero every connection's statistics (`crst`).
    ResetConnections,
    /// Connections, and the session deadlines of the member that tracks them (`dump`).
    Dump,
    /// Data watches, by session (`wchs`, `wchc`, `wchp`).
    Watches,
}

impl Inspect {
    /// The inspection a four-letter word needs, if it needs one.
    pub fn for_word(word: &str) -> Option<Inspect> {
        Some(match word {
            "stat" | "cons" => Inspect::Connections,
            "crst" => Inspect::ResetConnections,
            "dump" => Inspect::Dump,
            "wchs" | "wchc" | "wchp" => Inspect::Watches,
            _ => return None,
        })
    }
}

/// One connection, as `cons` prints it (ZooKeeper's ServerCnxn statistics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    /// Requests read and not yet answered.
    pub queued: u64,
    pub received: u64,
    pub sent: u64,
    /// 0 before the session is established.
    pub session_id: i64,
    /// ZooKeeper's four-letter name of the last operation answered ("NA" before any).
    pub last_op: &'static str,
    /// Wall-clock ms when the connection was accepted.
    pub established_ms: i64,
    pub timeout_ms: i32,
    /// -1 before any request with a client xid was answered.
    pub last_cxid: i64,
    pub last_zxid: i64,
    /// Monotonic ms (since the server started) of the last reply.
    pub last_response_ms: i64,
    pub last_latency_ms: u64,
    pub min_latency_ms: u64,
    pub avg_latency_ms: u64,
    pub max_latency_ms: u64,
    /// Monotonic ms (since the server started) the client was last heard from.
    pub last_heard_ms: i64,
}

/// ZooKeeper's name for an operation in `cons` (`lop=`), as its FinalRequestProcessor sets it.
pub fn last_op_name(op: OpCode) -> &'static str {
    use OpCode::*;
    match op {
        Ping => "PING",
        CreateSession => "SESS",
        Multi => "MULT",
        MultiRead => "MLTR",
        Create | Create2 | CreateTtl | CreateContainer => "CREA",
        Delete | DeleteContainer => "DELE",
        SetData => "SETD",
        Reconfig => "RECO",
        SetAcl => "SETA",
        CloseSession => "CLOS",
        Sync => "SYNC",
        Check => "CHEC",
        Exists => "EXIS",
        GetData => "GETD",
        SetWatches => "SETW",
        SetWatches2 => "STW2",
        AddWatch => "ADDW",
        GetAcl => "GETA",
        GetChildren | GetChildren2 => "GETC",
        GetAllChildrenNumber => "GETACN",
        CheckWatches => "CHKW",
        RemoveWatches => "REMW",
        WhoAmI => "HOMI",
        GetEphemerals => "GETE",
        Notification | Auth | Sasl | Error => "NA",
    }
}

/// One connection's statistics (ZooKeeper's ServerCnxn counters), kept by its core.
#[derive(Debug, Clone)]
pub struct ConnStats {
    pub received: u64,
    pub sent: u64,
    pub last_op: &'static str,
    pub last_cxid: i64,
    pub last_zxid: i64,
    pub last_response_ms: i64,
    pub last_latency_ms: u64,
    latency_min_ms: u64,
    latency_max_ms: u64,
    latency_total_ms: u64,
    answered: u64,
}

impl Default for ConnStats {
    fn default() -> Self {
        ConnStats {
            received: 0,
            sent: 0,
            last_op: "NA",
            last_cxid: -1,
            last_zxid: -1,
            last_response_ms: 0,
            last_latency_ms: 0,
            latency_min_ms: u64::MAX,
            latency_max_ms: 0,
            latency_total_ms: 0,
            answered: 0,
        }
    }
}

impl ConnStats {
    /// A request was answered at `now_ms` (monotonic) after `latency_ms`; a negative `cxid`
    /// (ping, a special xid) leaves the last client xid as it was.
    pub fn answered(&mut self, op: OpCode, cxid: i32, zxid: i64, now_ms: i64, latency_ms: u64) {
        if cxid >= 0 {
            self.last_cxid = cxid as i64;
        }
        self.last_zxid = zxid;
        self.last_op = last_op_name(op);
        self.last_response_ms = now_ms;
        self.last_latency_ms = latency_ms;
        self.latency_min_ms = self.latency_min_ms.min(latency_ms);
        self.latency_max_ms = self.latency_max_ms.max(latency_ms);
        self.latency_total_ms += latency_ms;
        self.answered += 1;
    }

    /// `crst`: as after ZooKeeper's resetStats.
    pub fn reset(&mut self) {
        *self = ConnStats::default();
    }

    /// (min, avg, max) latency in ms, 0 before any request (ZooKeeper's integer average).
    pub fn latencies_ms(&self) -> (u64, u64, u64) {
        if self.answered == 0 {
            return (0, 0, self.latency_max_ms);
        }
        (self.latency_min_ms, self.latency_total_ms / self.answered, self.latency_max_ms)
    }
}

/// What one client core reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreReport {
    pub core: u16,
    pub conns: Vec<ConnInfo>,
    /// Data-table watches (Watches only): path → sessions of the connections watching it.
    pub data_watches: Vec<(String, Vec<i64>)>,
    /// Sessions known from the tree with their timeouts (Dump only; what a follower's
    /// `dump` lists).
    pub sessions: Vec<(i64, i32)>,
    /// Ephemeral nodes by owner (Dump only; core 0 reports them, the tree is the same on
    /// every core).
    pub ephemerals: Vec<(i64, Vec<String>)>,
}

/// Session deadlines of the member that expires sessions (standalone or leader): deadline
/// (wall-clock ms) → session ids.
pub type SessionSets = Vec<(i64, Vec<i64>)>;

/// Every core's report, for the core that asked.
#[derive(Debug, Clone, Default)]
pub struct Inspected {
    pub reports: Vec<CoreReport>,
    /// Some on a standalone server or a leader (Dump only).
    pub session_sets: Option<SessionSets>,
}

impl Inspected {
    pub fn conns(&self) -> impl Iterator<Item = &ConnInfo> {
        self.reports.iter().flat_map(|r| r.conns.iter())
    }
}

/// The pipeline core's collections in progress, keyed by (asking core, its token).
#[derive(Debug)]
pub struct Collections {
    cores: usize,
    open: HashMap<(u16, u64), Inspected>,
}

impl Collections {
    pub fn new(cores: usize) -> Collections {
        assert!(cores > 0, "a server has at least one client core");
        Collections { cores, open: HashMap::new() }
    }

    /// A core asked: start collecting (the caller sends the question to every core).
    pub fn open(&mut self, asker: u16, token: u64, session_sets: Option<SessionSets>) {
        let bound = self.cores * INSPECTIONS_PER_CORE_MAX;
        assert!(self.open.len() < bound, "more than {bound} inspections in flight");
        self.open.insert((asker, token), Inspected { reports: Vec::with_capacity(self.cores), session_sets });
    }

    /// A core's report; the whole collection once every core has reported.
    pub fn report(&mut self, asker: u16, token: u64, report: CoreReport) -> Option<Inspected> {
        let done = {
            let c = self.open.get_mut(&(asker, token))?;
            c.reports.push(report);
            c.reports.len() == self.cores
        };
        if !done {
            return None;
        }
        let mut c = self.open.remove(&(asker, token))?;
        c.reports.sort_by_key(|r| r.core);
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_completes_when_every_core_reported() {
        let mut c = Collections::new(3);
        c.open(1, 7, None);
        c.open(2, 7, Some(vec![(1000, vec![5])]));
        assert!(c.report(1, 7, CoreReport { core: 2, ..Default::default() }).is_none());
        assert!(c.report(1, 7, CoreReport { core: 0, ..Default::default() }).is_none());
        // a report for a collection nobody opened is dropped
        assert!(c.report(0, 7, CoreReport::default()).is_none());
        let done = c.report(1, 7, CoreReport { core: 1, ..Default::default() }).expect("complete");
        assert_eq!(done.reports.iter().map(|r| r.core).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(done.session_sets.is_none());
        for core in 0..3 {
            let r = c.report(2, 7, CoreReport { core, ..Default::default() });
            assert_eq!(r.is_some(), core == 2);
            if let Some(r) = r {
                assert_eq!(r.session_sets, Some(vec![(1000, vec![5])]));
            }
        }
        assert!(c.open.is_empty());
    }

    #[test]
    fn connection_statistics_follow_zookeeper() {
        let mut c = ConnStats::default();
        assert_eq!((c.last_op, c.last_cxid, c.last_zxid), ("NA", -1, -1));
        assert_eq!(c.latencies_ms(), (0, 0, 0));
        c.answered(OpCode::GetData, 5, 0x10, 100, 3);
        c.answered(OpCode::Ping, -2, 0x11, 200, 1);
        assert_eq!((c.last_op, c.last_cxid, c.last_zxid, c.last_response_ms), ("PING", 5, 0x11, 200));
        c.answered(OpCode::Create2, 6, 0x12, 300, 8);
        assert_eq!(c.latencies_ms(), (1, 4, 8));
        assert_eq!((c.last_op, c.last_latency_ms), ("CREA", 8));
        c.received = 9;
        c.reset();
        assert_eq!((c.received, c.last_op, c.last_cxid), (0, "NA", -1));
        assert_eq!(c.latencies_ms(), (0, 0, 0));
    }

    #[test]
    fn words_that_need_every_core() {
        for w in ["stat", "cons", "crst", "dump", "wchs", "wchc", "wchp"] {
            assert!(Inspect::for_word(w).is_some(), "{w}");
        }
        for w in ["srvr", "mntr", "ruok", "conf", "envi", "dirs", "isro", "srst"] {
            assert!(Inspect::for_word(w).is_none(), "{w}");
        }
    }
}
