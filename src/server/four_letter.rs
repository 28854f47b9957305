//! ZooKeeper's four-letter words, answered on the client port: the text of each reply, from a
//! snapshot of what the server knows (`Facts`), in ZooKeeper 3.8's formats.
//! Rules: a word off `4lw.commands.whitelist` gets ZooKeeper's "is not executed" reply; while an
//! ensemble member is not serving, words that read its state get ZooKeeper's "not currently
//! serving" reply (`ruok`, `isro`, `conf`, `envi` still answer); nothing here writes data
//! (`srst` zeroes the statistics, as in ZooKeeper).

use super::inspect::{ConnInfo, Inspected};
use super::messages::ServerMode;
use super::stage_latency::{Snapshot, Stage};
use super::stats::{Stats, Totals};
use crate::config::Config;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The ZooKeeper release whose client-visible behaviour ringkeeper implements; reported as
/// the version so that clients which parse it (kazoo's `server_version`) pick that feature set.
pub const ZOOKEEPER_COMPAT_VERSION: &str = "3.8.0";

/// ZooKeeper's reply while an ensemble member is outside a quorum.
pub const NOT_SERVING: &str = "This ZooKeeper instance is not currently serving requests\n";

/// What the replies are made of, gathered by the core that answers.
pub struct Facts<'a> {
    pub config: &'a Config,
    pub mode: ServerMode,
    pub zxid: i64,
    pub node_count: usize,
    pub ephemerals: usize,
    /// Global sessions open.
    pub sessions: usize,
    /// Sessions local to this member.
    pub local_sessions: u64,
    pub data_size: i64,
    pub totals: Totals,
    /// Per core: connections, received, sent, outstanding, watches.
    pub cores: Vec<[u64; 5]>,
    /// Leader only: learners connected and synced.
    pub learners: (u64, u64),
    pub uptime_ms: u64,
    pub data_dir_bytes: u64,
    pub log_dir_bytes: u64,
    /// Leader only: proposal sizes in bytes, last/min/max (-1 before the first).
    pub proposal_sizes: Option<(i64, i64, i64)>,
    /// Every core's report, for the words that list connections, watches or sessions
    /// (`inspect::Inspect::for_word`).
    pub inspected: Option<&'a Inspected>,
    /// Wall-clock ms now (dump's dates).
    pub now_ms: i64,
    /// Every stage's histogram, merged over the cores (`Stats::stages`).
    pub stages: Vec<(Stage, Snapshot)>,
}

pub fn version() -> String {
    format!("{ZOOKEEPER_COMPAT_VERSION}-ringkeeper-{}", env!("CARGO_PKG_VERSION"))
}

pub fn whitelisted(config: &Config, cmd: &str) -> bool {
    // As ZooKeeper: `isro` is always allowed where read-only mode is on (clients probe it).
    (cmd == "isro" && config.read_only_mode_enabled) || config.four_letter_words.iter().any(|w| w == cmd || w == "*")
}

/// Words ringkeeper answers (the rest of ZooKeeper's list are refused as not supported).
pub const ANSWERED: &[&str] = &[
    "ruok", "srvr", "stat", "mntr", "conf", "cons", "crst", "dump", "envi", "isro", "dirs", "srst", "wchs", "wchc",
    "wchp",
];

/// The inspection `cmd` needs before it can be answered (none when it will be refused).
pub fn inspection_for(cmd: &str, config: &Config, mode: ServerMode) -> Option<super::inspect::Inspect> {
    if !whitelisted(config, cmd) || !mode.serving() {
        return None;
    }
    super::inspect::Inspect::for_word(cmd)
}

/// The reply to `cmd`, a word `proto::frame::four_letter_word` recognised; `srst` also
/// zeroes `stats`.
pub fn answer(cmd: &str, f: &Facts<'_>, stats: &Stats) -> String {
    if !whitelisted(f.config, cmd) {
        return format!("{cmd} is not executed because it is not in the whitelist.\n");
    }
    let serving = f.mode.serving();
    match cmd {
        "ruok" => "imok".into(),
        "isro" if f.mode == ServerMode::ReadOnly => "ro".into(),
        "isro" => "rw".into(),
        "conf" => conf(f.config),
        "envi" => envi(f.config),
        _ if !serving => NOT_SERVING.into(),
        "srvr" => srvr(f, None),
        "stat" => srvr(f, Some(f.inspected.map(|i| i.conns().collect()).unwrap_or_default())),
        "cons" => cons(f.inspected),
        "crst" => "Connection stats reset.\n".into(),
        "dump" => dump(f),
        "wchs" | "wchc" | "wchp" => watches(cmd, f.inspected),
        "mntr" => mntr(f),
        "dirs" => format!("datadir_size: {}\nlogdir_size: {}\n", f.data_dir_bytes, f.log_dir_bytes),
        "srst" => {
            stats.reset();
            "Server stats reset.\n".into()
        }
        other => format!("{other} is not supported by this server ({}).\n", version()),
    }
}

/// A double as Java prints it (ZooKeeper's averages): "0.0", "1.5", "0.4545".
fn java_double(x: f64) -> String {
    let x = (x * 10_000.0).round() / 10_000.0;
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Open file descriptors of this process, and its limit (RLIMIT_NOFILE).
fn file_descriptors() -> (u64, u64) {
    let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 0 };
    (open, max)
}

/// `srvr`, and `stat` (`clients` Some: the connections, listed briefly).
fn srvr(f: &Facts<'_>, clients: Option<Vec<&ConnInfo>>) -> String {
    let t = &f.totals;
    let mut list = String::new();
    if let Some(conns) = clients {
        list.push_str("Clients:\n");
        for c in conns {
            conn_line(&mut list, c, true);
            list.push('\n');
        }
        list.push('\n');
    }
    if f.mode == ServerMode::ReadOnly {
        list.insert_str(0, "READ-ONLY mode; serving only read-only clients\n");
    }
    let mut out = format!(
        "Zookeeper version: {}\n{list}Latency min/avg/max: {}/{}/{}\nReceived: {}\nSent: {}\nConnections: {}\n\
         Outstanding: {}\nZxid: {:#x}\nMode: {}\nNode count: {}\n",
        version(),
        t.latency_min_ms as u64,
        java_double(t.latency_avg_ms),
        t.latency_max_ms as u64,
        t.received,
        t.sent,
        t.connections,
        t.outstanding,
        f.zxid,
        f.mode.name(),
        f.node_count,
    );
    if let Some((last, min, max)) = f.proposal_sizes.filter(|_| f.mode == ServerMode::Leader) {
        let _ = writeln!(out, "Proposal sizes last/min/max: {last}/{min}/{max}");
    }
    out
}

/// One connection as ZooKeeper's ServerCnxn.dumpConnectionInfo prints it (no newline).
fn conn_line(out: &mut String, c: &ConnInfo, brief: bool) {
    let interest = if c.session_id != 0 { "1" } else { "0" };
    let _ = write!(out, " /{}[{interest}](queued={},recved={},sent={}", c.remote, c.queued, c.received, c.sent);
    if !brief && c.session_id != 0 {
        let _ = write!(out, ",sid={:#x},lop={},est={},to={}", c.session_id, c.last_op, c.established_ms, c.timeout_ms);
        if c.last_cxid >= 0 {
            let _ = write!(out, ",lcxid={:#x}", c.last_cxid);
        }
        let _ = write!(
            out,
            ",lzxid={:#x},lresp={},llat={},minlat={},avglat={},maxlat={}",
            c.last_zxid, c.last_response_ms, c.last_latency_ms, c.min_latency_ms, c.avg_latency_ms, c.max_latency_ms
        );
    }
    out.push(')');
}

fn cons(inspected: Option<&Inspected>) -> String {
    let mut out = String::new();
    for c in inspected.into_iter().flat_map(|i| i.conns()) {
        conn_line(&mut out, c, false);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// A wall-clock time as Java's Date.toString prints it, in UTC: "Mon Nov 23 10:00:00 UTC 2026".
pub fn java_date(ms: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::offline::civil_date(days);
    format!(
        "{} {} {day:02} {:02}:{:02}:{:02} UTC {year}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// `dump`: sessions (with their deadlines where this member expires them), ephemerals by
/// session, and connections by when they would be considered dead.
fn dump(f: &Facts<'_>) -> String {
    let empty = Inspected::default();
    let ins = f.inspected.unwrap_or(&empty);
    let mut out = String::from("SessionTracker dump:\n");
    match &ins.session_sets {
        Some(sets) => {
            let n: usize = sets.iter().map(|(_, ids)| ids.len()).sum();
            let _ = writeln!(out, "Session Sets ({})/({n}):", sets.len());
            for (deadline, ids) in sets {
                let _ = writeln!(out, "{} expire at {}:", ids.len(), java_date(*deadline));
                for id in ids {
                    let _ = writeln!(out, "\t{id:#x}");
                }
            }
        }
        None => {
            let sessions = ins.reports.first().map(|r| r.sessions.as_slice()).unwrap_or_default();
            let _ = writeln!(out, "Global Sessions({}):", sessions.len());
            for (id, timeout_ms) in sessions {
                let _ = writeln!(out, "{id:#x}\t{timeout_ms}ms");
            }
        }
    }
    out.push_str("ephemeral nodes dump:\n");
    let ephemerals: Vec<&(i64, Vec<String>)> = ins.reports.iter().flat_map(|r| r.ephemerals.iter()).collect();
    let _ = writeln!(out, "Sessions with Ephemerals ({}):", ephemerals.len());
    for (id, paths) in ephemerals {
        let _ = writeln!(out, "{id:#x}:");
        for p in paths {
            let _ = writeln!(out, "\t{p}");
        }
    }
    // Connections expire a timeout after they were last heard from (a connection without a
    // session: the minimum session timeout), in tick-sized buckets, as ZooKeeper's
    // ExpiryQueue groups them.
    out.push_str("Connections dump:\n");
    let tick = i64::from(f.config.tick_time_ms.max(1));
    let started_ms = f.now_ms - f.uptime_ms as i64;
    let mut sets: BTreeMap<i64, Vec<&ConnInfo>> = BTreeMap::new();
    for c in ins.conns() {
        let timeout = if c.session_id != 0 { c.timeout_ms } else { f.config.min_session_timeout_ms as i32 };
        let at = started_ms + c.last_heard_ms + i64::from(timeout);
        sets.entry((at / tick + 1) * tick).or_default().push(c);
    }
    let n: usize = sets.values().map(|v| v.len()).sum();
    let _ = writeln!(out, "Connections Sets ({})/({n}):", sets.len());
    for (at, conns) in &sets {
        let _ = writeln!(out, "{} expire at {}:", conns.len(), java_date(*at));
        for c in conns {
            let _ = writeln!(out, "\tip: /{} sessionId: {:#x}", c.remote, c.session_id);
        }
    }
    out
}

/// Every core's data watches: sessions by path, and paths by session (sorted).
pub type WatchesByPath<'a> = BTreeMap<&'a str, Vec<i64>>;
pub type WatchesBySession<'a> = BTreeMap<i64, Vec<&'a str>>;

pub fn data_watches(ins: &Inspected) -> (WatchesByPath<'_>, WatchesBySession<'_>) {
    let mut by_path: WatchesByPath<'_> = BTreeMap::new();
    for r in &ins.reports {
        for (path, sessions) in &r.data_watches {
            by_path.entry(path).or_default().extend(sessions);
        }
    }
    let mut by_session: WatchesBySession<'_> = BTreeMap::new();
    for (path, sessions) in &by_path {
        for s in sessions {
            by_session.entry(*s).or_default().push(path);
        }
    }
    (by_path, by_session)
}

/// `wchs` (a summary), `wchc` (paths by session), `wchp` (sessions by path): the data
/// watches (getData, exists, persistent), as ZooKeeper lists them.
fn watches(cmd: &str, inspected: Option<&Inspected>) -> String {
    let empty = Inspected::default();
    let (by_path, by_session) = data_watches(inspected.unwrap_or(&empty));
    let mut out = String::new();
    match cmd {
        "wchs" => {
            let total: usize = by_session.values().map(|p| p.len()).sum();
            let _ = writeln!(out, "{} connections watching {} paths", by_session.len(), by_path.len());
            let _ = writeln!(out, "Total watches:{total}");
        }
        "wchp" => {
            for (path, sessions) in &by_path {
                let _ = writeln!(out, "{path}");
                for s in sessions {
                    let _ = writeln!(out, "\t{s:#x}");
                }
            }
            out.push('\n');
        }
        _ => {
            for (s, paths) in &by_session {
                let _ = writeln!(out, "{s:#x}");
                for p in paths {
                    let _ = writeln!(out, "\t{p}");
                }
            }
            out.push('\n');
        }
    }
    out
}

fn mntr(f: &Facts<'_>) -> String {
    let t = &f.totals;
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(out, "{k}\t{v}");
    };
    kv("zk_version", version());
    kv("zk_server_state", f.mode.name().to_string());
    kv("zk_uptime", f.uptime_ms.to_string());
    kv("zk_avg_latency", java_double(t.latency_avg_ms));
    kv("zk_max_latency", (t.latency_max_ms as u64).to_string());
    kv("zk_min_latency", (t.latency_min_ms as u64).to_string());
    kv("zk_packets_received", t.received.to_string());
    kv("zk_packets_sent", t.sent.to_string());
    kv("zk_num_alive_connections", t.connections.to_string());
    kv("zk_outstanding_requests", t.outstanding.to_string());
    kv("zk_znode_count", f.node_count.to_string());
    kv("zk_watch_count", t.watches.to_string());
    kv("zk_ephemerals_count", f.ephemerals.to_string());
    kv("zk_global_sessions", f.sessions.to_string());
    kv("zk_local_sessions", f.local_sessions.to_string());
    kv("zk_approximate_data_size", f.data_size.to_string());
    kv("zk_last_zxid", format!("{:#x}", f.zxid));
    let (open_fds, max_fds) = file_descriptors();
    kv("zk_open_file_descriptor_count", open_fds.to_string());
    kv("zk_max_file_descriptor_count", max_fds.to_string());
    if f.mode == ServerMode::Leader {
        kv("zk_learners", f.learners.0.to_string());
        kv("zk_followers", f.learners.0.to_string());
        kv("zk_synced_followers", f.learners.1.to_string());
    }
    kv("rk_client_cores", f.cores.len().to_string());
    for (i, [conns, recv, sent, outstanding, watches]) in f.cores.iter().enumerate() {
        kv(&format!("rk_core_{i}_connections"), conns.to_string());
        kv(&format!("rk_core_{i}_packets_received"), recv.to_string());
        kv(&format!("rk_core_{i}_packets_sent"), sent.to_string());
        kv(&format!("rk_core_{i}_outstanding_requests"), outstanding.to_string());
        kv(&format!("rk_core_{i}_watch_count"), watches.to_string());
    }
    for (stage, snap) in &f.stages {
        let name = stage.name();
        kv(&format!("rk_stage_{name}_count"), snap.count().to_string());
        kv(&format!("rk_stage_{name}_p50_us"), snap.quantile_us(0.5).to_string());
        kv(&format!("rk_stage_{name}_p99_us"), snap.quantile_us(0.99).to_string());
        kv(&format!("rk_stage_{name}_max_us"), snap.max_us.to_string());
    }
    out
}

fn conf(c: &Config) -> String {
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(out, "{k}={v}");
    };
    kv("clientPort", c.client_port.to_string());
    kv("clientPortAddress", c.client_port_address.to_string());
    kv("secureClientPort", "-1".into());
    kv("dataDir", c.data_dir.display().to_string());
    kv("dataLogDir", c.data_log_dir.display().to_string());
    kv("tickTime", c.tick_time_ms.to_string());
    kv("maxClientCnxns", c.max_client_cnxns.to_string());
    kv("minSessionTimeout", c.min_session_timeout_ms.to_string());
    kv("maxSessionTimeout", c.max_session_timeout_ms.to_string());
    kv("snapCount", c.snap_count.to_string());
    kv("forceSync", if c.force_sync { "yes" } else { "no" }.into());
    if c.is_ensemble() {
        kv("initLimit", c.init_limit_ticks.to_string());
        kv("syncLimit", c.sync_limit_ticks.to_string());
        for s in &c.servers {
            kv(&format!("server.{}", s.id), s.value());
        }
    }
    kv("ringkeeper.clientCores", c.client_cores.to_string());
    kv("ringkeeper.clientCoreOnPipeline", c.client_core_on_pipeline.to_string());
    out
}

fn envi(c: &Config) -> String {
    let mut out = String::from("Environment:\n");
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(out, "{k}={v}");
    };
    kv("zookeeper.version", version());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    kv("host.name", host.trim().to_string());
    kv("os.name", "Linux".into());
    kv("os.arch", std::env::consts::ARCH.into());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    kv("os.version", release.trim().to_string());
    kv("user.dir", std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default());
    kv("ringkeeper.clientCores", c.client_cores.to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(cmd: &str, f: &Facts<'_>) -> String {
        answer(cmd, f, &Stats::new(1))
    }

    pub(super) fn facts(config: &Config, mode: ServerMode) -> Facts<'_> {
        Facts {
            config,
            mode,
            zxid: 0x1_0000_0007,
            node_count: 9,
            ephemerals: 2,
            sessions: 3,
            local_sessions: 4,
            data_size: 120,
            totals: Totals {
                received: 10,
                sent: 11,
                connections: 3,
                outstanding: 1,
                watches: 4,
                latency_min_ms: 0.2,
                latency_avg_ms: 1.5,
                latency_max_ms: 7.9,
            },
            cores: vec![[3, 10, 11, 1, 4]],
            learners: (2, 1),
            uptime_ms: 5000,
            data_dir_bytes: 4096,
            log_dir_bytes: 8192,
            proposal_sizes: Some((10, 5, 20)),
            inspected: None,
            now_ms: 1_795_427_200_000,
            stages: {
                let s = Stats::new(1);
                s.pipeline_stages.get(Stage::LogFsync).record_us_n(250, 3);
                s.pipeline_stages.get(Stage::LogFsync).record_us_n(4_000, 1);
                s.stages()
            },
        }
    }

    #[test]
    fn replies_follow_zookeepers_formats_and_the_whitelist() {
        let mut c = Config::embedded_default();
        let f = facts(&c, ServerMode::Leader);
        assert_eq!(ans("ruok", &f), "ruok is not executed because it is not in the whitelist.\n");
        let srvr = ans("srvr", &f);
        assert_eq!(
            srvr,
            format!(
                "Zookeeper version: {}\nLatency min/avg/max: 0/1.5/7\nReceived: 10\nSent: 11\nConnections: 3\n\
                 Outstanding: 1\nZxid: 0x100000007\nMode: leader\nNode count: 9\n\
                 Proposal sizes last/min/max: 10/5/20\n",
                version()
            )
        );
        c.four_letter_words = vec!["*".into()];
        let f = facts(&c, ServerMode::Leader);
        assert_eq!(ans("ruok", &f), "imok");
        let mntr = ans("mntr", &f);
        for line in
            ["zk_server_state\tleader", "zk_znode_count\t9", "zk_synced_followers\t1", "rk_core_0_watch_count\t4"]
                .into_iter()
                .chain([
                    "rk_stage_log_fsync_count\t4",
                    "rk_stage_log_fsync_p50_us\t255",
                    "rk_stage_log_fsync_p99_us\t4000",
                    "rk_stage_log_fsync_max_us\t4000",
                    "rk_stage_read_count\t0",
                    "rk_stage_read_p99_us\t0",
                ])
        {
            assert!(mntr.contains(&format!("{line}\n")), "{line} in\n{mntr}");
        }
        assert!(mntr.starts_with("zk_version\t3.8.0-ringkeeper-"));
        assert!(ans("envi", &f).contains("\nzookeeper.version=3.8.0-ringkeeper-"));
        assert!(ans("conf", &f).contains("\nmaxClientCnxns=60\n"));
        assert_eq!(ans("dirs", &f), "datadir_size: 4096\nlogdir_size: 8192\n");
        let f = facts(&c, ServerMode::NotServing);
        assert_eq!(ans("srvr", &f), NOT_SERVING);
        assert_eq!(ans("mntr", &f), NOT_SERVING);
        assert_eq!(ans("ruok", &f), "imok");
        assert!(ans("gtmk", &facts(&c, ServerMode::Standalone)).contains("not supported"));
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;

    pub fn facts(config: &Config) -> Facts<'_> {
        super::tests::facts(config, ServerMode::Standalone)
    }
}

#[cfg(test)]
mod inspection_tests {
    use super::super::inspect::{ConnInfo, CoreReport, Inspected};
    use super::*;

    fn conn(port: u16, session_id: i64) -> ConnInfo {
        ConnInfo {
            remote: format!("127.0.0.1:{port}").parse().unwrap(),
            queued: 0,
            received: 4,
            sent: 5,
            session_id,
            last_op: "GETD",
            established_ms: 1_795_427_000_000,
            timeout_ms: 30_000,
            last_cxid: if session_id == 0 { -1 } else { 3 },
            last_zxid: 0x10,
            last_response_ms: 900,
            last_latency_ms: 1,
            min_latency_ms: 0,
            avg_latency_ms: 1,
            max_latency_ms: 2,
            last_heard_ms: 800,
        }
    }

    #[test]
    fn connections_watches_and_sessions_in_zookeepers_formats() {
        let mut config = Config::embedded_default();
        config.four_letter_words = vec!["*".into()];
        config.tick_time_ms = 2000;
        let ins = Inspected {
            reports: vec![
                CoreReport {
                    core: 0,
                    conns: vec![conn(40000, 0x1000_0000_0000_0001), conn(40001, 0)],
                    data_watches: vec![
                        ("/a".into(), vec![0x1000_0000_0000_0001]),
                        ("/b".into(), vec![0x1000_0000_0000_0001]),
                    ],
                    sessions: vec![(0x1000_0000_0000_0001, 30_000)],
                    ephemerals: vec![(0x1000_0000_0000_0001, vec!["/e".into()])],
                },
                CoreReport {
                    core: 1,
                    conns: vec![conn(40002, 0x1000_0000_0000_0002)],
                    data_watches: vec![("/a".into(), vec![0x1000_0000_0000_0002])],
                    ..Default::default()
                },
            ],
            session_sets: Some(vec![(1_795_427_230_000, vec![0x1000_0000_0000_0001, 0x1000_0000_0000_0002])]),
        };
        let mut f = super::tests_support::facts(&config);
        f.inspected = Some(&ins);
        let stats = Stats::new(2);
        let cons = answer("cons", &f, &stats);
        assert_eq!(
            cons.lines().next().unwrap(),
            " /127.0.0.1:40000[1](queued=0,recved=4,sent=5,sid=0x1000000000000001,lop=GETD,est=1795427000000,\
             to=30000,lcxid=0x3,lzxid=0x10,lresp=900,llat=1,minlat=0,avglat=1,maxlat=2)"
        );
        assert_eq!(cons.lines().nth(1).unwrap(), " /127.0.0.1:40001[0](queued=0,recved=4,sent=5)");
        assert!(cons.ends_with(")\n\n"), "{cons:?}");
        let stat = answer("stat", &f, &stats);
        assert!(stat.contains("\nClients:\n /127.0.0.1:40000[1](queued=0,recved=4,sent=5)\n"), "{stat}");
        assert!(stat.contains("(queued=0,recved=4,sent=5)\n\nLatency min/avg/max:"), "{stat}");
        assert_eq!(answer("wchs", &f, &stats), "2 connections watching 2 paths\nTotal watches:3\n");
        assert_eq!(
            answer("wchp", &f, &stats),
            "/a\n\t0x1000000000000001\n\t0x1000000000000002\n/b\n\t0x1000000000000001\n\n"
        );
        assert_eq!(answer("wchc", &f, &stats), "0x1000000000000001\n\t/a\n\t/b\n0x1000000000000002\n\t/a\n\n");
        let dump = answer("dump", &f, &stats);
        assert!(
            dump.starts_with(
                "SessionTracker dump:\nSession Sets (1)/(2):\n2 expire at Mon Nov 23 09:47:10 UTC 2026:\n\
                 \t0x1000000000000001\n\t0x1000000000000002\nephemeral nodes dump:\nSessions with Ephemerals (1):\n\
                 0x1000000000000001:\n\t/e\nConnections dump:\nConnections Sets ("
            ),
            "{dump}"
        );
        assert!(dump.contains("\tip: /127.0.0.1:40002 sessionId: 0x1000000000000002\n"), "{dump}");
        let follower = Inspected { session_sets: None, ..ins.clone() };
        f.inspected = Some(&follower);
        assert!(answer("dump", &f, &stats)
            .starts_with("SessionTracker dump:\nGlobal Sessions(1):\n0x1000000000000001\t30000ms\n"));
        assert_eq!(answer("crst", &f, &stats), "Connection stats reset.\n");
    }

    #[test]
    fn java_dates() {
        assert_eq!(java_date(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(java_date(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
        assert_eq!(java_date(1_795_427_230_000), "Mon Nov 23 09:47:10 UTC 2026");
    }
}
