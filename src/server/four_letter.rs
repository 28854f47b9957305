//! ZooKeeper's four-letter words, answered on the client port: the text of each reply, from a
//! snapshot of what the server knows (`Facts`), in ZooKeeper 3.8's formats.
//! Rules: a word off `4lw.commands.whitelist` gets ZooKeeper's "is not executed" reply; while an
//! ensemble member is not serving, words that read its state get ZooKeeper's "not currently
//! serving" reply (`ruok`, `isro`, `conf`, `envi` still answer); nothing here writes data
//! (`srst` zeroes the statistics, as in ZooKeeper).

use super::messages::ServerMode;
use super::stats::{Stats, Totals};
use crate::config::Config;
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
    pub data_size: i64,
    pub totals: Totals,
    /// Per core: connections, received, sent, outstanding, watches.
    pub cores: Vec<[u64; 5]>,
    /// Leader only: learners connected and synced.
    pub learners: (u64, u64),
    pub uptime_ms: u64,
    pub data_dir_bytes: u64,
    pub log_dir_bytes: u64,
}

pub fn version() -> String {
    format!("{ZOOKEEPER_COMPAT_VERSION}-ringkeeper-{}", env!("CARGO_PKG_VERSION"))
}

fn whitelisted(config: &Config, cmd: &str) -> bool {
    config.four_letter_words.iter().any(|w| w == cmd || w == "*")
}

/// Words ringkeeper answers (the rest of ZooKeeper's list are refused as not supported).
pub const ANSWERED: &[&str] = &["ruok", "srvr", "mntr", "conf", "envi", "isro", "dirs", "srst"];

/// The reply to `cmd`, a word `proto::frame::four_letter_word` recognised; `srst` also
/// zeroes `stats`.
pub fn answer(cmd: &str, f: &Facts<'_>, stats: &Stats) -> String {
    if !whitelisted(f.config, cmd) {
        return format!("{cmd} is not executed because it is not in the whitelist.\n");
    }
    let serving = f.mode.serving();
    match cmd {
        "ruok" => "imok".into(),
        "isro" => "rw".into(),
        "conf" => conf(f.config),
        "envi" => envi(f.config),
        _ if !serving => NOT_SERVING.into(),
        "srvr" => srvr(f),
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

fn srvr(f: &Facts<'_>) -> String {
    let t = &f.totals;
    format!(
        "Zookeeper version: {}\nLatency min/avg/max: {}/{}/{}\nReceived: {}\nSent: {}\nConnections: {}\n\
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
    )
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
            let role = if s.observer { "observer" } else { "participant" };
            let client = s.client.as_ref().map_or(String::new(), |(h, p)| format!(";{h}:{p}"));
            kv(&format!("server.{}", s.id), format!("{}:{}:{}:{role}{client}", s.host, s.quorum_port, s.election_port));
        }
    }
    kv("ringkeeper.clientCores", c.client_cores.to_string());
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

    fn facts(config: &Config, mode: ServerMode) -> Facts<'_> {
        Facts {
            config,
            mode,
            zxid: 0x1_0000_0007,
            node_count: 9,
            ephemerals: 2,
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
                 Outstanding: 1\nZxid: 0x100000007\nMode: leader\nNode count: 9\n",
                version()
            )
        );
        c.four_letter_words = vec!["*".into()];
        let f = facts(&c, ServerMode::Leader);
        assert_eq!(ans("ruok", &f), "imok");
        let mntr = ans("mntr", &f);
        for line in
            ["zk_server_state\tleader", "zk_znode_count\t9", "zk_synced_followers\t1", "rk_core_0_watch_count\t4"]
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
        assert!(ans("wchc", &facts(&c, ServerMode::Standalone)).contains("not supported"));
    }
}
