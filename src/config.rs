//! zoo.cfg parsing and validation. The file is a Java properties file, read the way
//! `java.util.Properties.load` reads it: `key=value`, `key: value` or `key value`; `#` or `!`
//! starts a comment line; a line ending in an odd number of backslashes continues on the
//! next; `\t \n \r \f \uXXXX` escapes; then, as ZooKeeper does, key and value are trimmed.
//! ZooKeeper's zoo.cfg keys keep their names. Settings ZooKeeper reads as Java system
//! properties (snapCount, forceSync, jute.maxbuffer, …) are accepted bare or with the
//! `zookeeper.` prefix, since ZooKeeper prefixes zoo.cfg keys it does not parse itself.
//! ringkeeper's own core-layout keys are prefixed `ringkeeper.`.
//! Rules: an unknown key is a warning, never an error; a key ZooKeeper knows but a standalone
//! ringkeeper does not use is accepted quietly; a repeated key warns and the last value wins;
//! a bad value is an error naming the file, line and key; nothing here panics on user input;
//! every default is ZooKeeper's unless the key is ringkeeper's own. Warnings are returned to
//! the caller, which logs them.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// The embedded default configuration (what `cargo run --release` serves with).
pub const EMBEDDED_DEFAULT_CFG: &str = include_str!("../configs/standalone.cfg");
/// How the embedded default is named in messages.
pub const EMBEDDED_DEFAULT_ORIGIN: &str = "configs/standalone.cfg (embedded)";

/// tickTime: default, and the largest accepted (a longer tick is surely a units mistake).
pub const TICK_TIME_MS_DEFAULT: u32 = 2000;
pub const TICK_TIME_MS_MAX: u32 = 3_600_000;
/// Default session timeout bounds, in ticks (ZooKeeper's 2 × and 20 × tickTime).
pub const MIN_SESSION_TIMEOUT_TICKS_DEFAULT: u32 = 2;
pub const MAX_SESSION_TIMEOUT_TICKS_DEFAULT: u32 = 20;
/// Session timeouts travel as a signed 32-bit number of milliseconds.
pub const SESSION_TIMEOUT_MS_MAX: u32 = i32::MAX as u32;
pub const CLIENT_PORT_DEFAULT: u16 = 2181;
/// Connections per client IP (across all client cores); 0 = unlimited.
pub const MAX_CLIENT_CNXNS_DEFAULT: u32 = 60;
/// maxCnxns: client connections of the whole server; 0 = unlimited (ZooKeeper's default).
pub const MAX_CNXNS_DEFAULT: u32 = 0;
/// globalOutstandingLimit: requests in process across the server past which connections
/// with requests in process stop being read (ZooKeeper's default).
pub const GLOBAL_OUTSTANDING_LIMIT_DEFAULT: u32 = 1000;
/// nio.sessionlessCnxnTimeout: how long a connection may stay without a session (no
/// ConnectRequest, or one not answered yet) before it is closed (ZooKeeper's default).
pub const SESSIONLESS_CNXN_TIMEOUT_MS_DEFAULT: u64 = 10_000;
pub const SESSIONLESS_CNXN_TIMEOUT_MS_MAX: u64 = i32::MAX as u64;
pub const SNAP_COUNT_DEFAULT: u64 = 100_000;
/// snapCount's least value: a smaller one (zero and negatives too) is raised to it with a
/// warning, as ZooKeeper's `getSnapCount` does.
pub const SNAP_COUNT_MIN: u64 = 2;
/// commitLogCount: committed txns an ensemble member keeps in memory (ZooKeeper's default,
/// and its minimum: a smaller value is raised to it).
pub const COMMIT_LOG_COUNT_DEFAULT: u64 = 500;
/// snapSizeLimitInKb's default, in bytes (ZooKeeper's 4 GiB): a snapshot is also taken once
/// the txns logged since the last one reach this many bytes.
pub const SNAP_SIZE_LIMIT_BYTES_DEFAULT: u64 = 4 * 1024 * 1024 * 1024;
/// snapshotSizeFactor: a follower behind the in-memory txns is sent a DIFF read from the log on
/// disk when those txns are at most this fraction of the newest snapshot's size (ZooKeeper's
/// default; negative: never, values above 1 fall back to it).
pub const SNAPSHOT_SIZE_FACTOR_DEFAULT: f64 = 0.33;
/// preAllocSize is given in KiB, as in ZooKeeper.
pub const PRE_ALLOC_SIZE_KIB_DEFAULT: u64 = 65_536;
pub const PRE_ALLOC_SIZE_KIB_MIN: u64 = 4;
pub const PRE_ALLOC_SIZE_KIB_MAX: u64 = 16 * 1024 * 1024;
/// ZooKeeper keeps at least this many snapshots when purging (and raises lower settings).
pub const SNAP_RETAIN_COUNT_MIN: u32 = 3;
/// jute.maxbuffer: default, and bounds (below the minimum no real client works, above the
/// maximum a frame is absurd).
pub const JUTE_MAX_BUFFER_BYTES_DEFAULT: usize = 0xfffff;
pub const JUTE_MAX_BUFFER_BYTES_MIN: usize = 1024;
pub const JUTE_MAX_BUFFER_BYTES_MAX: usize = 256 * 1024 * 1024;
/// znode.container.checkIntervalMs default (ZooKeeper's).
pub const CONTAINER_CHECK_INTERVAL_MS_DEFAULT: u64 = 60_000;
pub const CONTAINER_CHECK_INTERVAL_MS_MAX: u64 = 24 * 3_600_000;
/// ZooKeeper's default 4lw.commands.whitelist.
pub const FOUR_LETTER_WORDS_DEFAULT: &[&str] = &["srvr"];
/// initLimit / syncLimit defaults, in ticks.
pub const INIT_LIMIT_TICKS_DEFAULT: u32 = 10;
pub const SYNC_LIMIT_TICKS_DEFAULT: u32 = 5;
/// Client cores per server at most.
pub const CLIENT_CORES_MAX: usize = 256;
/// The largest CPU number accepted (glibc's CPU_SETSIZE is 1024).
pub const CPU_INDEX_MAX: usize = 1023;
/// ringkeeper.channelDepth: default and bounds, in messages.
pub const CHANNEL_DEPTH_DEFAULT: usize = 1024;
pub const CHANNEL_DEPTH_MAX: usize = 1 << 20;
/// ringkeeper.batchTxnsMax: default and bound, in txns per log batch.
pub const BATCH_TXNS_DEFAULT: usize = 1024;
pub const BATCH_TXNS_LIMIT: usize = 1 << 16;
/// ringkeeper.batchBytesMax: default and bounds, in record bytes per log batch. A batch closes
/// before the txn that would take it past this. The largest txn a server makes
/// (`txn_record_bytes_max`) must fit an empty batch: the default is raised to that, a smaller
/// setting is an error. The format's `BATCH_BODY_BYTES_MAX` holds the largest txn of any
/// jute.maxbuffer (checked below at compile time).
pub const BATCH_BYTES_DEFAULT: usize = 64 * 1024 * 1024;
pub const BATCH_BYTES_MIN: usize = 4096;
pub const BATCH_BYTES_LIMIT: usize = crate::storage::log::BATCH_BODY_BYTES_MAX;
const _: () =
    assert!(crate::txn::codec::TXN_RECORD_BYTES_LIMIT + crate::storage::log::RECORD_PREFIX_BYTES <= BATCH_BYTES_LIMIT);
/// ringkeeper.ioMemoryBytes: default and bounds (it is locked memory, per executor).
pub const IO_MEMORY_BYTES_DEFAULT: usize = 2 * 1024 * 1024;
pub const IO_MEMORY_BYTES_MIN: usize = 64 * 1024;
pub const IO_MEMORY_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// ringkeeper.ringDepth: default and bounds, in io_uring entries (a power of two).
pub const RING_DEPTH_DEFAULT: usize = 128;
pub const RING_DEPTH_MIN: usize = 8;
pub const RING_DEPTH_MAX: usize = 32_768;
/// ringkeeper.spinBeforeParkUs: how long an idle executor polls before it sleeps, in µs.
/// Waking a sleeping thread is the largest cost of a lone request crossing cores.
pub const SPIN_BEFORE_PARK_US_DEFAULT: u64 = 100;
pub const SPIN_BEFORE_PARK_US_MAX: u64 = 10_000;

#[derive(Debug, Clone)]
pub struct Config {
    /// tickTime: the basic time unit.
    pub tick_time_ms: u32,
    /// dataDir: snapshots (and the txn log unless dataLogDir is set). Relative = to the cwd.
    pub data_dir: PathBuf,
    /// dataLogDir: the txn log; defaults to data_dir.
    pub data_log_dir: PathBuf,
    pub client_port: u16,
    pub client_port_address: IpAddr,
    /// Whether `clientPort` was set (a member's server line may give the client address
    /// instead: `member_client_addr`).
    pub client_port_given: bool,
    /// maxClientCnxns: connections per client IP, across all client cores; 0 = unlimited.
    pub max_client_cnxns: u32,
    /// maxCnxns: client connections of the whole server; 0 = unlimited.
    pub max_cnxns: u32,
    /// globalOutstandingLimit (a leader of more than 2 voters divides it by voters − 1).
    pub global_outstanding_limit: u32,
    /// nio.sessionlessCnxnTimeout, in ms.
    pub sessionless_cnxn_timeout_ms: u64,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    /// snapCount: txns between snapshots.
    pub snap_count: u64,
    /// commitLogCount (`zookeeper.commitLogCount`): committed txns kept in memory for DIFFs.
    pub commit_log_count: u64,
    /// snapSizeLimitInKb (`zookeeper.snapSizeLimitInKb`), in bytes: a snapshot is also taken
    /// once the txns since the last one reach this size (0: by snapCount only).
    pub snap_size_limit_bytes: u64,
    /// snapshotSizeFactor (`zookeeper.snapshotSizeFactor`): see SNAPSHOT_SIZE_FACTOR_DEFAULT.
    pub snapshot_size_factor: f64,
    /// preAllocSize (given in KiB), in bytes.
    pub pre_alloc_size_bytes: u64,
    /// autopurge.snapRetainCount, at least SNAP_RETAIN_COUNT_MIN.
    pub autopurge_snap_retain_count: u32,
    /// autopurge.purgeInterval; 0 = never purge.
    pub autopurge_purge_interval_hours: u32,
    pub force_sync: bool,
    /// ringkeeper.logLevel: a tracing filter ("info", "warn,ringkeeper::zab=debug"); RUST_LOG,
    /// when set, wins.
    pub log_level: Option<String>,
    /// admin.enableServer / admin.serverAddress / admin.serverPort: the HTTP admin server
    /// (`/commands`, `/metrics`); defaults: on, 127.0.0.1 (ZooKeeper's is 0.0.0.0: an operator
    /// who wants it reachable says so), 8080.
    pub admin_enabled: bool,
    pub admin_addr: SocketAddr,
    /// zookeeper.admin.snapshot.enabled / zookeeper.admin.restore.enabled (default on, as
    /// ZooKeeper 3.9): the admin `snapshot` and `restore` commands; off, they answer 503.
    pub admin_snapshot_enabled: bool,
    pub admin_restore_enabled: bool,
    /// zookeeper.admin.rateLimiterIntervalInMS: one `snapshot` (and one `restore`) per this
    /// interval, others get 429 (ZooKeeper's default: 5 minutes).
    pub admin_rate_limit_interval_ms: u64,
    /// fsync.warningthresholdms: a log fdatasync slower than this is logged as a warning.
    pub fsync_warning_threshold_ms: u64,
    /// zookeeper.extendedTypesEnabled: TTL nodes.
    pub extended_types_enabled: bool,
    /// readonlymode.enabled (ZooKeeper reads it as a Java property only, so
    /// `-Dreadonlymode.enabled=true` in SERVER_JVMFLAGS counts too: `load`): an ensemble member
    /// without a quorum serves read-only sessions (`server::read_only`).
    pub read_only_mode_enabled: bool,
    /// reconfigEnabled: whether a client may ask for a reconfiguration (opcode 16; off by
    /// default, as in ZooKeeper 3.5.3+).
    pub reconfig_enabled: bool,
    /// standaloneEnabled (ZooKeeper's default true): a reconfiguration must leave at least 2
    /// voters (else 1).
    pub standalone_enabled: bool,
    /// dynamicConfigFile: where the `server.N` lines and the config version live
    /// (`zoo.cfg.dynamic.<version>`); `load` reads them from it.
    pub dynamic_config_file: Option<PathBuf>,
    /// The `version=` of the dynamic config file, else the version its name ends with
    /// (`.dynamic.<hex>`, as ZooKeeper names them); 0 without one.
    pub dynamic_config_version: i64,
    /// The file this configuration was loaded from (`load`): a committed reconfiguration is
    /// written beside it as `<file>.dynamic.<version>`, as ZooKeeper names its files.
    pub config_path: Option<PathBuf>,
    /// localSessionsEnabled: an ensemble member makes and closes new sessions itself, without
    /// a txn (`local_session`); localSessionsUpgradingEnabled: such a session that creates an
    /// ephemeral becomes global first (else the create fails with EphemeralOnLocalSession).
    pub local_sessions_enabled: bool,
    pub local_sessions_upgrading_enabled: bool,
    /// audit.enable: ZooKeeper's audit log (`server::audit`).
    pub audit_enabled: bool,
    /// ringkeeper.auditLogFile: where audit lines go (appended); None: stderr.
    pub audit_log_file: Option<PathBuf>,
    /// zookeeper.enforceQuota: a create or setData past a quota's hard limit is refused with
    /// QuotaExceeded (soft limits are logged); off, quotas are only counted.
    pub enforce_quota: bool,
    pub jute_max_buffer_bytes: usize,
    /// zookeeper.DigestAuthenticationProvider.superDigest: `user:base64(sha1(user:password))`.
    pub super_digest: Option<String>,
    /// znode.container.checkIntervalMs: how often empty containers and expired TTL nodes are reaped.
    pub container_check_interval_ms: u64,
    /// 4lw.commands.whitelist ("*" = all).
    pub four_letter_words: Vec<String>,
    /// initLimit / syncLimit, for the ensemble.
    pub init_limit_ticks: u32,
    pub sync_limit_ticks: u32,
    /// The client port's TLS (`secureClientPort`, `client.portUnification`, `ssl.*`).
    pub client_tls: Option<crate::tls::ClientTls>,
    /// The peer port's TLS (`sslQuorum`, `portUnification`, `ssl.quorum.*`).
    pub quorum_tls: Option<crate::tls::QuorumTls>,
    /// The admin server's HTTPS (`admin.forceHttps`, `admin.portUnification`,
    /// `admin.needClientAuth`, with the `ssl.quorum.*` stores).
    pub admin_tls: Option<crate::tls::AdminTls>,
    /// Client SASL: the JAAS file and section (`java.security.auth.login.config`, or
    /// `SERVER_JVMFLAGS` when the file is loaded); None = no SASL server (a null token).
    pub sasl_keys: Option<crate::sasl::SaslKeys>,
    /// `superUser`: the SASL id that also gets `super`.
    pub sasl_super_user: Option<String>,
    /// `kerberos.removeHostFromPrincipal` / `kerberos.removeRealmFromPrincipal`.
    pub sasl_rules: crate::sasl::PrincipalRules,
    /// The users read from the JAAS file (`Config::load`; `load_sasl`).
    pub sasl: Option<std::sync::Arc<crate::sasl::ServerSasl>>,
    /// Quorum SASL's keys (`quorum.auth.enableSasl=true` and the rest of `quorum.auth.*`,
    /// `quorum.cnxn.threads.size`); None = off.
    pub quorum_sasl_keys: Option<crate::sasl::quorum::QuorumSaslKeys>,
    /// Quorum SASL with its JAAS sections read (`load_sasl`).
    pub quorum_sasl: Option<std::sync::Arc<crate::sasl::quorum::QuorumSasl>>,
    /// `enforce.auth.enabled` + `enforce.auth.schemes`, or `sessionRequireClientSASLAuth`
    /// (= `sasl`): a connection must hold an id of one of these schemes before any request
    /// but auth and sasl; empty = not enforced.
    pub enforce_auth_schemes: Vec<String>,
    /// `server.N=…` lines, kept raw for the ensemble, in file order (a repeated N replaces).
    pub servers: Vec<ServerSpec>,
    /// ringkeeper.clientCores: default (available CPUs − 1).max(1), or the length of clientCpus.
    pub client_cores: usize,
    /// ringkeeper.clientCoreOnPipeline: the one client core runs on the pipeline core's thread
    /// (one thread per server, for several servers on a small machine); default false.
    pub client_core_on_pipeline: bool,
    pub cpu_pinning: bool,
    /// ringkeeper.clientCpus: one CPU per client core.
    pub client_cpus: Option<Vec<usize>>,
    /// ringkeeper.pipelineCpu: the server uses CPU 0 when unset.
    pub pipeline_cpu: Option<usize>,
    pub channel_depth: usize,
    pub batch_txns_max: usize,
    /// Record bytes per log batch at most; always holds the largest txn (`txn_bytes_max`).
    pub batch_bytes_max: usize,
    pub io_memory_bytes: usize,
    pub ring_depth: usize,
    pub spin_before_park_us: u64,
    /// ringkeeper.testing.panicOnPath: a fault hook for tests (a read of this path panics
    /// the client core); the server refuses to start with it unless RINGKEEPER_TESTING=1.
    pub testing_panic_on_path: Option<String>,
}

/// One quorum address of a server: `host:quorumPort:electionPort`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddr {
    pub host: String,
    pub quorum_port: u16,
    /// Checked (distinct from the quorum port) and shown, never listened on: ringkeeper runs
    /// election on the quorum connection (`docs/peer-protocol.md`, "One port").
    pub election_port: u16,
}

/// One `server.N=addr[|addr…][:participant|observer][;[clientHost:]clientPort]`, where an addr is
/// `host:quorumPort:electionPort` and the role may follow any address (all must agree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub id: u64,
    /// The server's quorum addresses, at least one: dialed in this order, the next one when a
    /// connection fails; the server listens on all of its own.
    pub addrs: Vec<ServerAddr>,
    pub observer: bool,
    /// The client address, if given: host ("" for all addresses) and port.
    pub client: Option<(String, u16)>,
}

impl ServerSpec {
    /// The first quorum address (every spec has one).
    pub fn first(&self) -> &ServerAddr {
        &self.addrs[0]
    }

    /// The line's value as ZooKeeper writes it (`QuorumServer.toString`): every address, the
    /// role, and the client address with `0.0.0.0` for "all addresses".
    pub fn value(&self) -> String {
        let addrs: Vec<String> = self
            .addrs
            .iter()
            .map(|a| format!("{}:{}:{}", bracketed(&a.host), a.quorum_port, a.election_port))
            .collect();
        let role = if self.observer { "observer" } else { "participant" };
        let client = match &self.client {
            None => String::new(),
            Some((h, p)) => format!(";{}:{p}", if h.is_empty() { "0.0.0.0".into() } else { bracketed(h) }),
        };
        format!("{}:{role}{client}", addrs.join("|"))
    }
}

/// An IPv6 literal in brackets, as it must be written before a `:port`.
fn bracketed(host: &str) -> std::borrow::Cow<'_, str> {
    if host.contains(':') {
        format!("[{host}]").into()
    } else {
        host.into()
    }
}

/// zookeeper.admin.rateLimiterIntervalInMS default (ZooKeeper's: 5 minutes).
pub const ADMIN_RATE_LIMIT_INTERVAL_MS_DEFAULT: u64 = 300_000;
/// The largest zookeeper.admin.rateLimiterIntervalInMS taken (ZooKeeper parses an int).
pub const ADMIN_RATE_LIMIT_INTERVAL_MS_MAX: u64 = i32::MAX as u64;

/// admin.serverPort default (ZooKeeper's).
pub const ADMIN_PORT_DEFAULT: u16 = 8080;

/// fsync.warningthresholdms default (ZooKeeper's).
pub const FSYNC_WARNING_THRESHOLD_MS_DEFAULT: u64 = 1000;
pub const FSYNC_WARNING_THRESHOLD_MS_MAX: u64 = 3_600_000;

/// Server ids ZooKeeper allows with extended types (session ids must not start with 0xff).
pub const SERVER_ID_MAX: u64 = 254;

/// Splits `host:rest` where host may be a bracketed IPv6 address.
fn split_host(s: &str) -> Result<(&str, &str), String> {
    if let Some(after) = s.strip_prefix('[') {
        let end = after.find(']').ok_or("unclosed '[' in an IPv6 address")?;
        let rest = &after[end + 1..];
        let rest = rest.strip_prefix(':').ok_or("expected ':' after the bracketed address")?;
        return Ok((&after[..end], rest));
    }
    s.split_once(':').ok_or_else(|| "expected host:port".to_string())
}

fn parse_port(s: &str, what: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("{what} must be a port from 1 to 65535 (found {s:?})")),
    }
}

/// Quorum addresses one `server.N` line may list (`|`-separated).
pub const SERVER_ADDRESSES_MAX: usize = 16;

/// Parses the value of `server.<id>` as ZooKeeper's `QuorumServer` does: one or more
/// `host:quorumPort:electionPort[:role]` separated by `|` (the roles given must agree), then
/// `;` and the client address (`port` or `host:port`).
pub fn parse_server_spec(id: u64, value: &str) -> Result<ServerSpec, String> {
    if !(1..=SERVER_ID_MAX).contains(&id) {
        return Err(format!("server ids run from 1 to {SERVER_ID_MAX} (found {id})"));
    }
    let (servers, client) = match value.split_once(';') {
        Some((a, b)) => (a.trim(), Some(b.trim())),
        None => (value.trim(), None),
    };
    let mut addrs = Vec::new();
    let mut role: Option<bool> = None;
    for server in servers.split('|').map(str::trim) {
        if addrs.len() == SERVER_ADDRESSES_MAX {
            return Err(format!("at most {SERVER_ADDRESSES_MAX} addresses per server"));
        }
        let (addr, observer) = parse_server_addr(server)?;
        if let Some(o) = observer {
            if role.is_some_and(|r| r != o) {
                return Err("the addresses of one server must have the same role".into());
            }
            role = Some(o);
        }
        if addrs.contains(&addr) {
            return Err(format!("the address {}:{} is listed twice", addr.host, addr.quorum_port));
        }
        addrs.push(addr);
    }
    let client = match client {
        None => None,
        Some("") => return Err("empty client address after ';'".into()),
        Some(c) => {
            let (chost, cport) = if c.starts_with('[') || c.contains(':') { split_host(c)? } else { ("", c) };
            Some((chost.to_string(), parse_port(cport, "the client port")?))
        }
    };
    Ok(ServerSpec { id, addrs, observer: role.unwrap_or(false), client })
}

/// One `host:quorumPort:electionPort[:participant|observer]`, and its role if it names one.
fn parse_server_addr(server: &str) -> Result<(ServerAddr, Option<bool>), String> {
    if server.is_empty() {
        return Err("empty server address; expected host:quorumPort:electionPort".into());
    }
    let (host, rest) = split_host(server)?;
    if host.is_empty() {
        return Err("empty host; expected host:quorumPort:electionPort".into());
    }
    let parts: Vec<&str> = rest.split(':').collect();
    let observer = match parts.as_slice() {
        [_, _] => None,
        [_, _, role] if role.eq_ignore_ascii_case("participant") => Some(false),
        [_, _, role] if role.eq_ignore_ascii_case("observer") => Some(true),
        [_, _, role] => return Err(format!("the role must be participant or observer (found {role:?})")),
        _ => return Err("expected host:quorumPort:electionPort[:participant|observer]".into()),
    };
    let quorum_port = parse_port(parts[0], "the quorum port")?;
    let election_port = parse_port(parts[1], "the election port")?;
    if quorum_port == election_port {
        return Err(format!("the quorum and election ports must differ (both {quorum_port})"));
    }
    Ok((ServerAddr { host: host.to_string(), quorum_port, election_port }, observer))
}

#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Io { path: PathBuf, err: std::io::Error },
    /// A line that is not `key=value` (a lone word, an empty key, a bad escape in the key).
    Syntax { origin: String, line: usize, text: String },
    /// A value that does not fit its key.
    BadValue { origin: String, line: usize, key: String, value: String, why: String },
    /// A required key is absent.
    Missing { origin: String, key: String },
    /// Values that do not fit together and have no single line to blame.
    Invalid { origin: String, why: String },
    /// A security key ringkeeper cannot honour (refused rather than ignored).
    Unsupported { origin: String, line: usize, key: String, why: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, err } => {
                write!(f, "cannot read config file {}: {err}", path.display())
            }
            ConfigError::Syntax { origin, line, text } => {
                write!(f, "{origin}:{line}: expected `key=value` or `key: value`, found {text:?}")
            }
            ConfigError::BadValue { origin, line, key, value, why } => {
                write!(f, "{origin}:{line}: bad value {value:?} for {key}: {why}")
            }
            ConfigError::Missing { origin, key } => {
                write!(f, "{origin}: required key {key} is not set")
            }
            ConfigError::Invalid { origin, why } => write!(f, "{origin}: {why}"),
            ConfigError::Unsupported { origin, line, key, why } => {
                write!(f, "{origin}:{line}: {key}: {why}; see {SECURITY_DOC}")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Whether zkEnv's SERVER_JVMFLAGS turn read-only mode on (`-Dreadonlymode.enabled=true`, the
/// only place ZooKeeper reads it from; the last such flag wins, as the JVM's).
fn jvm_flags_enable_read_only(jvm_flags: &str) -> bool {
    jvm_flags
        .split_whitespace()
        .filter_map(|f| f.strip_prefix("-Dreadonlymode.enabled="))
        .next_back()
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Keys ZooKeeper reads as Java system properties that ringkeeper uses. zoo.cfg may give
/// them bare or prefixed `zookeeper.`; they are matched by these (unprefixed) names.
const SYSPROP_KEYS_USED: &[&str] = &[
    "maxCnxns",
    "globalOutstandingLimit",
    "nio.sessionlessCnxnTimeout",
    "snapCount",
    "commitLogCount",
    "snapSizeLimitInKb",
    "snapshotSizeFactor",
    "preAllocSize",
    "forceSync",
    "fsync.warningthresholdms",
    "extendedTypesEnabled",
    "enforceQuota",
    "admin.snapshot.enabled",
    "admin.restore.enabled",
    "admin.rateLimiterIntervalInMS",
    "audit.enable",
    "DigestAuthenticationProvider.superDigest",
    "4lw.commands.whitelist",
    "superUser",
    "sessionRequireClientSASLAuth",
    "enforce.auth.enabled",
    "enforce.auth.schemes",
    "kerberos.removeHostFromPrincipal",
    "kerberos.removeRealmFromPrincipal",
    "jute.maxbuffer",
    "znode.container.checkIntervalMs",
    "readonlymode.enabled",
];

/// zoo.cfg keys ZooKeeper knows that a standalone ringkeeper accepts without using them.
const ZOOCFG_KEYS_UNUSED: &[&str] = &[
    "quorumListenOnAllIPs",
    "electionAlg",
    "electionPortBindRetry",
    "peerType",
    "clientPortListenBacklog",
    "syncEnabled",
    "connectToLearnerMasterLimit",
    "observerMasterPort",
];

/// System-property keys (bare or `zookeeper.`-prefixed) accepted without being used.
const SYSPROP_KEYS_UNUSED: &[&str] = &[
    "skipACL",
    "leaderServes",
    "cnxTimeout",
    "tcpKeepAlive",
    "clientTcpKeepAlive",
    "serverCnxnFactory",
    "watchManagerName",
    "snapshot.trust.empty",
    "snapshot.compression.method",
    "txnLogSizeLimitInKb",
    "digest.enabled",
    "closeSessionTxn.enabled",
    "znode.container.maxPerMinute",
    "jute.maxbuffer.extrasize",
    "nio.numSelectorThreads",
    "nio.numWorkerThreads",
    "nio.directBufferBytes",
    "commitProcessor.numWorkerThreads",
    "maxBatchSize",
    "flushDelay",
    "maxWriteQueuePollTime",
    "requestThrottleLimit",
    "requestThrottleStallTime",
    "requestThrottleDropStale",
    "learner.closeSocketAsync",
    "leader.closeSocketAsync",
];

/// Key prefixes ZooKeeper knows that ringkeeper accepts without using them.
const KEY_PREFIXES_UNUSED: &[&str] =
    &["metricsProvider.", "quorum.", "multiAddress.", "group.", "weight.", "jvm.pause.", "admin."];

/// Where security keys are explained (each refusal names it).
pub const SECURITY_DOC: &str = "docs/security.md";

/// ZooKeeper 3.9's security keys that ask for something ringkeeper does not do yet (admin TLS,
/// SASL, Kerberos, quorum SASL, enforced client auth). Each is refused at start unless its
/// value asks for nothing (`false`, or `none` where that is the off value): a hardened zoo.cfg
/// must never start an open server silently. The client and peer ports' TLS keys are not
/// here: `crate::tls::TlsKeys` honours them (or refuses them by name).
const SECURITY_KEYS_REFUSED: &[&str] =
    &["client.certReload", "IPAuthenticationProvider.usexforwardedfor", "authorizer.class"];

/// Prefixes of security keys refused the same way.
const SECURITY_PREFIXES_REFUSED: &[&str] = &["quorum.auth.", "kerberos.", "sasl."];

/// Keys under a refused prefix that ringkeeper honours (client SASL, `crate::sasl`).
const SECURITY_KEYS_HONOURED: &[&str] = &[
    "kerberos.removeHostFromPrincipal",
    "kerberos.removeRealmFromPrincipal",
    "quorum.auth.enableSasl",
    "quorum.auth.learnerRequireSasl",
    "quorum.auth.serverRequireSasl",
    "quorum.auth.learner.saslLoginContext",
    "quorum.auth.server.saslLoginContext",
    "quorum.auth.kerberos.servicePrincipal",
];

/// The JAAS file key (the JVM property's name; `SERVER_JVMFLAGS` may also give it: `load`).
pub const JAAS_KEY: &str = "java.security.auth.login.config";

/// ZooKeeper's class names of the auth providers ringkeeper has, with their short names.
const AUTH_PROVIDERS_KNOWN: &[(&str, &str)] = &[
    ("org.apache.zookeeper.server.auth.DigestAuthenticationProvider", "digest"),
    ("org.apache.zookeeper.server.auth.IPAuthenticationProvider", "ip"),
    ("org.apache.zookeeper.server.auth.X509AuthenticationProvider", "x509"),
    ("org.apache.zookeeper.server.auth.SASLAuthenticationProvider", "sasl"),
];

/// The schemes `enforce.auth.schemes` may name: those a connection can hold.
const ENFORCEABLE_SCHEMES: &[&str] = &["digest", "ip", "x509", "sasl"];

/// Values of a refused security key that ask for nothing (the key's off value).
fn asks_for_nothing(value: &str) -> bool {
    value.eq_ignore_ascii_case("false") || value.eq_ignore_ascii_case("none") || value.is_empty()
}

/// The verdict on a security key: None if `key` is not one of those handled here (it may be
/// honoured elsewhere: the super digest, the 4lw whitelist, admin.serverAddress); Some(Ok) if
/// it is accepted as it is (an off value, a provider ringkeeper has, SHA1 digests); Some(Err)
/// with the reason it is refused.
fn security_key(key: &str, value: &str) -> Option<Result<(), String>> {
    if key.starts_with("authProvider.") {
        let known = AUTH_PROVIDERS_KNOWN.iter().any(|(class, short)| value == *class || value == *short);
        return Some(if known {
            Ok(())
        } else {
            Err(format!(
                "not supported yet: {value} (ringkeeper has ZooKeeper's digest, ip, x509 and sasl providers; world and super \
                 are built in)"
            ))
        });
    }
    if key == "DigestAuthenticationProvider.digestAlg" {
        return Some(if value.eq_ignore_ascii_case("SHA1") || value.eq_ignore_ascii_case("SHA-1") {
            Ok(())
        } else {
            Err(format!("not supported yet: {value} (digest ACLs use SHA1, ZooKeeper's default)"))
        });
    }
    let refused = !SECURITY_KEYS_HONOURED.contains(&key)
        && (SECURITY_KEYS_REFUSED.contains(&key) || SECURITY_PREFIXES_REFUSED.iter().any(|p| key.starts_with(p)));
    if !refused {
        return None;
    }
    // Off values of the switches are what ringkeeper does; a port, a path, a password or
    // an "on" asks for what it does not do.
    let switch = !key.starts_with("ssl.");
    Some(if switch && asks_for_nothing(value) {
        Ok(())
    } else {
        Err("not supported yet (ringkeeper has no Kerberos yet; client and quorum SASL are DIGEST-MD5 with \
             java.security.auth.login.config)"
            .into())
    })
}

fn is_security_key(key: &str) -> bool {
    security_key(key, "").is_some()
}

fn is_unused_sysprop(key: &str) -> bool {
    SYSPROP_KEYS_UNUSED.contains(&key) || KEY_PREFIXES_UNUSED.iter().any(|p| key.starts_with(p))
}

/// The name a key is matched (and de-duplicated) by: system-property keys lose `zookeeper.`.
fn canonical_key(key: &str) -> &str {
    match key.strip_prefix("zookeeper.") {
        Some(rest)
            if SYSPROP_KEYS_USED.contains(&rest)
                || is_unused_sysprop(rest)
                || is_security_key(rest)
                || crate::tls::is_tls_key(rest) =>
        {
            rest
        }
        _ => key,
    }
}

/// Whitespace as java.util.Properties sees it.
fn is_prop_space(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\x0c'
}

/// Joins physical lines into logical ones, as java.util.Properties does: leading whitespace
/// is dropped, blank and comment lines are skipped (a comment never continues), and an odd
/// number of trailing backslashes joins the next line (minus its leading whitespace).
/// Each logical line comes with the number of the physical line it starts on.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let stripped = raw.trim_start_matches(is_prop_space);
        let (start, mut buf) = match pending.take() {
            Some(p) => p,
            None => {
                if stripped.is_empty() || stripped.starts_with(['#', '!']) {
                    continue;
                }
                (line_no, String::new())
            }
        };
        let backslashes = stripped.chars().rev().take_while(|&c| c == '\\').count();
        if backslashes % 2 == 1 {
            buf.push_str(&stripped[..stripped.len() - 1]);
            pending = Some((start, buf));
        } else {
            buf.push_str(stripped);
            out.push((start, buf));
        }
    }
    if let Some(p) = pending {
        out.push(p);
    }
    out
}

/// Splits a logical line into its raw (still escaped) key and value. The key ends at the
/// first unescaped `=`, `:` or whitespace; whitespace may be followed by one `=` or `:`.
/// `None` when the line is a key alone.
fn split_key_value(line: &str) -> Option<(&str, &str)> {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' {
            return Some((&line[..i], line[i + 1..].trim_start_matches(is_prop_space)));
        } else if is_prop_space(c) {
            let rest = line[i..].trim_start_matches(is_prop_space);
            let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
            return Some((&line[..i], rest.trim_start_matches(is_prop_space)));
        }
    }
    None
}

/// Resolves Java properties escapes. `None` for a malformed `\uXXXX`.
fn unescape(s: &str) -> Option<String> {
    if !s.contains('\\') {
        return Some(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let mut code = 0u32;
                for _ in 0..4 {
                    code = code * 16 + chars.next()?.to_digit(16)?;
                }
                out.push(char::from_u32(code)?);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Some(out)
}

/// An integer as ZooKeeper accepts one: decimal, or hex with `0x`/`0X`/`#` (Java's
/// Integer.decode, which system properties go through); an optional sign.
fn parse_int(v: &str) -> Option<i64> {
    let (neg, digits) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    let hex = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")).or_else(|| digits.strip_prefix('#'));
    let (digits, radix) = match hex {
        Some(h) => (h, 16),
        None => (digits, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let n = i64::from_str_radix(digits, radix).ok()?;
    Some(if neg { -n } else { n })
}

/// Parses a CPU list: comma-separated numbers and inclusive ranges, e.g. `1,2,3`, `1-3`, `0-1,4`.
fn parse_cpu_list(v: &str) -> Result<Vec<usize>, String> {
    const FORM: &str = "expected CPU numbers and ranges like 1,2,3 or 1-3";
    let cpu = |s: &str| -> Result<usize, String> {
        let n: usize = s.trim().parse().map_err(|_| format!("{:?} is not a CPU number ({FORM})", s.trim()))?;
        if n > CPU_INDEX_MAX {
            return Err(format!("CPU {n} is above the largest CPU number {CPU_INDEX_MAX}"));
        }
        Ok(n)
    };
    let mut out = Vec::new();
    for part in v.split(',') {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("empty entry ({FORM})"));
        }
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu(a)?, cpu(b)?);
                if a > b {
                    return Err(format!("range {a}-{b} runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(cpu(part)?),
        }
        if out.len() > CLIENT_CORES_MAX {
            return Err(format!("more than {CLIENT_CORES_MAX} CPUs"));
        }
    }
    Ok(out)
}

/// Checks `user:hash` where hash is base64 of a 20-byte SHA-1 digest (27 characters and `=`).
fn check_super_digest(v: &str) -> Result<(), String> {
    const FORM: &str = "expected user:base64(sha1(user:password)), e.g. super:lK75jTNcA+U9vtVEw5vB51mj/w4=";
    let Some((user, hash)) = v.split_once(':') else {
        return Err(format!("no ':' ({FORM})"));
    };
    if user.is_empty() {
        return Err(format!("empty user name ({FORM})"));
    }
    let b64 = |c: u8| -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    };
    let bytes = hash.as_bytes();
    let well_formed = bytes.len() == 28
        && bytes[27] == b'='
        && bytes[..27].iter().all(|&c| b64(c).is_some())
        // The last character carries 4 bits of the digest; its 2 low bits must be zero.
        && b64(bytes[26]).is_some_and(|x| x & 0b11 == 0);
    if !well_formed {
        return Err(format!("the hash is not base64 of a 20-byte SHA-1 digest ({FORM})"));
    }
    Ok(())
}

/// One `key=value` entry, for checking its value.
struct Entry<'a> {
    origin: &'a str,
    line: usize,
    key: &'a str,
    value: &'a str,
}

impl Entry<'_> {
    fn bad(&self, why: impl Into<String>) -> ConfigError {
        ConfigError::BadValue {
            origin: self.origin.to_string(),
            line: self.line,
            key: self.key.to_string(),
            value: self.value.to_string(),
            why: why.into(),
        }
    }

    /// An integer in [min, max]; `unit` (e.g. " ms") names what it counts.
    fn int(&self, min: i64, max: i64, unit: &str) -> Result<i64, ConfigError> {
        match parse_int(self.value) {
            None if self.value.is_empty() => Err(self.bad("empty value; expected an integer")),
            None => Err(self.bad("not an integer")),
            Some(v) if v < min || v > max => Err(self.bad(format!("must be from {min} to {max}{unit}"))),
            Some(v) => Ok(v),
        }
    }

    fn u32(&self, min: u32, max: u32, unit: &str) -> Result<u32, ConfigError> {
        self.int(min.into(), max.into(), unit).map(|v| v as u32)
    }

    fn usize(&self, min: usize, max: usize, unit: &str) -> Result<usize, ConfigError> {
        let clip = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.int(clip(min), clip(max), unit).map(|v| v as usize)
    }

    /// A non-empty value (a JAAS section name, say).
    fn nonempty(&self) -> Result<String, ConfigError> {
        if self.value.is_empty() {
            return Err(self.bad("empty value"));
        }
        Ok(self.value.to_string())
    }

    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" | "yes" => Ok(true),
            "false" | "no" => Ok(false),
            _ => Err(self.bad("expected true/false or yes/no")),
        }
    }

    fn path(&self) -> Result<PathBuf, ConfigError> {
        if self.value.is_empty() {
            return Err(self.bad("empty path"));
        }
        Ok(PathBuf::from(self.value))
    }

    /// minSessionTimeout / maxSessionTimeout: a positive number of ms, or -1 for the default.
    fn session_timeout(&self) -> Result<Option<u32>, ConfigError> {
        if parse_int(self.value) == Some(-1) {
            return Ok(None);
        }
        self.u32(1, SESSION_TIMEOUT_MS_MAX, " ms (or -1 for the default)").map(Some)
    }
}

/// Where this member's next snapshot falls, drawn afresh at each snapshot (`Config::snapshot_roll`)
/// so the members of an ensemble do not all snapshot and roll their logs at the same zxid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotRoll {
    /// Below snapCount / 2 (0 when that is 0).
    txns: u64,
    /// Below snapSizeLimitInKb's bytes / 2 (0 when that is 0).
    bytes: u64,
}

impl Config {
    /// The roll for the next snapshot from two random words (the shell draws them; this stays
    /// deterministic for tests): as ZooKeeper's SyncRequestProcessor, uniform below half of
    /// snapCount and half of the size limit.
    pub fn snapshot_roll(&self, random_txns: u64, random_bytes: u64) -> SnapshotRoll {
        let below = |random: u64, n: u64| if n == 0 { 0 } else { random % n };
        SnapshotRoll {
            txns: below(random_txns, self.snap_count / 2),
            bytes: below(random_bytes, self.snap_size_limit_bytes / 2),
        }
    }

    /// A snapshot is due after `txns` txns of `bytes` bytes since the last one, as ZooKeeper
    /// decides it: more than half of snapCount plus the roll (so somewhere in snapCount / 2 + 1
    /// ..= snapCount, snapCount - 1 for an odd count), or more than half of snapSizeLimitInKb
    /// plus the roll.
    pub fn snapshot_due(&self, txns: u64, bytes: u64, roll: SnapshotRoll) -> bool {
        txns > self.snap_count / 2 + roll.txns
            || (self.snap_size_limit_bytes > 0 && bytes > self.snap_size_limit_bytes / 2 + roll.bytes)
    }

    /// Parses zoo.cfg text. `origin` names the text in messages (usually the file name).
    /// Returns the config and the warnings the caller should log.
    pub fn parse(text: &str, origin: &str) -> Result<(Config, Vec<String>), ConfigError> {
        let mut warnings = Vec::new();
        let available_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());

        let mut tick_time_ms = TICK_TIME_MS_DEFAULT;
        let mut data_dir: Option<PathBuf> = None;
        let mut data_log_dir: Option<PathBuf> = None;
        let mut client_port = CLIENT_PORT_DEFAULT;
        let mut client_port_given = false;
        let mut client_port_address = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let mut max_client_cnxns = MAX_CLIENT_CNXNS_DEFAULT;
        let mut max_cnxns = MAX_CNXNS_DEFAULT;
        let mut global_outstanding_limit = GLOBAL_OUTSTANDING_LIMIT_DEFAULT;
        let mut sessionless_cnxn_timeout_ms = SESSIONLESS_CNXN_TIMEOUT_MS_DEFAULT;
        let mut testing_panic_on_path: Option<String> = None;
        // Explicit session timeouts, with the line that set them.
        let mut min_session: Option<(u32, usize)> = None;
        let mut max_session: Option<(u32, usize)> = None;
        let mut snap_count = SNAP_COUNT_DEFAULT;
        let mut commit_log_count = COMMIT_LOG_COUNT_DEFAULT;
        let mut snap_size_limit_bytes = SNAP_SIZE_LIMIT_BYTES_DEFAULT;
        let mut snapshot_size_factor = SNAPSHOT_SIZE_FACTOR_DEFAULT;
        let mut pre_alloc_size_kib = PRE_ALLOC_SIZE_KIB_DEFAULT;
        let mut snap_retain = SNAP_RETAIN_COUNT_MIN;
        let mut purge_interval_hours = 0u32;
        let mut force_sync = true;
        let mut fsync_warning_threshold_ms = FSYNC_WARNING_THRESHOLD_MS_DEFAULT;
        let mut admin_enabled = true;
        let mut admin_snapshot_enabled = true;
        let mut admin_restore_enabled = true;
        let mut admin_rate_limit_interval_ms = ADMIN_RATE_LIMIT_INTERVAL_MS_DEFAULT;
        let mut log_level: Option<String> = None;
        let mut admin_ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut admin_port: u16 = ADMIN_PORT_DEFAULT;
        let mut extended_types_enabled = false;
        let mut read_only_mode_enabled = false;
        let mut reconfig_enabled = false;
        let mut standalone_enabled = true;
        let mut dynamic_config_file = None;
        let mut local_sessions_enabled = false;
        let mut local_sessions_upgrading_enabled = false;
        let mut enforce_quota = false;
        let mut audit_enabled = false;
        let mut audit_log_file: Option<PathBuf> = None;
        let mut jute_max_buffer_bytes = JUTE_MAX_BUFFER_BYTES_DEFAULT;
        let mut super_digest = None;
        let mut container_check_interval_ms = CONTAINER_CHECK_INTERVAL_MS_DEFAULT;
        let mut four_letter_words: Vec<String> = FOUR_LETTER_WORDS_DEFAULT.iter().map(|w| w.to_string()).collect();
        let mut init_limit_ticks = INIT_LIMIT_TICKS_DEFAULT;
        let mut sync_limit_ticks = SYNC_LIMIT_TICKS_DEFAULT;
        let mut servers: Vec<ServerSpec> = Vec::new();
        let mut client_cores: Option<usize> = None;
        let mut client_core_on_pipeline: Option<usize> = None;
        let mut cpu_pinning = true;
        let mut client_cpus: Option<(Vec<usize>, usize, String)> = None;
        let mut pipeline_cpu: Option<(usize, usize)> = None;
        let mut channel_depth = CHANNEL_DEPTH_DEFAULT;
        let mut batch_txns_max = BATCH_TXNS_DEFAULT;
        let mut batch_bytes_max: Option<(usize, usize, String)> = None;
        let mut io_memory_bytes = IO_MEMORY_BYTES_DEFAULT;
        let mut ring_depth = RING_DEPTH_DEFAULT;
        let mut spin_before_park_us = SPIN_BEFORE_PARK_US_DEFAULT;
        let mut tls_keys = crate::tls::TlsKeys::default();
        let mut jaas_path: Option<PathBuf> = None;
        let mut sasl_super_user: Option<String> = None;
        let mut sasl_rules = crate::sasl::PrincipalRules::default();
        let mut enforce_auth_enabled = false;
        let mut enforce_auth_schemes: Vec<String> = Vec::new();
        let mut session_require_sasl = false;
        let mut quorum_sasl_enabled = false;
        let mut quorum_sasl_keys = crate::sasl::quorum::QuorumSaslKeys::default();
        // Canonical key → the line that first set it.
        let mut seen: HashMap<String, usize> = HashMap::new();

        for (line, text) in logical_lines(text) {
            let syntax = || ConfigError::Syntax { origin: origin.to_string(), line, text: text.clone() };
            let (raw_key, raw_value) = split_key_value(&text).ok_or_else(syntax)?;
            let key = unescape(raw_key).ok_or_else(syntax)?;
            let key = key.trim();
            if key.is_empty() {
                return Err(syntax());
            }
            let value = match unescape(raw_value) {
                Some(v) => v,
                None => {
                    return Err(ConfigError::BadValue {
                        origin: origin.to_string(),
                        line,
                        key: key.to_string(),
                        value: raw_value.to_string(),
                        why: "malformed \\uXXXX escape".into(),
                    })
                }
            };
            let value = value.trim();
            let e = Entry { origin, line, key, value };

            let canon = canonical_key(key);
            let server_id = match canon.strip_prefix("server.") {
                Some(n) => Some(n.parse::<u64>().map_err(|_| e.bad("server.N needs a numeric server id N"))?),
                None => None,
            };
            let dedup_key = match server_id {
                Some(id) => format!("server.{id}"),
                None => canon.to_string(),
            };
            match seen.get(&dedup_key) {
                Some(first) => warnings.push(format!(
                    "{origin}: key '{key}' at line {line} was already set at line {first}; the last value wins"
                )),
                None => {
                    seen.insert(dedup_key, line);
                }
            }

            match security_key(canon, value) {
                Some(Ok(())) => continue,
                Some(Err(why)) => {
                    return Err(ConfigError::Unsupported {
                        origin: origin.to_string(),
                        line,
                        key: key.to_string(),
                        why,
                    })
                }
                None => {}
            }
            match canon {
                "tickTime" => tick_time_ms = e.u32(1, TICK_TIME_MS_MAX, " ms")?,
                "dataDir" => data_dir = Some(e.path()?),
                "dataLogDir" => data_log_dir = Some(e.path()?),
                "clientPort" => {
                    client_port = e.int(1, u16::MAX.into(), "")? as u16;
                    client_port_given = true;
                }
                "admin.enableServer" => admin_enabled = e.boolean()?,
                "admin.snapshot.enabled" => admin_snapshot_enabled = e.boolean()?,
                "admin.restore.enabled" => admin_restore_enabled = e.boolean()?,
                "admin.rateLimiterIntervalInMS" => {
                    admin_rate_limit_interval_ms = e.int(0, ADMIN_RATE_LIMIT_INTERVAL_MS_MAX as i64, " ms")? as u64
                }
                "ringkeeper.logLevel" => log_level = Some(value.to_string()),
                "admin.serverPort" => admin_port = e.int(1, u16::MAX.into(), "")? as u16,
                "admin.serverAddress" => {
                    admin_ip = value.parse().map_err(|_| e.bad("expected an IP address like 0.0.0.0 or 127.0.0.1"))?;
                }
                "clientPortAddress" => {
                    let bare = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(value);
                    client_port_address = bare.parse().map_err(|_| {
                        e.bad("expected an IP address like 127.0.0.1 or ::1 (host names are not resolved)")
                    })?;
                }
                "maxClientCnxns" => max_client_cnxns = e.u32(0, u32::MAX, " connections (0 = unlimited)")?,
                "maxCnxns" => max_cnxns = e.u32(0, u32::MAX, " connections (0 = unlimited)")?,
                "globalOutstandingLimit" => global_outstanding_limit = e.u32(0, i32::MAX as u32, " requests")?,
                "nio.sessionlessCnxnTimeout" => {
                    sessionless_cnxn_timeout_ms = e.int(1, SESSIONLESS_CNXN_TIMEOUT_MS_MAX as i64, " ms")? as u64
                }
                "ringkeeper.testing.panicOnPath" => testing_panic_on_path = Some(value.to_string()),
                JAAS_KEY => jaas_path = Some(e.path()?),
                "superUser" => sasl_super_user = Some(value.to_string()).filter(|v| !v.is_empty()),
                "kerberos.removeHostFromPrincipal" => sasl_rules.remove_host = e.boolean()?,
                "kerberos.removeRealmFromPrincipal" => sasl_rules.remove_realm = e.boolean()?,
                "sessionRequireClientSASLAuth" => session_require_sasl = e.boolean()?,
                "quorum.auth.enableSasl" => quorum_sasl_enabled = e.boolean()?,
                "quorum.auth.learnerRequireSasl" => quorum_sasl_keys.learner_require = e.boolean()?,
                "quorum.auth.serverRequireSasl" => quorum_sasl_keys.server_require = e.boolean()?,
                "quorum.auth.learner.saslLoginContext" => quorum_sasl_keys.learner_section = e.nonempty()?,
                "quorum.auth.server.saslLoginContext" => quorum_sasl_keys.server_section = e.nonempty()?,
                "quorum.auth.kerberos.servicePrincipal" => quorum_sasl_keys.service_principal = e.nonempty()?,
                "quorum.cnxn.threads.size" => {
                    quorum_sasl_keys.authenticating_max =
                        e.usize(1, crate::sasl::quorum::QUORUM_CNXN_THREADS_MAX, " connections")?
                }
                "enforce.auth.enabled" => enforce_auth_enabled = e.boolean()?,
                "enforce.auth.schemes" => {
                    // As ZooKeeper's AuthenticationHelper: comma-separated, trimmed, empty dropped.
                    enforce_auth_schemes =
                        value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
                    if let Some(bad) = enforce_auth_schemes.iter().find(|s| !ENFORCEABLE_SCHEMES.contains(&s.as_str()))
                    {
                        return Err(e.bad(format!(
                            "authentication scheme {bad} is not available (ringkeeper has {})",
                            ENFORCEABLE_SCHEMES.join(", ")
                        )));
                    }
                }
                "minSessionTimeout" => min_session = e.session_timeout()?.map(|v| (v, line)),
                "maxSessionTimeout" => max_session = e.session_timeout()?.map(|v| (v, line)),
                "snapCount" => {
                    let v = e.int(i64::MIN, i64::MAX, " txns")?;
                    if v < SNAP_COUNT_MIN as i64 {
                        warnings.push(format!(
                            "{origin}: snapCount {v} at line {line} is below {SNAP_COUNT_MIN}; using \
                             {SNAP_COUNT_MIN}, as ZooKeeper"
                        ));
                    }
                    snap_count = v.max(SNAP_COUNT_MIN as i64) as u64;
                }
                "commitLogCount" => {
                    let v = e.int(i64::MIN, i64::MAX, " txns")?;
                    if v < COMMIT_LOG_COUNT_DEFAULT as i64 {
                        warnings.push(format!(
                            "{origin}: commitLogCount {v} at line {line} is below the minimum; using \
                             {COMMIT_LOG_COUNT_DEFAULT}"
                        ));
                    }
                    commit_log_count = v.max(COMMIT_LOG_COUNT_DEFAULT as i64) as u64;
                }
                // As ZooKeeper: zero or less turns the size trigger off.
                "snapSizeLimitInKb" => {
                    snap_size_limit_bytes = e.int(i64::MIN, i64::MAX / 1024, " KiB")?.max(0) as u64 * 1024
                }
                "snapshotSizeFactor" => {
                    let v: f64 = value.parse().map_err(|_| e.bad("not a number"))?;
                    if v.is_nan() || v > 1.0 {
                        warnings.push(format!(
                            "{origin}: snapshotSizeFactor {v} at line {line} is above 1; using \
                             {SNAPSHOT_SIZE_FACTOR_DEFAULT}"
                        ));
                        snapshot_size_factor = SNAPSHOT_SIZE_FACTOR_DEFAULT;
                    } else {
                        snapshot_size_factor = v;
                    }
                }
                "preAllocSize" => {
                    pre_alloc_size_kib =
                        e.int(PRE_ALLOC_SIZE_KIB_MIN as i64, PRE_ALLOC_SIZE_KIB_MAX as i64, " KiB")? as u64;
                }
                "autopurge.snapRetainCount" => {
                    let v = e.u32(0, u32::MAX, " snapshots")?;
                    if v < SNAP_RETAIN_COUNT_MIN {
                        warnings.push(format!(
                            "{origin}: autopurge.snapRetainCount {v} at line {line} is below the minimum; using {SNAP_RETAIN_COUNT_MIN}"
                        ));
                    }
                    snap_retain = v.max(SNAP_RETAIN_COUNT_MIN);
                }
                // ZooKeeper disables purging for any value <= 0.
                "autopurge.purgeInterval" => {
                    purge_interval_hours = e.int(i32::MIN.into(), u32::MAX.into(), " hours")?.max(0) as u32
                }
                "forceSync" => force_sync = e.boolean()?,
                "fsync.warningthresholdms" => {
                    fsync_warning_threshold_ms = e.int(0, FSYNC_WARNING_THRESHOLD_MS_MAX as i64, " ms")? as u64
                }
                "extendedTypesEnabled" => extended_types_enabled = e.boolean()?,
                "readonlymode.enabled" => read_only_mode_enabled = e.boolean()?,
                "reconfigEnabled" => reconfig_enabled = e.boolean()?,
                "standaloneEnabled" => standalone_enabled = e.boolean()?,
                "dynamicConfigFile" => dynamic_config_file = Some(e.path()?),
                "localSessionsEnabled" => local_sessions_enabled = e.boolean()?,
                "localSessionsUpgradingEnabled" => local_sessions_upgrading_enabled = e.boolean()?,
                "enforceQuota" => enforce_quota = e.boolean()?,
                "audit.enable" => audit_enabled = e.boolean()?,
                "ringkeeper.auditLogFile" => audit_log_file = Some(PathBuf::from(value)),
                "jute.maxbuffer" => {
                    jute_max_buffer_bytes = e.usize(JUTE_MAX_BUFFER_BYTES_MIN, JUTE_MAX_BUFFER_BYTES_MAX, " bytes")?;
                }
                "DigestAuthenticationProvider.superDigest" => {
                    check_super_digest(value).map_err(|why| e.bad(why))?;
                    super_digest = Some(value.to_string());
                }
                "znode.container.checkIntervalMs" => {
                    container_check_interval_ms = e.int(1, CONTAINER_CHECK_INTERVAL_MS_MAX as i64, " ms")? as u64;
                }
                "4lw.commands.whitelist" => {
                    four_letter_words =
                        value.split(',').map(str::trim).filter(|w| !w.is_empty()).map(str::to_string).collect();
                }
                "initLimit" => init_limit_ticks = e.u32(1, u32::MAX, " ticks")?,
                "syncLimit" => sync_limit_ticks = e.u32(1, u32::MAX, " ticks")?,
                "ringkeeper.clientCores" => client_cores = Some(e.usize(1, CLIENT_CORES_MAX, " cores")?),
                "ringkeeper.clientCoreOnPipeline" => client_core_on_pipeline = e.boolean()?.then_some(line),
                "ringkeeper.cpuPinning" => cpu_pinning = e.boolean()?,
                "ringkeeper.clientCpus" => {
                    let list = parse_cpu_list(value).map_err(|why| e.bad(why))?;
                    client_cpus = Some((list, line, value.to_string()));
                }
                "ringkeeper.pipelineCpu" => pipeline_cpu = Some((e.usize(0, CPU_INDEX_MAX, "")?, line)),
                "ringkeeper.channelDepth" => channel_depth = e.usize(1, CHANNEL_DEPTH_MAX, " messages")?,
                "ringkeeper.batchTxnsMax" => batch_txns_max = e.usize(1, BATCH_TXNS_LIMIT, " txns")?,
                "ringkeeper.batchBytesMax" => {
                    batch_bytes_max =
                        Some((e.usize(BATCH_BYTES_MIN, BATCH_BYTES_LIMIT, " bytes")?, line, value.to_string()))
                }
                "ringkeeper.ioMemoryBytes" => {
                    io_memory_bytes = e.usize(IO_MEMORY_BYTES_MIN, IO_MEMORY_BYTES_MAX, " bytes")?
                }
                "ringkeeper.spinBeforeParkUs" => {
                    spin_before_park_us = e.usize(0, SPIN_BEFORE_PARK_US_MAX as usize, " µs")? as u64
                }
                "ringkeeper.ringDepth" => {
                    ring_depth = e.usize(RING_DEPTH_MIN, RING_DEPTH_MAX, " entries")?;
                    if !ring_depth.is_power_of_two() {
                        return Err(e.bad(format!("must be a power of two from {RING_DEPTH_MIN} to {RING_DEPTH_MAX}")));
                    }
                }
                _ if server_id.is_some() => {
                    let id = server_id.unwrap_or_default();
                    let spec = parse_server_spec(id, value).map_err(|why| e.bad(why))?;
                    match servers.iter_mut().find(|s| s.id == id) {
                        Some(s) => *s = spec,
                        None => servers.push(spec),
                    }
                }
                k if crate::tls::is_tls_key(k) => tls_keys.push(k, value, line),
                "skipACL" if e.boolean().unwrap_or(false) => warnings.push(format!(
                    "{origin}: skipACL at line {line} is not used: ringkeeper always checks ACLs (ignored)"
                )),
                k if ZOOCFG_KEYS_UNUSED.contains(&k) || is_unused_sysprop(k) => {}
                _ => warnings.push(format!("{origin}: unknown key '{key}' at line {line} (ignored)")),
            }
        }

        let data_dir =
            data_dir.ok_or_else(|| ConfigError::Missing { origin: origin.to_string(), key: "dataDir".into() })?;

        let min_session_timeout_ms =
            min_session.map_or(tick_time_ms.saturating_mul(MIN_SESSION_TIMEOUT_TICKS_DEFAULT), |(v, _)| v);
        let max_session_timeout_ms =
            max_session.map_or(tick_time_ms.saturating_mul(MAX_SESSION_TIMEOUT_TICKS_DEFAULT), |(v, _)| v);
        if min_session_timeout_ms > max_session_timeout_ms {
            let describe = |name: &str, v: u32, set: Option<(u32, usize)>, ticks: u32| match set {
                Some((_, l)) => format!("{name} ({v} ms, line {l})"),
                None => format!("{name} ({v} ms, the default {ticks} × tickTime)"),
            };
            let why = format!(
                "{} is greater than {}",
                describe("minSessionTimeout", min_session_timeout_ms, min_session, MIN_SESSION_TIMEOUT_TICKS_DEFAULT),
                describe("maxSessionTimeout", max_session_timeout_ms, max_session, MAX_SESSION_TIMEOUT_TICKS_DEFAULT),
            );
            // Blame the later of the explicit settings (at least one is explicit).
            let blame = match (min_session, max_session) {
                (Some((v, ml)), Some((_, xl))) if ml > xl => Some(("minSessionTimeout", v, ml)),
                (_, Some((v, xl))) => Some(("maxSessionTimeout", v, xl)),
                (Some((v, ml)), None) => Some(("minSessionTimeout", v, ml)),
                (None, None) => None,
            };
            return Err(match blame {
                Some((key, v, line)) => ConfigError::BadValue {
                    origin: origin.to_string(),
                    line,
                    key: key.into(),
                    value: v.to_string(),
                    why,
                },
                None => ConfigError::Invalid { origin: origin.to_string(), why },
            });
        }

        // The largest txn must fit an empty batch (else the log could not hold it).
        let batch_bytes_needed =
            crate::txn::codec::txn_record_bytes_max(jute_max_buffer_bytes) + crate::storage::log::RECORD_PREFIX_BYTES;
        let batch_bytes_max = match batch_bytes_max {
            None => BATCH_BYTES_DEFAULT.max(batch_bytes_needed),
            Some((v, _, _)) if v >= batch_bytes_needed => v,
            Some((v, line, raw)) => {
                return Err(ConfigError::BadValue {
                    origin: origin.to_string(),
                    line,
                    key: "ringkeeper.batchBytesMax".into(),
                    value: raw,
                    why: format!(
                        "{v} bytes cannot hold the largest txn with jute.maxbuffer={jute_max_buffer_bytes} \
                         ({batch_bytes_needed} bytes with its record prefix)"
                    ),
                })
            }
        };

        let client_cores = match (client_cores, &client_cpus) {
            (Some(n), Some((list, line, raw))) if list.len() != n => {
                return Err(ConfigError::BadValue {
                    origin: origin.to_string(),
                    line: *line,
                    key: "ringkeeper.clientCpus".into(),
                    value: raw.clone(),
                    why: format!(
                        "lists {} CPUs but ringkeeper.clientCores is {n}: give one CPU per client core",
                        list.len()
                    ),
                });
            }
            (Some(n), _) => n,
            // Without clientCores, the CPU list says how many client cores there are.
            (None, Some((list, _, _))) => list.len(),
            (None, None) if client_core_on_pipeline.is_some() => 1,
            (None, None) => available_cpus.saturating_sub(1).clamp(1, CLIENT_CORES_MAX),
        };
        if let Some(line) = client_core_on_pipeline {
            if client_cores != 1 || client_cpus.is_some() {
                return Err(ConfigError::BadValue {
                    origin: origin.to_string(),
                    line,
                    key: "ringkeeper.clientCoreOnPipeline".into(),
                    value: "true".into(),
                    why: "runs the one client core on the pipeline's thread: it takes ringkeeper.clientCores=1 (or \
                          unset) and no ringkeeper.clientCpus"
                        .into(),
                });
            }
        }
        if let Some((list, line, _)) = &client_cpus {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if sorted.len() != list.len() {
                warnings.push(format!(
                    "{origin}: ringkeeper.clientCpus at line {line} names a CPU twice; those client cores will share it"
                ));
            }
            let pipeline = pipeline_cpu.map_or(0, |(c, _)| c);
            if cpu_pinning && list.contains(&pipeline) {
                warnings.push(format!(
                    "{origin}: ringkeeper.clientCpus at line {line} includes the pipeline CPU {pipeline}; they will share it"
                ));
            }
        }
        if !cpu_pinning {
            let lines: Vec<String> = [client_cpus.as_ref().map(|c| c.1), pipeline_cpu.map(|p| p.1)]
                .into_iter()
                .flatten()
                .map(|l| l.to_string())
                .collect();
            if !lines.is_empty() {
                warnings.push(format!(
                    "{origin}: CPU numbers (line {}) have no effect with ringkeeper.cpuPinning=false",
                    lines.join(", ")
                ));
            }
        }

        let crate::tls::TlsConfig { client: client_tls, quorum: quorum_tls, admin: admin_tls } =
            tls_keys.finish(origin, client_port_address)?;
        if quorum_tls.is_some() && servers.is_empty() {
            warnings
                .push(format!("{origin}: sslQuorum / portUnification: a standalone server has no peer port (ignored)"));
        }
        // As ZooKeeper's AuthenticationHelper: sessionRequireClientSASLAuth wins and means
        // sasl; enforce.auth.enabled needs schemes.
        let enforce_auth_schemes = if session_require_sasl {
            vec![crate::tree::acl::SCHEME_SASL.to_string()]
        } else if enforce_auth_enabled {
            if enforce_auth_schemes.is_empty() {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    why: "enforce.auth.enabled is true: enforce.auth.schemes must be configured".into(),
                });
            }
            enforce_auth_schemes
        } else {
            Vec::new()
        };
        let sasl_keys = jaas_path
            .map(|jaas_path| crate::sasl::SaslKeys { jaas_path, section: crate::sasl::jaas::SERVER_SECTION.into() });
        // As ZooKeeper's QuorumPeerConfig: requiring quorum SASL needs it enabled.
        for (require, key) in [
            (quorum_sasl_keys.learner_require, "quorum.auth.learnerRequireSasl"),
            (quorum_sasl_keys.server_require, "quorum.auth.serverRequireSasl"),
        ] {
            if require && !quorum_sasl_enabled {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    why: format!("quorum.auth.enableSasl is disabled, so {key} cannot be enabled"),
                });
            }
        }
        let quorum_sasl_keys = quorum_sasl_enabled.then_some(quorum_sasl_keys);
        if quorum_sasl_keys.is_some() && servers.is_empty() {
            warnings.push(format!("{origin}: quorum.auth.enableSasl: a standalone server has no peer port (ignored)"));
        }
        let config = Config {
            client_tls,
            quorum_tls,
            admin_tls,
            sasl_keys,
            sasl_super_user,
            sasl_rules,
            sasl: None,
            quorum_sasl_keys,
            quorum_sasl: None,
            enforce_auth_schemes,
            tick_time_ms,
            data_log_dir: data_log_dir.unwrap_or_else(|| data_dir.clone()),
            data_dir,
            client_port,
            client_port_address,
            client_port_given,
            max_client_cnxns,
            min_session_timeout_ms,
            max_session_timeout_ms,
            snap_count,
            commit_log_count,
            snap_size_limit_bytes,
            snapshot_size_factor,
            pre_alloc_size_bytes: pre_alloc_size_kib * 1024,
            autopurge_snap_retain_count: snap_retain,
            autopurge_purge_interval_hours: purge_interval_hours,
            force_sync,
            fsync_warning_threshold_ms,
            admin_enabled,
            log_level,
            admin_addr: SocketAddr::new(admin_ip, admin_port),
            admin_snapshot_enabled,
            admin_restore_enabled,
            admin_rate_limit_interval_ms,
            extended_types_enabled,
            read_only_mode_enabled,
            reconfig_enabled,
            standalone_enabled,
            dynamic_config_file,
            dynamic_config_version: 0,
            config_path: None,
            local_sessions_enabled,
            local_sessions_upgrading_enabled,
            enforce_quota,
            audit_enabled,
            audit_log_file,
            jute_max_buffer_bytes,
            super_digest,
            container_check_interval_ms,
            four_letter_words,
            init_limit_ticks,
            sync_limit_ticks,
            servers,
            client_cores,
            client_core_on_pipeline: client_core_on_pipeline.is_some(),
            cpu_pinning,
            client_cpus: client_cpus.map(|(list, _, _)| list),
            pipeline_cpu: pipeline_cpu.map(|(c, _)| c),
            channel_depth,
            batch_txns_max,
            batch_bytes_max,
            io_memory_bytes,
            ring_depth,
            spin_before_park_us,
            max_cnxns,
            global_outstanding_limit,
            sessionless_cnxn_timeout_ms,
            testing_panic_on_path,
        };
        Ok((config, warnings))
    }

    /// Reads and parses a zoo.cfg file, then the JAAS file it (or `SERVER_JVMFLAGS`) names.
    pub fn load(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Io { path: path.to_path_buf(), err })?;
        let origin = path.display().to_string();
        let (mut config, mut warnings) = Config::parse(&text, &origin)?;
        let jvm_flags = std::env::var("SERVER_JVMFLAGS").unwrap_or_default();
        config.load_sasl(&origin, &jvm_flags, &mut warnings)?;
        if jvm_flags_enable_read_only(&jvm_flags) {
            config.read_only_mode_enabled = true;
        }
        if let Some(dynamic) = config.dynamic_config_file.clone() {
            config.load_dynamic(&origin, &dynamic)?;
        }
        config.config_path = Some(path.to_path_buf());
        Ok((config, warnings))
    }

    /// Takes the `server.N` lines and the version from the dynamic config file (ZooKeeper's
    /// `dynamicConfigFile`); the static file must then hold none.
    fn load_dynamic(&mut self, origin: &str, path: &Path) -> Result<(), ConfigError> {
        if !self.servers.is_empty() {
            return Err(ConfigError::Invalid {
                origin: origin.to_string(),
                why: format!("server.N lines are given both here and in dynamicConfigFile {}", path.display()),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Io { path: path.to_path_buf(), err })?;
        let c = crate::dynconfig::DynConfig::parse(&text)
            .map_err(|e| ConfigError::Invalid { origin: path.display().to_string(), why: e.to_string() })?;
        self.servers = c.servers;
        // ZooKeeper's files name their version (`zoo.cfg.dynamic.<hex>`) and hold none.
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.rsplit_once(".dynamic."))
            .and_then(|(_, v)| i64::from_str_radix(v, 16).ok());
        self.dynamic_config_version = if c.version != 0 { c.version } else { named.unwrap_or(0) };
        Ok(())
    }

    /// Reads the users of the JAAS `Server` section (the file named by
    /// `java.security.auth.login.config`, else by `-Djava.security.auth.login.config=` in
    /// `jvm_flags`, as zkEnv's SERVER_JVMFLAGS). A file that cannot be read, or has no Server
    /// section with a DigestLoginModule, refuses the start (as ZooKeeper's); so does a
    /// requirement of sasl ids without any JAAS file (nobody could authenticate).
    pub fn load_sasl(&mut self, origin: &str, jvm_flags: &str, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
        if self.sasl_keys.is_none() {
            if let Some(jaas_path) = crate::sasl::jaas_path_from_jvm_flags(jvm_flags) {
                warnings.push(format!(
                    "{origin}: the JAAS file {} comes from SERVER_JVMFLAGS ({JAAS_KEY} is not in the config)",
                    jaas_path.display()
                ));
                self.sasl_keys =
                    Some(crate::sasl::SaslKeys { jaas_path, section: crate::sasl::jaas::SERVER_SECTION.into() });
            }
        }
        let invalid = |why: String| ConfigError::Invalid { origin: origin.to_string(), why };
        let sasl_required = self.enforce_auth_schemes.iter().any(|s| s == crate::tree::acl::SCHEME_SASL);
        let Some(keys) = &self.sasl_keys else {
            if sasl_required {
                return Err(invalid(format!("sasl authentication is required but no JAAS file is given ({JAAS_KEY})")));
            }
            if self.quorum_sasl_keys.is_some() {
                return Err(invalid(format!("quorum.auth.enableSasl needs a JAAS file ({JAAS_KEY})")));
            }
            return Ok(());
        };
        let jaas = crate::sasl::read_jaas(&keys.jaas_path).map_err(|e| invalid(e.to_string()))?;
        if let Some(q) = &self.quorum_sasl_keys {
            let quorum = crate::sasl::quorum::QuorumSasl::from_jaas(q.clone(), &jaas, &keys.jaas_path)
                .map_err(|e| invalid(e.to_string()))?;
            self.quorum_sasl = Some(std::sync::Arc::new(quorum));
            // A file for the quorum alone (no client section) leaves clients without SASL.
            if !sasl_required && jaas.section(&keys.section).is_err() {
                warnings.push(format!(
                    "{origin}: the JAAS file {} has no '{}' section: clients cannot authenticate with SASL",
                    keys.jaas_path.display(),
                    keys.section
                ));
                return Ok(());
            }
        }
        let sasl = crate::sasl::ServerSasl::from_jaas(keys, &jaas, self.sasl_super_user.clone(), self.sasl_rules)
            .map_err(|e| invalid(e.to_string()))?;
        self.sasl = Some(std::sync::Arc::new(sasl));
        Ok(())
    }

    /// The embedded default. It is our own constant (a unit test parses it), so failing to
    /// parse it is a bug in ringkeeper, not a user error.
    pub fn embedded_default() -> Config {
        match Config::parse(EMBEDDED_DEFAULT_CFG, EMBEDDED_DEFAULT_ORIGIN) {
            Ok((config, warnings)) => {
                for w in warnings {
                    tracing::warn!("{w}");
                }
                config
            }
            Err(e) => panic!("bug: the embedded default config is invalid: {e}"),
        }
    }

    /// Several `server.N` lines: this server is a member of a replicated ensemble.
    pub fn is_ensemble(&self) -> bool {
        self.servers.len() > 1
    }

    /// The address the client port listens on.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::new(self.client_port_address, self.client_port)
    }

    /// Where member `my_id` serves clients, by ZooKeeper's rules
    /// (`QuorumPeerConfig.setupClientPort`): the client part of its `server.N` line when it has
    /// one, which must agree with `clientPort`/`clientPortAddress` when those are set too (the
    /// same address, or the same port when `clientPortAddress` is all addresses); else
    /// `clientPort`/`clientPortAddress`. A client host name is resolved here.
    pub fn member_client_addr(&self, my_id: u64) -> Result<SocketAddr, String> {
        let static_addr = self.client_addr();
        let Some((host, port)) = self.servers.iter().find(|s| s.id == my_id).and_then(|s| s.client.clone()) else {
            return Ok(static_addr);
        };
        let ip = match host.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) if host.is_empty() => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                .map_err(|e| format!("server.{my_id}: cannot resolve the client host {host}: {e}"))?
                .next()
                .ok_or_else(|| format!("server.{my_id}: the client host {host} resolves to no address"))?
                .ip(),
        };
        let line_addr = SocketAddr::new(ip, port);
        if self.client_port_given {
            let agrees =
                if static_addr.ip().is_unspecified() { static_addr.port() == port } else { static_addr == line_addr };
            if !agrees {
                return Err(format!(
                    "the client address of this server (server.{my_id}) is {line_addr} in its server line but \
                     {static_addr} by clientPort/clientPortAddress; they must agree (or give only one)"
                ));
            }
        }
        Ok(line_addr)
    }

    /// The largest txn record this server makes (prep refuses larger ones).
    pub fn txn_bytes_max(&self) -> usize {
        crate::txn::codec::txn_record_bytes_max(self.jute_max_buffer_bytes)
    }

    /// Clamp a requested session timeout to [min, max] as ZooKeeper does (min first, then max).
    pub fn negotiate_session_timeout(&self, requested_ms: i32) -> i32 {
        let min = i32::try_from(self.min_session_timeout_ms).unwrap_or(i32::MAX);
        let max = i32::try_from(self.max_session_timeout_ms).unwrap_or(i32::MAX);
        let mut t = requested_ms;
        if t < min {
            t = min;
        }
        if t > max {
            t = max;
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
        Config::parse(text, "test.cfg")
    }

    #[test]
    fn read_only_mode_and_local_sessions_keys() {
        let base = "dataDir=/tmp/x\nclientPort=2181\n";
        assert!(!ok(base).0.read_only_mode_enabled);
        assert!(ok(&format!("{base}readonlymode.enabled=true\n")).0.read_only_mode_enabled);
        assert!(parse(&format!("{base}readonlymode.enabled=maybe\n")).is_err());
        assert!(jvm_flags_enable_read_only("-Xmx1g -Dreadonlymode.enabled=true"));
        assert!(!jvm_flags_enable_read_only("-Dreadonlymode.enabled=true -Dreadonlymode.enabled=false"));
        assert!(!jvm_flags_enable_read_only("-Dzookeeper.readonlymode.enabled=true"));
        let c = ok(&format!("{base}localSessionsEnabled=true\nlocalSessionsUpgradingEnabled=true\n")).0;
        assert!(c.local_sessions_enabled && c.local_sessions_upgrading_enabled);
        assert!(!ok(base).0.local_sessions_enabled && !ok(base).0.local_sessions_upgrading_enabled);
    }

    fn ok(text: &str) -> (Config, Vec<String>) {
        match parse(text) {
            Ok(r) => r,
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    fn quiet(text: &str) -> Config {
        let (c, w) = ok(text);
        assert!(w.is_empty(), "{text:?}: {w:?}");
        c
    }

    #[test]
    fn embedded_default_parses_without_warnings() {
        let c = quiet(EMBEDDED_DEFAULT_CFG);
        assert_eq!(c.tick_time_ms, 2000);
        assert_eq!(c.data_dir, PathBuf::from("./data"));
        assert_eq!(c.data_log_dir, c.data_dir);
        assert_eq!(c.client_addr(), "127.0.0.1:2181".parse::<SocketAddr>().unwrap());
        assert_eq!(c.max_client_cnxns, 60);
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (4000, 40000));
        assert_eq!(c.snap_count, 100_000);
        assert_eq!(c.pre_alloc_size_bytes, 64 * 1024 * 1024);
        assert_eq!((c.autopurge_snap_retain_count, c.autopurge_purge_interval_hours), (3, 0));
        assert!(c.force_sync && !c.extended_types_enabled);
        assert_eq!(c.jute_max_buffer_bytes, 0xfffff);
        assert_eq!(c.super_digest, None);
        assert_eq!(c.container_check_interval_ms, 60_000);
        assert_eq!(c.four_letter_words, vec!["srvr".to_string()]);
        assert_eq!((c.init_limit_ticks, c.sync_limit_ticks), (10, 5));
        assert!(c.servers.is_empty());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(c.client_cores, (cpus - 1).max(1));
        assert!(c.cpu_pinning);
        assert_eq!((c.client_cpus.clone(), c.pipeline_cpu), (None, None));
        assert_eq!((c.channel_depth, c.batch_txns_max), (1024, 1024));
        assert_eq!((c.io_memory_bytes, c.ring_depth, c.spin_before_park_us), (2 * 1024 * 1024, 128, 100));
        let e = Config::embedded_default();
        assert_eq!(e.client_addr(), c.client_addr());
    }

    #[test]
    fn every_key_parses() {
        let c = quiet(
            "tickTime=500\n\
             dataDir=/d\n\
             dataLogDir=/l\n\
             clientPort=2999\n\
             clientPortAddress=::1\n\
             maxClientCnxns=0\n\
             minSessionTimeout=1500\n\
             maxSessionTimeout=30000\n\
             snapCount=10\n\
             preAllocSize=1024\n\
             autopurge.snapRetainCount=5\n\
             autopurge.purgeInterval=24\n\
             forceSync=no\n\
             zookeeper.extendedTypesEnabled=TRUE\n\
             jute.maxbuffer=4096\n\
             zookeeper.DigestAuthenticationProvider.superDigest=super:lK75jTNcA+U9vtVEw5vB51mj/w4=\n\
             znode.container.checkIntervalMs=1000\n\
             4lw.commands.whitelist=srvr, ruok ,stat\n\
             initLimit=20\n\
             syncLimit=10\n\
             server.1=10.0.0.1:2888:3888\n\
             server.2=10.0.0.2:2888:3888;2181\n\
             ringkeeper.clientCores=3\n\
             ringkeeper.cpuPinning=Yes\n\
             ringkeeper.clientCpus=1-2,5\n\
             ringkeeper.pipelineCpu=4\n\
             ringkeeper.channelDepth=64\n\
             ringkeeper.batchTxnsMax=256\n\
             ringkeeper.ioMemoryBytes=1048576\n\
             ringkeeper.ringDepth=256\n\
             ringkeeper.spinBeforeParkUs=0\n",
        );
        assert_eq!(c.tick_time_ms, 500);
        assert_eq!((c.data_dir.to_str(), c.data_log_dir.to_str()), (Some("/d"), Some("/l")));
        assert_eq!(c.client_addr(), "[::1]:2999".parse::<SocketAddr>().unwrap());
        assert_eq!(c.max_client_cnxns, 0);
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (1500, 30000));
        assert_eq!(c.snap_count, 10);
        assert_eq!(c.pre_alloc_size_bytes, 1024 * 1024);
        assert_eq!((c.autopurge_snap_retain_count, c.autopurge_purge_interval_hours), (5, 24));
        assert!(!c.force_sync && c.extended_types_enabled);
        assert_eq!(c.jute_max_buffer_bytes, 4096);
        assert_eq!(c.super_digest.as_deref(), Some("super:lK75jTNcA+U9vtVEw5vB51mj/w4="));
        assert_eq!(c.container_check_interval_ms, 1000);
        assert_eq!(c.four_letter_words, vec!["srvr", "ruok", "stat"]);
        assert_eq!((c.init_limit_ticks, c.sync_limit_ticks), (20, 10));
        assert_eq!(
            c.servers,
            vec![
                ServerSpec {
                    id: 1,
                    addrs: vec![ServerAddr { host: "10.0.0.1".into(), quorum_port: 2888, election_port: 3888 }],
                    observer: false,
                    client: None
                },
                ServerSpec {
                    id: 2,
                    addrs: vec![ServerAddr { host: "10.0.0.2".into(), quorum_port: 2888, election_port: 3888 }],
                    observer: false,
                    client: Some((String::new(), 2181))
                },
            ]
        );
        assert_eq!(c.client_cores, 3);
        assert!(c.cpu_pinning);
        assert_eq!(c.client_cpus, Some(vec![1, 2, 5]));
        assert_eq!(c.pipeline_cpu, Some(4));
        assert_eq!((c.channel_depth, c.batch_txns_max), (64, 256));
        assert_eq!((c.io_memory_bytes, c.ring_depth), (1 << 20, 256));
        assert_eq!(c.spin_before_park_us, 0);
    }

    #[test]
    fn system_property_keys_take_either_form() {
        let c = quiet(
            "dataDir=/d\nzookeeper.snapCount=7\nzookeeper.preAllocSize=8\nzookeeper.forceSync=false\n\
             extendedTypesEnabled=yes\nzookeeper.jute.maxbuffer=0x2000\n\
             DigestAuthenticationProvider.superDigest=admin:lK75jTNcA+U9vtVEw5vB51mj/w4=\n\
             zookeeper.4lw.commands.whitelist=*\nzookeeper.znode.container.checkIntervalMs=5\n",
        );
        assert_eq!((c.snap_count, c.pre_alloc_size_bytes), (7, 8192));
        assert!(!c.force_sync && c.extended_types_enabled);
        assert_eq!(c.jute_max_buffer_bytes, 0x2000);
        assert_eq!(c.super_digest.as_deref(), Some("admin:lK75jTNcA+U9vtVEw5vB51mj/w4="));
        assert_eq!(c.four_letter_words, vec!["*"]);
        assert_eq!(c.container_check_interval_ms, 5);
        // Both forms are the same key.
        let (c, w) = ok("dataDir=/d\nsnapCount=7\nzookeeper.snapCount=9\n");
        assert_eq!(c.snap_count, 9);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("'zookeeper.snapCount' at line 3 was already set at line 2"), "{w:?}");
    }

    #[test]
    fn issue13_snap_size_limit_in_kb_triggers_snapshots_by_bytes() {
        let c = quiet("dataDir=/d\n");
        assert_eq!(c.snap_size_limit_bytes, 4 << 30);
        // The latest a snapshot comes: the largest rolls.
        let late = c.snapshot_roll(49_999, (2 << 30) - 1);
        assert_eq!(late, c.snapshot_roll(49_999 + 50_000, (2 << 30) - 1 + (2 << 30)), "rolls wrap below half");
        assert!(!c.snapshot_due(99_999, (4 << 30) - 1, late) && c.snapshot_due(100_000, 0, late));
        assert!(c.snapshot_due(1, 4 << 30, late));
        let c = quiet("dataDir=/d\nzookeeper.snapSizeLimitInKb=64\nsnapCount=1000000\n");
        assert_eq!(c.snap_size_limit_bytes, 64 * 1024);
        let late = c.snapshot_roll(32 * 1024 - 1, 32 * 1024 - 1);
        assert!(!c.snapshot_due(10, 64 * 1024 - 1, late) && c.snapshot_due(10, 64 * 1024, late));
        // The earliest: just over half the size.
        let early = c.snapshot_roll(0, 32 * 1024);
        assert!(!c.snapshot_due(10, 32 * 1024, early) && c.snapshot_due(10, 32 * 1024 + 1, early));
        // Zero or less: by snapCount only, as ZooKeeper.
        let c = quiet("dataDir=/d\nsnapSizeLimitInKb=-1\n");
        assert_eq!(c.snap_size_limit_bytes, 0);
        assert!(!c.snapshot_due(1, u64::MAX, c.snapshot_roll(0, u64::MAX)));
    }

    /// snapCount's random roll, as ZooKeeper's: a snapshot after more than snapCount / 2 plus
    /// a roll below snapCount / 2 txns, so in snapCount / 2 + 1 ..= snapCount (snapCount - 1
    /// when odd), and members with different rolls snapshot at different zxids. Small counts
    /// still snapshot.
    #[test]
    fn snapshots_fall_between_half_and_all_of_snap_count() {
        let c = quiet("dataDir=/d\nsnapCount=1000\n");
        let due_at = |random: u64| {
            let roll = c.snapshot_roll(random, 0);
            (1..=2_000).find(|&n| c.snapshot_due(n, 0, roll)).expect("due within 2,000 txns")
        };
        assert_eq!((due_at(0), due_at(499), due_at(500), due_at(u64::MAX)), (501, 1_000, 501, 501 + u64::MAX % 500));
        let seen: std::collections::BTreeSet<u64> = (0..1_000).map(due_at).collect();
        assert_eq!(seen, (501..=1_000).collect(), "every point of the range, nothing outside it");
        for (count, due) in [("2", 2), ("3", 2)] {
            let c = quiet(&format!("dataDir=/d\nsnapCount={count}\n"));
            let roll = c.snapshot_roll(u64::MAX, 0);
            assert!(!c.snapshot_due(due - 1, 0, roll) && c.snapshot_due(due, 0, roll), "snapCount={count}");
        }
    }

    /// As ZooKeeper's `getSnapCount`: below 2 (zero and negatives too) is raised to 2 with a
    /// warning naming the line, so a snapshot never follows every single txn; not an integer is
    /// still refused (the rule for every key).
    #[test]
    fn snap_count_below_two_is_raised_to_two() {
        for v in ["1", "0", "-5"] {
            let (c, w) = ok(&format!("dataDir=/d\nsnapCount={v}\n"));
            assert_eq!(c.snap_count, SNAP_COUNT_MIN, "snapCount={v}");
            assert!(w.iter().any(|w| w.contains(&format!("snapCount {v} at line 2 is below 2; using 2"))), "{w:?}");
            let roll = c.snapshot_roll(u64::MAX, 0);
            assert!(!c.snapshot_due(1, 0, roll) && c.snapshot_due(2, 0, roll), "snapCount={v}");
        }
        let (c, w) = ok("dataDir=/d\nzookeeper.snapCount=2\n");
        assert_eq!((c.snap_count, w.len()), (2, 0), "{w:?}");
        assert!(parse("dataDir=/d\nsnapCount=many\n").is_err());
    }

    #[test]
    fn properties_syntax() {
        let c = quiet(
            "# comment\n! also a comment\n\n   \t\n  tickTime = 1000  \r\n\
             dataDir: /var/zk\n\
             clientPort 2182\n\
             clientPortAddress\t:\t10.1.2.3\n\
             dataLogDir=/long\\\n      /path\\u0041\n\
             # a comment ending in a backslash does not continue \\\n\
             maxClientCnxns=7\n\
             server.3=h\\:2888:3888\n",
        );
        assert_eq!(c.tick_time_ms, 1000);
        assert_eq!(c.data_dir, PathBuf::from("/var/zk"));
        assert_eq!(c.client_port, 2182);
        assert_eq!(c.client_port_address, "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(c.data_log_dir, PathBuf::from("/long/pathA"));
        assert_eq!(c.max_client_cnxns, 7);
        assert_eq!(
            (c.servers[0].id, c.servers[0].first().host.as_str(), c.servers[0].first().quorum_port),
            (3, "h", 2888)
        );
        // An escaped separator belongs to the key; an even run of backslashes does not continue.
        let (_, w) = ok("dataDir=/d\\\\\nweird\\=key=1\n");
        assert!(w[0].contains("unknown key 'weird=key' at line 2"), "{w:?}");
        // A value may be empty where that means something.
        assert!(quiet("dataDir=/d\n4lw.commands.whitelist=\n").four_letter_words.is_empty());
        // Relative paths stay relative (to the working directory).
        assert_eq!(quiet("dataDir=data\n").data_dir, PathBuf::from("data"));
    }

    #[test]
    fn unknown_keys_warn_and_known_zookeeper_keys_do_not() {
        let (_, w) = ok("dataDir=/d\nfoo=1\nzookeeper.bogus=2\n");
        assert_eq!(
            w,
            vec![
                "test.cfg: unknown key 'foo' at line 2 (ignored)".to_string(),
                "test.cfg: unknown key 'zookeeper.bogus' at line 3 (ignored)".to_string(),
            ]
        );
        quiet(
            "dataDir=/d\ninitLimit=10\nsyncLimit=5\nserver.1=127.0.0.1:2888:3888\nadmin.serverPort=8080\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\nmetricsProvider.className=x\n\
             metricsProvider.httpPort=7000\nstandaloneEnabled=true\nreconfigEnabled=false\n\
             quorumListenOnAllIPs=false\nelectionAlg=3\npeerType=participant\nclientPortListenBacklog=50\n\
             globalOutstandingLimit=1000\nsyncEnabled=true\nzookeeper.admin.idleTimeout=30000\n\
             skipACL=no\nquorum.auth.enableSasl=false\n",
        );
        let (_, w) = ok("dataDir=/d\nskipACL=yes\n");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("skipACL at line 2"), "{w:?}");
        // A TLS port without its key store is refused, not warned about (tls::TlsKeys).
        let err = Config::parse("dataDir=/d\nsecureClientPort=2281\n", "test.cfg").unwrap_err().to_string();
        assert!(err.contains("ssl.keyStore.location"), "{err}");
        let (c, w) = ok("dataDir=/d\nzookeeper.secureClientPort=2281\nzookeeper.ssl.keyStore.location=/k.pem\n");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.client_tls.map(|t| t.secure_addr.map(|a| a.port())), Some(Some(2281)));
    }

    /// Issue 15: every security key is honoured or refused with its name, never ignored.
    #[test]
    fn security_keys_are_honoured_or_refused_by_name() {
        // Quorum TLS is honoured; asked for without its stores it is refused naming them.
        let err = Config::parse("dataDir=/d\nzookeeper.sslQuorum=true\n", "test.cfg").unwrap_err().to_string();
        assert!(err.contains("ssl.quorum.keyStore.location"), "{err}");
        let err = Config::parse("dataDir=/d\nssl.quorum.trustStore.location=/t.pem\n", "test.cfg").unwrap_err();
        assert!(err.to_string().contains("sslQuorum"), "{err}");
        let refused = [
            "authProvider.1=org.example.CustomAuthenticationProvider",
            "kerberos.principal=zk/h@R",
            "sasl.serverconfig=Other",
            "IPAuthenticationProvider.usexforwardedfor=true",
            "DigestAuthenticationProvider.digestAlg=SHA3-256",
        ];
        for line in refused {
            let key = line.split('=').next().unwrap();
            match Config::parse(&format!("dataDir=/d\n{line}\n"), "test.cfg") {
                Err(e @ ConfigError::Unsupported { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.starts_with(&format!("test.cfg:2: {key}: ")), "{msg}");
                    assert!(msg.contains("not supported yet") && msg.contains(SECURITY_DOC), "{msg}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        quiet(
            "dataDir=/d\nsslQuorum=false\nclient.portUnification=false\nquorum.auth.enableSasl=false\n\
             quorum.auth.serverRequireSasl=false\nsessionRequireClientSASLAuth=false\nenforce.auth.enabled=false\n\
             admin.forceHttps=false\nauthProvider.1=org.apache.zookeeper.server.auth.DigestAuthenticationProvider\n\
             authProvider.2=ip\nzookeeper.DigestAuthenticationProvider.digestAlg=SHA1\n\
             zookeeper.IPAuthenticationProvider.usexforwardedfor=false\n",
        );
    }

    /// Client SASL's keys (issue 15): the JAAS file, superUser, the principal rules,
    /// enforce.auth and sessionRequireClientSASLAuth, with or without `zookeeper.`.
    #[test]
    fn sasl_and_enforce_auth_keys_are_honoured() {
        let (c, w) = ok("dataDir=/d
java.security.auth.login.config=/j.conf
zookeeper.superUser=admin
\
             kerberos.removeHostFromPrincipal=true
zookeeper.kerberos.removeRealmFromPrincipal=true
\
             authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider
\
             enforce.auth.enabled=true
zookeeper.enforce.auth.schemes= sasl , digest,\n");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(c.sasl_keys.map(|k| (k.jaas_path, k.section)), Some(("/j.conf".into(), "Server".to_string())));
        assert_eq!(c.sasl_super_user.as_deref(), Some("admin"));
        assert_eq!(c.sasl_rules, crate::sasl::PrincipalRules { remove_host: true, remove_realm: true });
        assert_eq!(c.enforce_auth_schemes, ["sasl", "digest"]);
        assert!(c.sasl.is_none(), "parse reads no file");
        // sessionRequireClientSASLAuth wins over enforce.auth.* and means sasl
        let (c, _) = ok("dataDir=/d
enforce.auth.enabled=false
sessionRequireClientSASLAuth=true
");
        assert_eq!(c.enforce_auth_schemes, ["sasl"]);
        let (c, _) = ok("dataDir=/d
enforce.auth.schemes=digest
");
        assert!(c.enforce_auth_schemes.is_empty(), "schemes without enabled enforce nothing");
        let err = Config::parse(
            "dataDir=/d
enforce.auth.enabled=true
",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("enforce.auth.schemes must be configured"), "{err}");
        let err = Config::parse(
            "dataDir=/d
enforce.auth.schemes=sasl,krb
",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("t:2:") && err.contains("krb is not available"), "{err}");
        // load_sasl: the JAAS file is required when sasl is, and may come from SERVER_JVMFLAGS
        let (mut c, _) = ok("dataDir=/d
sessionRequireClientSASLAuth=true
");
        let err = c.load_sasl("t", "-Xmx1g", &mut Vec::new()).unwrap_err().to_string();
        assert!(err.contains("no JAAS file"), "{err}");
        let err = c
            .load_sasl("t", "-Djava.security.auth.login.config=/nonexistent/j.conf", &mut Vec::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/j.conf"), "{err}");
    }

    /// The SASL example parses without a warning, and its JAAS file gives the server its users.
    #[test]
    fn the_sasl_example_config_and_jaas_file_parse() {
        let (c, warnings) = Config::parse(include_str!("../configs/sasl-standalone.cfg"), "sasl").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(c.enforce_auth_schemes, ["sasl"]);
        assert_eq!(c.sasl_super_user.as_deref(), Some("admin"));
        let jaas = crate::sasl::jaas::Jaas::parse(include_str!("../configs/sasl-jaas.conf")).unwrap();
        let users = jaas.digest_users("Server").unwrap();
        assert_eq!(users.password("app1").as_deref(), Some("change-me-app1"));
        assert_eq!(users.len(), 2);
        assert_eq!(jaas.digest_credentials("Client").unwrap().0, "app1");
        // The Kerberos example: its Server section is a Kerberos identity.
        let jaas = crate::sasl::jaas::Jaas::parse(include_str!("../configs/kerberos-jaas.conf")).unwrap();
        assert_eq!(
            jaas.krb5_identity("Server").unwrap(),
            Some(("/etc/ringkeeper/zookeeper.keytab".into(), "zookeeper/zk1.example.com@EXAMPLE.COM".into()))
        );
        assert!(jaas.krb5_identity("Client").unwrap_err().to_string().contains("keyTab and principal"));
        // The quorum Kerberos example: both quorum sections are Kerberos identities.
        let jaas = crate::sasl::jaas::Jaas::parse(include_str!("../configs/quorum-kerberos-jaas.conf")).unwrap();
        for section in ["QuorumServer", "QuorumLearner"] {
            let (keytab, principal) = jaas.krb5_identity(section).unwrap().unwrap();
            assert_eq!(
                (keytab.as_str(), principal.as_str()),
                ("/etc/ringkeeper/zkquorum.keytab", "zkquorum/zk1.example.com@EXAMPLE.COM")
            );
        }
    }

    /// Quorum SASL's keys (issue 15): the example parses, its JAAS file (quorum sections only)
    /// loads without a client Server section, and half a configuration refuses the start.
    #[test]
    fn the_dynamic_config_file_gives_the_server_lines_and_version() {
        let dir = crate::storage::files::tests::TempDir::new("dynamic-config");
        let dynamic = dir.0.join("zoo.cfg.dynamic.100000003");
        std::fs::write(&dynamic, "server.1=127.0.0.1:1:2:participant;127.0.0.1:3\nserver.2=127.0.0.2:1:2:observer;4\n")
            .unwrap();
        let cfg = dir.0.join("zoo.cfg");
        std::fs::write(&cfg, format!("dataDir=/d\nreconfigEnabled=true\ndynamicConfigFile={}\n", dynamic.display()))
            .unwrap();
        let (c, warnings) = Config::load(&cfg).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(c.reconfig_enabled && c.standalone_enabled && c.is_ensemble());
        assert_eq!(c.servers.iter().map(|s| (s.id, s.observer)).collect::<Vec<_>>(), vec![(1, false), (2, true)]);
        // No version line: the file name's (ZooKeeper's files hold none).
        assert_eq!(c.dynamic_config_version, 0x1_0000_0003);
        assert_eq!(c.config_path.as_deref(), Some(cfg.as_path()));
        std::fs::write(&dynamic, "server.1=127.0.0.1:1:2;3\nversion=100000009\n").unwrap();
        assert_eq!(Config::load(&cfg).unwrap().0.dynamic_config_version, 0x1_0000_0009);
        // Server lines in both files, or a bad line in the dynamic one, refuse the start.
        std::fs::write(&cfg, format!("dataDir=/d\nserver.1=h:1:2\ndynamicConfigFile={}\n", dynamic.display())).unwrap();
        assert!(Config::load(&cfg).unwrap_err().to_string().contains("both here and in dynamicConfigFile"));
        std::fs::write(&cfg, format!("dataDir=/d\ndynamicConfigFile={}\n", dynamic.display())).unwrap();
        std::fs::write(&dynamic, "server.1=h:1\n").unwrap();
        assert!(Config::load(&cfg).unwrap_err().to_string().contains("server.1"));
    }

    #[test]
    fn quorum_sasl_keys_and_the_example_config() {
        let (mut c, warnings) = Config::parse(include_str!("../configs/quorum-sasl.cfg"), "q").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let keys = c.quorum_sasl_keys.clone().unwrap();
        assert!(keys.learner_require && keys.server_require);
        assert_eq!((keys.learner_section.as_str(), keys.server_section.as_str()), ("QuorumLearner", "QuorumServer"));
        assert_eq!(keys.authenticating_max, 20);
        let dir = crate::storage::files::tests::TempDir::new("quorum-sasl");
        let jaas = dir.0.join("quorum-jaas.conf");
        std::fs::write(&jaas, include_str!("../configs/quorum-jaas.conf")).unwrap();
        c.sasl_keys.as_mut().unwrap().jaas_path = jaas.clone();
        let mut warnings = Vec::new();
        c.load_sasl("q", "", &mut warnings).unwrap();
        let q = c.quorum_sasl.as_ref().unwrap();
        assert_eq!((q.username(), q.mechanism_name()), ("zkquorum", "DIGEST-MD5"));
        assert!(c.sasl.is_none() && warnings[0].contains("clients cannot authenticate with SASL"), "{warnings:?}");
        // Without the key, SERVER_JVMFLAGS names the file; without either, the start is refused.
        let bare = "dataDir=/d\nserver.1=127.0.0.1:1:2\nserver.2=127.0.0.2:1:2\nquorum.auth.enableSasl=true\n";
        let (mut c, _) = Config::parse(bare, "t").unwrap();
        assert!(c.load_sasl("t", "", &mut Vec::new()).unwrap_err().to_string().contains("needs a JAAS file"));
        c.load_sasl("t", &format!("-Djava.security.auth.login.config={}", jaas.display()), &mut Vec::new()).unwrap();
        assert!(c.quorum_sasl.is_some());
        // A JAAS file without the learner section names it.
        let (mut c, _) = Config::parse(&format!("{bare}quorum.auth.learner.saslLoginContext=Other\n"), "t").unwrap();
        let err = c.load_sasl("t", &format!("-Djava.security.auth.login.config={}", jaas.display()), &mut Vec::new());
        assert!(err.unwrap_err().to_string().contains("no JAAS section named 'Other'"));
        // Requiring SASL without enabling it, and a bad thread count, refuse the start.
        for (cfg, says) in [
            ("quorum.auth.learnerRequireSasl=true", "quorum.auth.enableSasl is disabled"),
            ("zookeeper.quorum.auth.serverRequireSasl=true", "quorum.auth.enableSasl is disabled"),
            ("quorum.cnxn.threads.size=0", "must be from 1"),
            ("quorum.auth.enableSasl=maybe", "true/false"),
        ] {
            let err = Config::parse(&format!("dataDir=/d\n{cfg}\n"), "t").unwrap_err().to_string();
            assert!(err.contains(says), "{cfg}: {err}");
        }
        quiet("dataDir=/d\nquorum.auth.enableSasl=false\nquorum.cnxn.threads.size=8\n");
    }

    #[test]
    fn duplicate_keys_warn_and_the_last_wins() {
        let (c, w) = ok("dataDir=/a\ntickTime=100\ndataDir=/b\nserver.1=x:1:2\nserver.01=y:1:2\n");
        assert_eq!(c.data_dir, PathBuf::from("/b"));
        assert_eq!((c.servers.len(), c.servers[0].first().host.as_str()), (1, "y"));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("'dataDir' at line 3 was already set at line 1"), "{w:?}");
        assert!(w[1].contains("'server.01' at line 5 was already set at line 4"), "{w:?}");
    }

    #[test]
    fn bad_values_name_line_and_key() {
        let cases: &[(&str, &str)] = &[
            ("tickTime", "abc"),
            ("tickTime", "0"),
            ("tickTime", "-5"),
            ("tickTime", "3600001"),
            ("tickTime", ""),
            ("dataDir", ""),
            ("dataLogDir", ""),
            ("clientPort", "0"),
            ("clientPort", "65536"),
            ("clientPort", "21 81"),
            ("clientPortAddress", "example.com"),
            ("maxClientCnxns", "-1"),
            ("minSessionTimeout", "0"),
            ("maxSessionTimeout", "-2"),
            ("maxSessionTimeout", "2147483648"),
            ("snapCount", "x"),
            ("preAllocSize", "0"),
            ("preAllocSize", "99999999999"),
            ("autopurge.snapRetainCount", "x"),
            ("autopurge.purgeInterval", "1.5"),
            ("forceSync", "maybe"),
            ("zookeeper.extendedTypesEnabled", "1"),
            ("jute.maxbuffer", "1023"),
            ("jute.maxbuffer", "268435457"),
            ("jute.maxbuffer", "0xzz"),
            ("zookeeper.DigestAuthenticationProvider.superDigest", "nocolon"),
            ("zookeeper.DigestAuthenticationProvider.superDigest", ":lK75jTNcA+U9vtVEw5vB51mj/w4="),
            ("zookeeper.DigestAuthenticationProvider.superDigest", "super:abc="),
            ("zookeeper.DigestAuthenticationProvider.superDigest", "super:lK75jTNcA+U9vtVEw5vB51mj/w4"),
            ("zookeeper.DigestAuthenticationProvider.superDigest", "super:lK75jTNcA+U9vtVEw5vB51mj/w5="),
            ("zookeeper.DigestAuthenticationProvider.superDigest", "super:lK75jTNcA+U9vtVEw5vB51mj*w4="),
            ("znode.container.checkIntervalMs", "0"),
            ("initLimit", "0"),
            ("syncLimit", "x"),
            ("server.x", "a:1:2"),
            ("server.1", ""),
            ("ringkeeper.clientCores", "0"),
            ("ringkeeper.clientCores", "257"),
            ("ringkeeper.cpuPinning", "on"),
            ("ringkeeper.clientCpus", ""),
            ("ringkeeper.clientCpus", "1,,2"),
            ("ringkeeper.clientCpus", "3-1"),
            ("ringkeeper.clientCpus", "a"),
            ("ringkeeper.clientCpus", "1024"),
            ("ringkeeper.clientCpus", "0-300"),
            ("ringkeeper.pipelineCpu", "-1"),
            ("ringkeeper.pipelineCpu", "1024"),
            ("ringkeeper.channelDepth", "0"),
            ("ringkeeper.batchTxnsMax", "0"),
            ("ringkeeper.batchTxnsMax", "65537"),
            ("ringkeeper.ioMemoryBytes", "1000"),
            ("ringkeeper.ringDepth", "100"),
            ("ringkeeper.ringDepth", "65536"),
            ("ringkeeper.ringDepth", "4"),
            ("ringkeeper.spinBeforeParkUs", "10001"),
            ("ringkeeper.spinBeforeParkUs", "-1"),
            ("dataLogDir", "/x\\u00zz"),
        ];
        for (key, value) in cases {
            let text = format!("dataDir=/d\n# comment\n\n{key}={value}\ntickTime=2000\n");
            match parse(&text) {
                Err(ConfigError::BadValue { origin, line, key: k, value: v, why }) => {
                    assert_eq!((origin.as_str(), line, k.as_str()), ("test.cfg", 4, *key), "{text:?}");
                    assert_eq!(v, *value);
                    assert!(!why.is_empty());
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn missing_syntax_and_cross_key_errors() {
        assert!(matches!(parse("tickTime=2000\n"), Err(ConfigError::Missing { ref key, .. }) if key == "dataDir"));
        assert!(matches!(parse(""), Err(ConfigError::Missing { .. })));
        for (text, line) in
            [("dataDir=/d\njustaword\n", 2), ("dataDir=/d\n\n=value\n", 3), ("  :x\n", 1), ("a\\u12=b\n", 1)]
        {
            match parse(text) {
                Err(ConfigError::Syntax { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // min > max: blame the later explicit line.
        match parse("dataDir=/d\nminSessionTimeout=9000\nmaxSessionTimeout=5000\n") {
            Err(ConfigError::BadValue { line: 3, key, .. }) => assert_eq!(key, "maxSessionTimeout"),
            other => panic!("{other:?}"),
        }
        match parse("dataDir=/d\nmaxSessionTimeout=5000\nminSessionTimeout=9000\n") {
            Err(ConfigError::BadValue { line: 3, key, .. }) => assert_eq!(key, "minSessionTimeout"),
            other => panic!("{other:?}"),
        }
        // An explicit min above the default max (20 × tickTime).
        match parse("dataDir=/d\ntickTime=100\nminSessionTimeout=3000\n") {
            Err(e @ ConfigError::BadValue { line: 3, .. }) => {
                assert!(e.to_string().contains("20 × tickTime"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // clientCpus must have one CPU per client core.
        match parse("dataDir=/d\nringkeeper.clientCores=2\nringkeeper.clientCpus=1\n") {
            Err(ConfigError::BadValue { line: 3, key, .. }) => {
                assert_eq!(key, "ringkeeper.clientCpus")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn client_core_on_pipeline_takes_one_client_core_and_no_cpu_list() {
        // Off by default; on, the one client core is implied whatever the CPU count.
        assert!(!quiet("dataDir=/d\n").client_core_on_pipeline);
        let c = quiet("dataDir=/d\nringkeeper.clientCoreOnPipeline=true\n");
        assert_eq!((c.client_core_on_pipeline, c.client_cores), (true, 1));
        let c = quiet("dataDir=/d\nringkeeper.clientCores=1\nringkeeper.clientCoreOnPipeline=yes\n");
        assert_eq!((c.client_core_on_pipeline, c.client_cores), (true, 1));
        // A later `false` turns it off again, so more client cores are then fine.
        let (c, w) = ok("dataDir=/d\nringkeeper.clientCoreOnPipeline=true\nringkeeper.clientCoreOnPipeline=false\nringkeeper.clientCores=3\n");
        assert_eq!((c.client_core_on_pipeline, c.client_cores), (false, 3));
        assert!(w.len() == 1 && w[0].contains("the last value wins"), "{w:?}");
        for refused in [
            "dataDir=/d\nringkeeper.clientCores=2\nringkeeper.clientCoreOnPipeline=true\n",
            "dataDir=/d\nringkeeper.clientCpus=1\nringkeeper.clientCoreOnPipeline=true\n",
        ] {
            match parse(refused) {
                Err(ConfigError::BadValue { line: 3, key, why, .. }) => {
                    assert_eq!(key, "ringkeeper.clientCoreOnPipeline");
                    assert!(why.contains("ringkeeper.clientCores=1"), "{why}");
                }
                other => panic!("{refused:?}: {other:?}"),
            }
        }
        assert!(parse("dataDir=/d\nringkeeper.clientCoreOnPipeline=maybe\n").is_err());
    }

    #[test]
    fn messages_name_file_line_and_key() {
        let e = parse("dataDir=/d\nclientPort=70000\n").unwrap_err();
        assert_eq!(e.to_string(), "test.cfg:2: bad value \"70000\" for clientPort: must be from 1 to 65535");
        let e = parse("dataDir=/d\nhello\n").unwrap_err();
        assert_eq!(e.to_string(), "test.cfg:2: expected `key=value` or `key: value`, found \"hello\"");
        assert_eq!(parse("").unwrap_err().to_string(), "test.cfg: required key dataDir is not set");
        let e = Config::load(Path::new("/nonexistent/ringkeeper/zoo.cfg")).unwrap_err();
        assert!(matches!(e, ConfigError::Io { .. }));
        assert!(e.to_string().starts_with("cannot read config file /nonexistent/ringkeeper/zoo.cfg: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn load_reads_a_file() {
        let path = std::env::temp_dir().join(format!("ringkeeper-config-test-{}.cfg", std::process::id()));
        std::fs::write(&path, "dataDir=/d\nclientPort=3000\nbogus=1\n").unwrap();
        let r = Config::load(&path);
        std::fs::remove_file(&path).unwrap();
        let (c, w) = r.unwrap();
        assert_eq!(c.client_port, 3000);
        assert_eq!(w, vec![format!("{}: unknown key 'bogus' at line 3 (ignored)", path.display())]);
    }

    #[test]
    fn timeouts_default_from_tick_time_and_clamp() {
        let c = quiet("dataDir=/d\ntickTime=500\n");
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (1000, 10000));
        assert_eq!(c.negotiate_session_timeout(100), 1000);
        assert_eq!(c.negotiate_session_timeout(-5), 1000);
        assert_eq!(c.negotiate_session_timeout(i32::MIN), 1000);
        assert_eq!(c.negotiate_session_timeout(5000), 5000);
        assert_eq!(c.negotiate_session_timeout(60_000), 10_000);
        assert_eq!(c.negotiate_session_timeout(i32::MAX), 10_000);
        // -1 means the default, as in ZooKeeper; one explicit bound keeps the other's default.
        let c = quiet("dataDir=/d\ntickTime=500\nminSessionTimeout=-1\nmaxSessionTimeout=-1\n");
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (1000, 10000));
        let c = quiet("dataDir=/d\nmaxSessionTimeout=90000\n");
        assert_eq!((c.min_session_timeout_ms, c.max_session_timeout_ms), (4000, 90000));
        // Huge tick times saturate rather than overflow, and clamp within i32.
        let c = quiet("dataDir=/d\ntickTime=3600000\nmaxSessionTimeout=2147483647\n");
        assert_eq!(c.min_session_timeout_ms, 7_200_000);
        assert_eq!(c.negotiate_session_timeout(i32::MAX), i32::MAX);
        // A hand-built inverted range does not panic (ZooKeeper's order: min, then max).
        let mut c = c;
        c.min_session_timeout_ms = 5000;
        c.max_session_timeout_ms = 1000;
        assert_eq!(c.negotiate_session_timeout(3000), 1000);
        c.max_session_timeout_ms = u32::MAX;
        assert_eq!(c.negotiate_session_timeout(i32::MAX), i32::MAX);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("1,2,3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_cpu_list("1-3"), Ok(vec![1, 2, 3]));
        assert_eq!(parse_cpu_list(" 0-1 , 4 ,6-6"), Ok(vec![0, 1, 4, 6]));
        assert_eq!(parse_cpu_list("7"), Ok(vec![7]));
        assert_eq!(parse_cpu_list("1023"), Ok(vec![1023]));
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("1,").is_err());
        assert!(parse_cpu_list("1-").is_err());
        assert!(parse_cpu_list("-1").is_err());
        assert!(parse_cpu_list("2-1").is_err());
        assert!(parse_cpu_list("0-1023").is_err());
        // Without clientCores, the list sets the number of client cores.
        let c = quiet("dataDir=/d\nringkeeper.clientCpus=2-4\n");
        assert_eq!((c.client_cores, c.client_cpus), (3, Some(vec![2, 3, 4])));
        // Shared CPUs warn.
        let (_, w) = ok("dataDir=/d\nringkeeper.clientCpus=1,1\n");
        assert!(w.len() == 1 && w[0].contains("names a CPU twice"), "{w:?}");
        let (_, w) = ok("dataDir=/d\nringkeeper.pipelineCpu=2\nringkeeper.clientCpus=1-2\n");
        assert!(w.len() == 1 && w[0].contains("pipeline CPU 2"), "{w:?}");
        let (_, w) = ok("dataDir=/d\nringkeeper.clientCpus=0\n");
        assert!(w.len() == 1 && w[0].contains("pipeline CPU 0"), "{w:?}");
        // CPU numbers without pinning are pointless.
        let (c, w) = ok("dataDir=/d\nringkeeper.cpuPinning=false\nringkeeper.clientCpus=0\nringkeeper.pipelineCpu=0\n");
        assert!(!c.cpu_pinning);
        assert!(w.len() == 1 && w[0].contains("line 3, 4") && w[0].contains("cpuPinning=false"), "{w:?}");
    }

    #[test]
    fn snapshots_purging_and_sizes() {
        let (c, w) = ok("dataDir=/d\nautopurge.snapRetainCount=1\nautopurge.purgeInterval=-3\n");
        assert_eq!((c.autopurge_snap_retain_count, c.autopurge_purge_interval_hours), (3, 0));
        assert_eq!(
            w,
            vec!["test.cfg: autopurge.snapRetainCount 1 at line 2 is below the minimum; using 3".to_string()]
        );
        let c = quiet("dataDir=/d\npreAllocSize=4\njute.maxbuffer=0xfffff\nsnapCount=#10\n");
        assert_eq!((c.pre_alloc_size_bytes, c.jute_max_buffer_bytes, c.snap_count), (4096, 0xfffff, 16));
        let c = quiet("dataDir=/d\nclientPortAddress=[::]\n");
        assert_eq!(c.client_addr(), "[::]:2181".parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn odd_input_never_panics() {
        let pieces = [
            "", "=", ":", " ", "\\", "\\u", "\\u12", "\\uD800", "ä", "ö=ü", "#", "!", "\r", "\t", "server.", "0x", "-",
            "+", "#x",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let text = format!("{a}{b}{c}\n{b}{c}\\\n{a}");
                    let _ = parse(&text);
                    let _ = parse(&format!("dataDir=/d\ntickTime={a}{b}{c}\nringkeeper.clientCpus={c}{b}"));
                }
            }
        }
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_int("99999999999999999999"), None);
        assert_eq!(parse_int("-0x10"), Some(-16));
    }

    #[test]
    fn server_lines_parse_as_zookeeper_writes_them() {
        let p = |v: &str| parse_server_spec(2, v);
        let s = p("zk2.example:2888:3888:observer;[::1]:2182").unwrap();
        let a = s.first();
        assert_eq!((a.host.as_str(), a.quorum_port, a.election_port, s.observer), ("zk2.example", 2888, 3888, true));
        assert_eq!(s.client, Some(("::1".to_string(), 2182)));
        assert_eq!(s.value(), "zk2.example:2888:3888:observer;[::1]:2182");
        let s = p("[fe80::1]:2888:3888:PARTICIPANT;0.0.0.0:2181").unwrap();
        assert_eq!(
            (s.first().host.as_str(), s.observer, s.client.clone()),
            ("fe80::1", false, Some(("0.0.0.0".into(), 2181)))
        );
        assert_eq!(s.value(), "[fe80::1]:2888:3888:participant;0.0.0.0:2181");
        let s = p("h:1:2;2181").unwrap();
        assert_eq!(
            (s.client.clone(), s.value()),
            (Some((String::new(), 2181)), "h:1:2:participant;0.0.0.0:2181".into())
        );
        // Several addresses ('|'), each with its own ports; a role on any (all that give one agree).
        let s = p("a:1:2|[::1]:3:4:observer|c:5:6 ; 2181").unwrap();
        let addrs: Vec<_> = s.addrs.iter().map(|a| (a.host.as_str(), a.quorum_port, a.election_port)).collect();
        assert_eq!(addrs, [("a", 1, 2), ("::1", 3, 4), ("c", 5, 6)]);
        assert!(s.observer);
        assert_eq!(s.value(), "a:1:2|[::1]:3:4|c:5:6:observer;0.0.0.0:2181");
        assert!(!p("a:1:2:participant|b:1:2").unwrap().observer);
        let many: Vec<String> = (0..SERVER_ADDRESSES_MAX).map(|i| format!("h{i}:1:2")).collect();
        assert_eq!(p(&many.join("|")).unwrap().addrs.len(), SERVER_ADDRESSES_MAX);
        for bad in [
            "",
            "h",
            "h:2888",
            ":2888:3888",
            "h:2888:2888",
            "h:0:3888",
            "h:2888:70000",
            "h:2888:3888:leader",
            "h:2888:3888;",
            "h:2888:3888;x",
            "[::1:2888:3888",
            "h:1:2:observer:x",
            "a:1:2|",
            "|a:1:2",
            "a:1:2||b:1:2",
            "a:1:2|b:1",
            "a:1:2:observer|b:1:2:participant",
            "a:1:2|a:1:2",
            "a:1:2|b:3:3",
            "a:1:2;3:4|b:1:2",
        ] {
            assert!(p(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_server_spec(0, "h:1:2").is_err() && parse_server_spec(255, "h:1:2").is_err());
        let too_many: Vec<String> = (0..=SERVER_ADDRESSES_MAX).map(|i| format!("h{i}:1:2")).collect();
        assert!(p(&too_many.join("|")).unwrap_err().contains("at most"));
        // In a file, a bad server line is an error naming the line.
        match parse("dataDir=/d\nserver.1=h:2888\n") {
            Err(ConfigError::BadValue { line, key, .. }) => assert_eq!((line, key.as_str()), (2, "server.1")),
            other => panic!("expected a bad value, got {other:?}"),
        }
    }

    /// A member serves clients where its server line says, by ZooKeeper's rules against
    /// clientPort/clientPortAddress (`QuorumPeerConfig.setupClientPort`).
    #[test]
    fn a_members_client_address_comes_from_its_server_line() {
        let addr = |text: &str, id| quiet(text).member_client_addr(id);
        let lines = "dataDir=/d\nserver.1=h:1:2;127.0.0.7:3001\nserver.2=h:3:4;3002\nserver.3=h:5:6\n";
        assert_eq!(addr(lines, 1), Ok("127.0.0.7:3001".parse().unwrap()));
        assert_eq!(addr(lines, 2), Ok("0.0.0.0:3002".parse().unwrap()));
        // No client part: clientPort/clientPortAddress (or the default port).
        assert_eq!(addr(lines, 3), Ok("0.0.0.0:2181".parse().unwrap()));
        let with = |extra: &str, id| addr(&format!("{lines}{extra}"), id);
        assert_eq!(with("clientPort=2999\nclientPortAddress=127.0.0.9\n", 3), Ok("127.0.0.9:2999".parse().unwrap()));
        // Both given: they must agree; a wildcard clientPortAddress compares ports only.
        assert_eq!(with("clientPort=3001\n", 1), Ok("127.0.0.7:3001".parse().unwrap()));
        assert_eq!(with("clientPort=3001\nclientPortAddress=127.0.0.7\n", 1), Ok("127.0.0.7:3001".parse().unwrap()));
        let err = with("clientPort=3000\n", 1).unwrap_err();
        assert!(err.contains("server.1") && err.contains("127.0.0.7:3001") && err.contains("0.0.0.0:3000"), "{err}");
        assert!(with("clientPort=3001\nclientPortAddress=127.0.0.8\n", 1).is_err());
        assert!(with("clientPort=3002\nclientPortAddress=127.0.0.1\n", 2).is_err());
        // A client host name is resolved.
        assert_eq!(addr("dataDir=/d\nserver.1=h:1:2;localhost:3005\nserver.2=h:3:4\n", 1).map(|a| a.port()), Ok(3005));
    }

    /// The shipped example ensemble parses: three participants, each its own client port.
    #[test]
    fn the_example_ensemble_configs_parse() {
        let files = [
            include_str!("../configs/ensemble-3/zoo1.cfg"),
            include_str!("../configs/ensemble-3/zoo2.cfg"),
            include_str!("../configs/ensemble-3/zoo3.cfg"),
        ];
        for (i, text) in files.iter().enumerate() {
            let (c, warnings) = Config::parse(text, "ensemble-3").unwrap();
            assert!(warnings.is_empty(), "{warnings:?}");
            assert!(c.is_ensemble());
            assert_eq!(
                c.servers.iter().map(|s| (s.id, s.observer)).collect::<Vec<_>>(),
                [(1, false), (2, false), (3, false)]
            );
            assert_eq!(c.client_port, 2181 + i as u16);
            assert_eq!((c.init_limit_ticks, c.sync_limit_ticks, c.tick_time_ms), (10, 4, 500));
        }
    }

    /// The quorum TLS example parses without a warning: mutual TLS between the members.
    #[test]
    fn the_quorum_tls_example_config_parses() {
        let (c, warnings) = Config::parse(include_str!("../configs/quorum-tls.cfg"), "quorum-tls").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(c.servers.len(), 3);
        let q = c.quorum_tls.expect("quorum TLS settings");
        assert!(q.ssl_quorum && !q.port_unification && q.reload_cert_files);
        assert_eq!(q.stores.client_auth, crate::tls::ClientAuth::Need);
        assert!(q.stores.hostname_verification && q.stores.client_hostname_verification);
        assert!(c.client_tls.is_none());
    }

    /// The TLS example parses without a warning: TLS on 2281 with client certificates.
    #[test]
    fn the_tls_example_config_parses() {
        let (c, warnings) = Config::parse(include_str!("../configs/tls-standalone.cfg"), "tls").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let tls = c.client_tls.expect("TLS settings");
        assert_eq!(tls.secure_addr, Some("0.0.0.0:2281".parse().unwrap()));
        assert_eq!(tls.stores.client_auth, crate::tls::ClientAuth::Need);
        assert_eq!(tls.x509_super_user.as_deref(), Some("CN=admin,O=Example"));
    }

    /// The commented production layout parses without a warning and says what it says.
    #[test]
    fn the_production_config_parses() {
        let (c, warnings) = Config::parse(include_str!("../configs/production-16core.cfg"), "production").unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(c.is_ensemble() && c.cpu_pinning);
        assert_eq!((c.client_cores, c.pipeline_cpu), (12, Some(1)));
        assert_eq!(c.client_cpus, Some((2..=13).collect::<Vec<_>>()));
        assert_eq!((c.fsync_warning_threshold_ms, c.snap_count), (200, 100_000));
        assert!(c.four_letter_words.iter().any(|w| w == "mntr"));
    }
}
