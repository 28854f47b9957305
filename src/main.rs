//! The `ringkeeper` binary: subcommands over the library. Without a subcommand it serves a
//! standalone node on the embedded default config (what `cargo run --release` does);
//! `log-dump`, `snap-dump` and `purge` inspect and tidy a data directory offline, `log-truncate`
//! cuts a damaged txn log where the operator says (the server never does); `cli` is the
//! zkCli look-alike client shell (`src/cli/`).
//! Exit codes: 0 fine, 1 a damaged file or a server error, 2 bad usage or an unreadable file;
//! `cli` exits as zkCli does (0, 1 for a failed command, 127 for an unknown one).
//! Rules: every failure is a message on stderr and a non-zero exit, never a panic.

use clap::{Parser, Subcommand};
use ringkeeper::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ringkeeper",
    version,
    about = "A ZooKeeper-compatible coordination service, thread-per-core on io_uring"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a server. Without --config, the embedded default (configs/standalone.cfg).
    Serve {
        /// A zoo.cfg-format file.
        #[arg(long, short = 'c', value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print every txn of a txn log segment (log.<zxid>), checking every batch's checksum.
    LogDump { file: PathBuf },
    /// Cut a damaged txn log segment before its damage, as the server's refusal to start
    /// suggests: the segment keeps its valid batches that end at or before OFFSET; a copy of it
    /// and every later segment are moved into LOG_DIR/damaged.<time>/ (nothing is deleted). The
    /// txns after the cut are lost. Without --yes, only says what it would do. Stop the server
    /// first.
    LogTruncate {
        /// The dataLogDir (dataDir when there is no separate one).
        #[arg(long, value_name = "DIR")]
        log_dir: PathBuf,
        /// The damaged segment's file name, e.g. log.0000000100000001.
        #[arg(long, value_name = "NAME")]
        file: String,
        /// The byte offset of the damage, as the server's message gives it.
        #[arg(long, value_name = "N")]
        offset: u64,
        /// Do it (without: a dry run).
        #[arg(long)]
        yes: bool,
    },
    /// Print a snapshot (snapshot.<zxid>): every znode with its Stat and ACL, and the sessions.
    SnapDump {
        file: PathBuf,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Include each znode's data (UTF-8, or base64: when it is not).
        #[arg(long)]
        data: bool,
    },
    /// Remove old snapshots and the log segments only they need, keeping the newest N (at
    /// least 3), as ZooKeeper's PurgeTxnLog does. Stop the server first or use autopurge.
    Purge {
        /// The dataDir (snapshots).
        data_dir: PathBuf,
        /// The dataLogDir (txn log), when it is not the dataDir.
        log_dir: Option<PathBuf>,
        /// Snapshots to keep.
        #[arg(short = 'n', long = "count", default_value_t = 3)]
        count: usize,
    },
    /// Build a ringkeeper data dir from an Apache ZooKeeper one (servers stopped): its newest
    /// valid version-2/snapshot.<zxid>, then its version-2/log.<zxid> files (Adler-32 checked)
    /// to the last valid txn, checked against ZooKeeper's logged tree digest. The result (a
    /// snapshot at the same zxid, and the epochs) is dataDir for a standalone server or for
    /// every member of an ensemble (add each member's myid). TO must be new or empty.
    ImportZookeeper {
        /// ZooKeeper's dataDir (holding version-2/).
        zk_data_dir: PathBuf,
        /// ZooKeeper's dataLogDir, when it is not the dataDir.
        zk_data_log_dir: Option<PathBuf>,
        /// The ringkeeper data dir to create.
        #[arg(long, value_name = "DATADIR")]
        to: PathBuf,
    },
    /// Write a ringkeeper data dir (server stopped) as an Apache ZooKeeper 3.8 snapshot,
    /// TO/version-2/snapshot.<zxid> with its digest (and acceptedEpoch/currentEpoch for an
    /// ensemble member), to roll a migration back. TO must be new or empty.
    ExportZookeeper {
        /// The ringkeeper dataDir.
        data_dir: PathBuf,
        /// The ringkeeper dataLogDir, when it is not the dataDir.
        #[arg(long, value_name = "DIR")]
        log_dir: Option<PathBuf>,
        /// The ZooKeeper dataDir to create.
        #[arg(long, value_name = "ZK_DATADIR")]
        to: PathBuf,
    },
    /// A zkCli-like client: runs COMMAND once, or without one an interactive shell
    /// (`help`-less: an unknown command lists them all).
    Cli {
        /// Connect string: host:port[,host:port...][/chroot].
        #[arg(long, short = 's', value_name = "CONNSTR", default_value = "localhost:2181")]
        server: String,
        /// Session timeout in milliseconds (also how long to wait for the first connection).
        #[arg(long, short = 't', value_name = "MS", default_value_t = ringkeeper::cli::SESSION_TIMEOUT_MS_DEFAULT)]
        timeout: u64,
        /// Allow a read-only server (zkCli's -r): a member without a quorum serves reads, and
        /// the session moves to a read-write server once one answers.
        #[arg(long = "read-only", short = 'r')]
        read_only: bool,
        /// Speak TLS, trusting the CA certificates in this PEM file (zkCli:
        /// zookeeper.client.secure + ssl.trustStore.location).
        #[arg(long, value_name = "PEM")]
        tls_ca: Option<PathBuf>,
        /// The client certificate chain (PEM; may hold the key too, as ZooKeeper's PEM key store).
        #[arg(long, value_name = "PEM", requires = "tls_ca")]
        tls_cert: Option<PathBuf>,
        /// The client certificate's private key (PEM, unencrypted); default: the --tls-cert file.
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Check that the server's certificate names the host connected to.
        #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
        tls_hostname_verification: bool,
        /// SASL DIGEST-MD5 with the `username` and `password` of this JAAS file's `Client`
        /// section (zkCli's -Djava.security.auth.login.config; without this flag, that flag in
        /// CLIENT_JVMFLAGS is honoured, as zkEnv passes it).
        #[arg(long, value_name = "FILE")]
        jaas_config: Option<PathBuf>,
        /// A zkCli command and its arguments, e.g. `create -e /x data`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND ARGS")]
        command: Vec<String>,
    },
}

fn read_file(path: &PathBuf) -> Result<Vec<u8>, ExitCode> {
    // Only regular files: a device or pipe could be endless.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        eprintln!("ringkeeper: {} is not a regular file", path.display());
        return Err(ExitCode::from(2));
    }
    std::fs::read(path).map_err(|e| {
        eprintln!("ringkeeper: cannot read {}: {e}", path.display());
        ExitCode::from(2)
    })
}

fn print_dump(d: ringkeeper::offline::Dump) -> ExitCode {
    use std::io::Write;
    // A reader that stops early (`| head`) is no error.
    let _ = std::io::stdout().lock().write_all(d.text.as_bytes());
    if d.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `log-truncate`: plans the cut, prints it, and with `yes` performs it.
fn log_truncate(log_dir: &std::path::Path, file: &str, offset: u64, yes: bool) -> ExitCode {
    use ringkeeper::storage::truncate::{cut_damaged_segment, damaged_dir_name};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let aside = damaged_dir_name(now);
    let cut = match cut_damaged_segment(log_dir, file, offset, &aside, yes) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ringkeeper: log-truncate: {e}");
            return ExitCode::from(2);
        }
    };
    let verb = |done: &str, plan: &str| if yes { done.to_string() } else { format!("would {plan}") };
    println!(
        "{}: {} {} txns{}, cut at byte {}",
        cut.segment.display(),
        verb("kept", "keep"),
        cut.kept_txns,
        cut.kept_last_zxid.map_or(String::new(), |z| format!(" (up to zxid {z:#x})")),
        cut.cut_at
    );
    if let Some((at, why)) = &cut.stop {
        println!("  its valid data stops at byte {at}: {why}");
    }
    let after = cut.kept_last_zxid.map_or("the segment's first txn".to_string(), |z| format!("zxid {z:#x}"));
    if cut.loses_no_txn {
        println!("  the damage is after the end of the segment's data: no txn is lost, later segments stay");
    } else {
        println!(
            "  {} every txn after {after} in this segment (unreadable from the damage on)",
            verb("dropped", "drop")
        );
    }
    if let Some((a, b)) = cut.dropped_readable {
        println!("  of which still readable before the damage: zxids {a:#x}..{b:#x}");
    }
    for (p, range) in &cut.later {
        let range = range.map_or("no readable txn".to_string(), |(a, b)| format!("zxids {a:#x}..{b:#x}"));
        println!("  {} later segment {} ({range})", verb("moved aside", "move aside"), p.display());
    }
    println!(
        "  {} a copy of the original segment and the later ones in {}",
        verb("kept", "keep"),
        cut.aside_dir.display()
    );
    if !yes {
        println!("dry run: nothing changed; run again with --yes to do it");
    }
    ExitCode::SUCCESS
}

/// The CLI's SASL user: the JAAS `Client` section of `--jaas-config` (an error if unusable),
/// else of the file CLIENT_JVMFLAGS names; as zkCli, a JAAS file without a Client section
/// there means no SASL (said on stderr).
fn cli_sasl(flag: Option<&std::path::Path>) -> Result<Option<ringkeeper::client::SaslCredentials>, String> {
    use ringkeeper::sasl::{jaas::CLIENT_SECTION, jaas_path_from_jvm_flags, read_jaas};
    let creds = |path: &std::path::Path| {
        let (username, password) = read_jaas(path)
            .map_err(|e| e.to_string())?
            .digest_credentials(CLIENT_SECTION)
            .map_err(|e| format!("JAAS file {}: {e}", path.display()))?;
        Ok::<_, String>(ringkeeper::client::SaslCredentials { username, password })
    };
    if let Some(path) = flag {
        return creds(path).map(Some);
    }
    let flags = std::env::var("CLIENT_JVMFLAGS").unwrap_or_default();
    let Some(path) = jaas_path_from_jvm_flags(&flags) else { return Ok(None) };
    match creds(&path) {
        Ok(c) => Ok(Some(c)),
        Err(e) => {
            eprintln!("ringkeeper cli: no SASL ({e}; from CLIENT_JVMFLAGS)");
            Ok(None)
        }
    }
}

/// The offline subcommands; None for `serve`.
fn offline(command: &Command) -> Option<ExitCode> {
    Some(match command {
        Command::Serve { .. } => return None,
        Command::Cli {
            server,
            timeout,
            read_only,
            tls_ca,
            tls_cert,
            tls_key,
            tls_hostname_verification,
            jaas_config,
            command,
        } => {
            let tls = match tls_ca {
                None => None,
                Some(ca) => {
                    let identity = tls_cert.as_deref().map(|c| (c, tls_key.as_deref().unwrap_or(c)));
                    match ringkeeper::tls::client::client_config(ca, identity, *tls_hostname_verification) {
                        Ok(c) => Some(std::sync::Arc::new(c)),
                        Err(e) => {
                            eprintln!("ringkeeper cli: TLS: {e}");
                            return Some(ExitCode::from(1));
                        }
                    }
                }
            };
            let sasl = match cli_sasl(jaas_config.as_deref()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("ringkeeper cli: SASL: {e}");
                    return Some(ExitCode::from(1));
                }
            };
            let options = ringkeeper::client::ClientOptions::default()
                .session_timeout(std::time::Duration::from_millis(*timeout))
                .read_only(*read_only);
            ExitCode::from(ringkeeper::cli::main(server, options, tls, sasl, command))
        }
        Command::LogDump { file } => match read_file(file) {
            Ok(bytes) => {
                let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                print_dump(ringkeeper::offline::log_dump(&name, bytes.into()))
            }
            Err(code) => code,
        },
        Command::LogTruncate { log_dir, file, offset, yes } => log_truncate(log_dir, file, *offset, *yes),
        Command::SnapDump { file, json, data } => match read_file(file) {
            Ok(bytes) => print_dump(ringkeeper::offline::snap_dump(&bytes, *json, *data)),
            Err(code) => code,
        },
        Command::ImportZookeeper { zk_data_dir, zk_data_log_dir, to } => {
            match ringkeeper::zkformat::migrate::import_zookeeper(zk_data_dir, zk_data_log_dir.as_deref(), to) {
                Ok(r) => {
                    for w in &r.warnings {
                        eprintln!("ringkeeper: import-zookeeper: warning: {w}");
                    }
                    let logs: Vec<String> = r.logs.iter().map(|p| p.display().to_string()).collect();
                    println!(
                        "read {} (zxid {:#x}) and {} txns from [{}]",
                        r.snapshot.display(),
                        r.snapshot_zxid,
                        r.txns_applied,
                        logs.join(", ")
                    );
                    match r.digest_checked {
                        Some((z, d)) => println!("tree digest {d:#x} at zxid {z:#x} matches ZooKeeper's"),
                        None => println!("no ZooKeeper digest to check against (digests disabled or none logged)"),
                    }
                    println!(
                        "wrote {}: {} nodes, {} sessions, zxid {:#x}, epoch {}",
                        r.written.display(),
                        r.nodes,
                        r.sessions,
                        r.zxid,
                        r.epoch
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ringkeeper: import-zookeeper: {e}; nothing was written");
                    ExitCode::FAILURE
                }
            }
        }
        Command::ExportZookeeper { data_dir, log_dir, to } => {
            match ringkeeper::zkformat::migrate::export_zookeeper(data_dir, log_dir.as_deref(), to) {
                Ok(r) => {
                    for w in &r.warnings {
                        eprintln!("ringkeeper: export-zookeeper: warning: {w}");
                    }
                    println!(
                        "wrote {}: {} nodes, {} sessions, zxid {:#x}, digest {:#x}{}",
                        r.written.display(),
                        r.nodes,
                        r.sessions,
                        r.zxid,
                        r.digest,
                        r.epochs.map_or(String::new(), |(a, c)| format!(", acceptedEpoch {a}, currentEpoch {c}"))
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ringkeeper: export-zookeeper: {e}; nothing was written");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Purge { data_dir, log_dir, count } => {
            if *count < ringkeeper::storage::SNAP_RETAIN_COUNT_MIN {
                eprintln!(
                    "ringkeeper: -n must be at least {} (ZooKeeper keeps at least 3 snapshots)",
                    ringkeeper::storage::SNAP_RETAIN_COUNT_MIN
                );
                return Some(ExitCode::from(2));
            }
            let log_dir = log_dir.as_ref().unwrap_or(data_dir);
            match ringkeeper::storage::files::purge(data_dir, log_dir, *count) {
                Ok(r) => {
                    for p in r.removed_snapshots.iter().chain(&r.removed_segments) {
                        println!("removed {}", p.display());
                    }
                    println!(
                        "purge: removed {} snapshots and {} log segments, kept the newest {count} snapshots",
                        r.removed_snapshots.len(),
                        r.removed_segments.len()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ringkeeper: purge failed: {e}");
                    ExitCode::from(2)
                }
            }
        }
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(code) = cli.command.as_ref().and_then(offline) {
        return code;
    }
    let config_path = match cli.command {
        Some(Command::Serve { config }) => config,
        _ => None,
    };
    let (config, warnings) = match &config_path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                say(format_args!("ringkeeper: {e}"));
                return ExitCode::from(2);
            }
        },
        None => (Config::embedded_default(), Vec::new()),
    };
    // Log levels: RUST_LOG if set, else ringkeeper.logLevel, else info.
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) => tracing_subscriber::EnvFilter::try_new(&env).map_err(|e| format!("RUST_LOG={env}: {e}")),
        Err(_) => {
            let level = config.log_level.as_deref().unwrap_or("info");
            tracing_subscriber::EnvFilter::try_new(level).map_err(|e| format!("ringkeeper.logLevel={level}: {e}"))
        }
    };
    let filter = match filter {
        // glommio's one error line in its reactor is its iopoll probe failing, which
        // `server::disk_poll` makes happen on purpose (a disk that does not poll).
        Ok(f) => f.add_directive("glommio::reactor=off".parse().expect("a fixed, valid directive")),
        Err(e) => {
            say(format_args!("ringkeeper: bad log level {e}"));
            return ExitCode::from(2);
        }
    };
    // A log line that cannot be written (stderr on a full disk, a closed pipe) is dropped:
    // tracing-subscriber's fallback would eprint! the failure, and eprint! panics when stderr
    // fails, which stops the server (the chaos rig's full-disk runs, issue 18).
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).log_internal_errors(false).init();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    tracing::info!(
        "starting ringkeeper {} on {} (config: {}), data in {}",
        env!("CARGO_PKG_VERSION"),
        config.client_addr(),
        config_path.as_ref().map_or("embedded default".to_string(), |p| p.display().to_string()),
        config.data_dir.display()
    );
    if cfg!(feature = "mutation-leader-acks-alone") {
        tracing::error!(
            "MUTANT BUILD (feature mutation-leader-acks-alone): a leader commits on its own ack \
             alone and loses acknowledged writes under partitions; for the chaos rig's checkers only"
        );
    }
    match ringkeeper::server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say(format_args!("ringkeeper: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Writes a server's start-up refusal or stop reason to stderr, dropping a write that fails:
/// not eprintln!, which panics when its write fails, and the reason a server stops is often a
/// full disk holding the file stderr goes to (exit 70 with a torn line instead of this one,
/// as the chaos rig saw).
fn say(line: std::fmt::Arguments) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

// jemalloc instead of glibc malloc: the one committed tree's nodes are allocated on the
// pipeline core and freed on whichever client core drops the last root that holds them; glibc
// frees them under the owning arena's lock (futex wake-ups on the pipeline in a perf profile of
// setData: 0%-read throughput 134k/s against 184k/s before the shared tree), jemalloc through
// thread caches (180k/s). Measured beside mimalloc: similar CPU, but 542 against 581 bytes per
// znode (glibc 524) and 13 against 27 MB for an empty server.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
