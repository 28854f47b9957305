//! The glommio shell: core layout, executors, channels between cores, sockets and files.
//! Rules: the only module (with the client driver) that knows glommio; one executor per
//! core, pinned when configured; cores share nothing but bounded channels carrying `Send`
//! batches (and the atomics of `stats` and `conn_limits`); any core that fails asks every
//! other to stop, so the process never half-runs; a panic on any thread ends the process at
//! once with a message and exit status `PANIC_EXIT_STATUS` (fail-stop: a supervisor restarts
//! it, and nothing unacknowledged is lost since nothing is acknowledged before it is durable);
//! the one exception is glommio's blocking pool finding the executor it answers stopped, which
//! happens only during a stop already under way.

pub mod admin;
pub mod admin_auth;
pub mod admin_transfer;
pub mod audit;
pub mod client_core;
pub mod clock;
pub mod commit_queue;
pub mod conn_io;
pub mod conn_limits;
pub mod connection;
pub mod core_link;
pub mod diff_read;
pub mod disk_poll;
pub mod ensemble;
pub mod fence;
pub mod four_letter;
pub mod inspect;
pub mod log_spare;
pub mod log_task;
pub mod log_writer;
pub mod messages;
pub mod offcore;
pub mod out_queue;
pub mod peer_auth;
pub mod peer_net;
pub mod pipeline;
pub mod snap_stream;
pub mod snapshot_writer;
pub mod stage_latency;
pub mod startup;
pub mod stats;

use crate::config::Config;
use crate::storage;
use glommio::{LocalExecutorBuilder, Placement, PoolPlacement};
use messages::{ToClientCore, ToPipeline};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The exit status of a server stopped by a panic (BSD's EX_SOFTWARE).
pub const PANIC_EXIT_STATUS: i32 = 70;
/// The environment variable that allows test-only configuration keys (`ringkeeper.testing.*`).
pub const TESTING_ENV_VAR: &str = "RINGKEEPER_TESTING";

/// Makes any panic, on any thread (a core, the admin server, glommio's blocking pool), stop
/// the whole process: the panic is logged, the default hook prints it (with a backtrace
/// when RUST_BACKTRACE says so), and the process exits at once. Otherwise a panicking
/// core would leave the others serving without it (glommio catches panics in tasks, and a
/// dead executor is only noticed when joined).
fn install_fail_stop_hook() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed").to_string();
        let message = info.payload().downcast_ref::<&str>().copied();
        if is_late_blocking_answer(message, info.location().map_or("", |l| l.file())) {
            // Not a fault of the server: the executor that made the call has stopped, which
            // happens only when the server stops (its exit status is the stop's own). The pool
            // thread ends here; nothing is printed, and the process is not ended on its behalf.
            tracing::debug!("glommio's blocking pool answered an executor that had stopped (thread {name})");
            return;
        }
        tracing::error!("panic on thread {name}: {info}; stopping the server (exit status {PANIC_EXIT_STATUS})");
        default_hook(info);
        // SAFETY: _exit ends the process without running destructors or atexit handlers,
        // which could touch state the panic left half-updated on this or another thread.
        unsafe { libc::_exit(PANIC_EXIT_STATUS) }
    }));
}

/// glommio's blocking-pool thread panics with this when the executor whose call it ran has
/// gone: a blocking call (an fallocate of a spare log segment, a rename) still in flight as
/// that executor stopped.
const GLOMMIO_LATE_ANSWER: &str = "failed to send response";

/// Whether a panic is glommio's blocking pool finding its executor stopped (`message` the
/// panic's `&str` payload, `file` where it was raised).
fn is_late_blocking_answer(message: Option<&str>, file: &str) -> bool {
    message == Some(GLOMMIO_LATE_ANSWER) && file.contains("glommio") && file.ends_with("sys/blocking.rs")
}

/// Runs a standalone server until SIGTERM / SIGINT. Errors are messages for the operator.
pub fn run(mut config: Config) -> Result<(), String> {
    install_fail_stop_hook();
    if let Some(path) = &config.testing_panic_on_path {
        if std::env::var(TESTING_ENV_VAR).as_deref() != Ok("1") {
            return Err(format!(
                "ringkeeper.testing.panicOnPath is a fault hook for tests: refused unless {TESTING_ENV_VAR}=1 is set \
                 in the environment"
            ));
        }
        tracing::warn!("test fault hook: a read of {path} panics its client core (ringkeeper.testing.panicOnPath)");
    }
    // Relative directories mean the cwd at start (glommio's directory calls need absolute ones).
    for dir in [&mut config.data_dir, &mut config.data_log_dir] {
        *dir = std::path::absolute(&*dir).map_err(|e| format!("cannot resolve directory {}: {e}", dir.display()))?;
    }
    // An ensemble member reads its id from `myid` in the data directory.
    let mut membership = None;
    let my_id = if config.is_ensemble() {
        let id = storage::peer_state::read_myid(&config.data_dir).map_err(|e| e.to_string())?.ok_or_else(|| {
            format!("{}/myid is missing: an ensemble member needs its server id there", config.data_dir.display())
        })?;
        // The membership this member starts in: the last committed reconfiguration's, else
        // the server lines. From here on `config.servers` are its lines.
        let m = ensemble::start_membership(&config)?;
        config.servers = m.servers.clone();
        membership = Some(m);
        if !config.servers.iter().any(|s| s.id == id) {
            return Err(format!("myid is {id}, but the configuration has no server.{id} line"));
        }
        // Its server line's client part, if any, says where it serves clients.
        let addr = config.member_client_addr(id)?;
        (config.client_port_address, config.client_port) = (addr.ip(), addr.port());
        Some(id)
    } else {
        None
    };
    // The monotonic clock counts from here.
    clock::mono_ms();
    let config = Arc::new(config);
    let cores = config.client_cores;
    // Threads that run an executor: the pipeline core and each client core, unless the one
    // client core runs on the pipeline's thread.
    let executors = if config.client_core_on_pipeline { 1 } else { cores + 1 };
    startup::check_host(executors, config.io_memory_bytes).map_err(|e| e.to_string())?;
    startup::check_client_port(config.client_addr()).map_err(|e| e.to_string())?;
    startup::warn_if_discard_mount(&[&config.data_dir, &config.data_log_dir]);
    // TLS on the client port: the stores are read now, so a bad one refuses the start.
    let tls = match &config.client_tls {
        None => None,
        Some(settings) => {
            if let Some(addr) = settings.secure_addr {
                startup::check_client_port(addr).map_err(|e| e.to_string())?;
            }
            let ctx = crate::tls::TlsContext::load(settings.clone()).map_err(|e| format!("TLS: {e}"))?;
            tracing::info!(
                "TLS on the client port: {}{}, client certificates {:?}, key store {}",
                settings.secure_addr.map_or(String::new(), |a| format!("secureClientPort {a}")),
                if settings.port_unification { " and TLS or plain on clientPort (portUnification)" } else { "" },
                settings.stores.client_auth,
                settings.stores.key_store.path.display()
            );
            Some(Arc::new(ctx))
        }
    };
    if config.cpu_pinning {
        startup::check_core_layout(config.client_cpus.as_deref(), config.pipeline_cpu, startup::usable_cpus())
            .map_err(|e| e.to_string())?;
    }

    if let Some(sasl) = &config.sasl {
        let what = match &sasl.mechanism {
            crate::sasl::Mechanism::DigestMd5(users) => format!("DIGEST-MD5: {} user(s)", users.len()),
            crate::sasl::Mechanism::Gssapi(a) => format!("GSSAPI (Kerberos): principal {}", a.principal),
        };
        tracing::info!(
            "client SASL {what} from the Server section of {}{}",
            sasl.jaas_path.display(),
            sasl.super_user.as_deref().map(|u| format!(", super user {u}")).unwrap_or_default()
        );
    }
    if !config.enforce_auth_schemes.is_empty() {
        tracing::info!("enforce.auth: every session must hold an id of {:?}", config.enforce_auth_schemes);
    }
    let recovered = recover(&config)?;
    tracing::info!(
        "recovered zxid {:#x} (snapshot at {:#x} + {} log records)",
        recovered.last_zxid,
        recovered.snapshot_zxid,
        recovered.records.len()
    );
    let recovered = Arc::new(recovered);
    // The one committed tree, built once for the pipeline and every client core (they share
    // it: read-copy-update). An ensemble member starts from the snapshot alone: ZAB delivers
    // the log once it is committed. The recovered snapshot tree is not kept beside it.
    let tree = {
        let start = match my_id {
            Some(_) => storage::recovery::Recovered {
                snapshot: recovered.snapshot.clone(),
                snapshot_zxid: recovered.snapshot_zxid,
                records: Vec::new(),
                last_zxid: recovered.snapshot_zxid,
                tail: recovered.tail.clone(),
                warnings: Vec::new(),
            },
            None => storage::recovery::Recovered { warnings: Vec::new(), ..(*recovered).clone() },
        };
        let mut tree = storage::recovery::rebuild_tree(&start).map_err(|e| format!("rebuilding the tree: {e}"))?;
        if let Some(m) = &membership {
            ensemble::publish_membership(&mut tree, m);
        }
        tree
    };
    let recovered = {
        let mut r = Arc::try_unwrap(recovered).unwrap_or_else(|shared| (*shared).clone());
        r.snapshot = crate::tree::DataTree::default();
        if my_id.is_none() {
            r.records = Vec::new();
        }
        Arc::new(r)
    };

    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, shutdown.clone())
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }

    let audit_writer = if config.audit_enabled {
        let dest = config.audit_log_file.clone().map_or(audit::AuditDest::Stderr, audit::AuditDest::File);
        let writer = audit::install(dest.clone())
            .map_err(|e| format!("cannot open the audit log ({dest:?}, ringkeeper.auditLogFile): {e}"))?;
        tracing::info!("ZooKeeper audit is enabled ({dest:?})");
        Some(writer)
    } else {
        None
    };

    let stats = stats::Stats::new(cores);
    // Client connections: maxCnxns, within what the descriptor limit leaves room for.
    let fd_budget = startup::client_fd_budget(executors, config.servers.len());
    let total_max = match (config.max_cnxns, fd_budget) {
        (0, Some(b)) => b,
        (m, Some(b)) => m.min(b),
        (m, None) => m,
    };
    tracing::info!(
        "client connections: at most {} in all (maxCnxns {}, file descriptors {}), {} per client IP",
        if total_max == 0 { "unlimited".to_string() } else { total_max.to_string() },
        config.max_cnxns,
        fd_budget.map_or("unlimited".to_string(), |b| format!("room for {b}")),
        match config.max_client_cnxns {
            0 => "unlimited".to_string(),
            n => n.to_string(),
        }
    );
    let conn_limits = conn_limits::ConnLimits::new(total_max, config.max_client_cnxns);
    let depth = config.channel_depth.max(1);
    // Channels between threads; a client core on the pipeline's thread gets local ones there.
    let threads = if config.client_core_on_pipeline { 0 } else { cores };
    let mut from_cores = Vec::with_capacity(threads);
    let mut to_cores = Vec::with_capacity(threads);
    let mut core_ends = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (up_tx, up_rx) = core_link::shared::<Vec<ToPipeline>>(depth);
        let (down_tx, down_rx) = core_link::shared::<ToClientCore>(depth);
        from_cores.push(up_rx);
        to_cores.push(down_tx);
        core_ends.push((up_tx, down_rx));
    }

    let placement = |cpu: usize| {
        if config.cpu_pinning {
            Placement::Fixed(cpu)
        } else {
            Placement::Unbound
        }
    };
    let builder = |name: String, cpu: usize| {
        LocalExecutorBuilder::new(placement(cpu))
            .name(&name)
            .io_memory(config.io_memory_bytes)
            .ring_depth(config.ring_depth)
            .spin_before_park(std::time::Duration::from_micros(config.spin_before_park_us))
    };

    // Admin commands that list connections or watches ask client core 0 over a bridge.
    let (mut inspector, mut inspector_end) = (None, None);
    if config.admin_enabled {
        match admin::inspector() {
            Ok((a, b)) => (inspector, inspector_end) = (Some(a), Some(b)),
            Err(e) => tracing::warn!(
                "admin server: cannot create its bridge to the cores ({e}); its connection \
                                      and watch commands will report an error"
            ),
        }
    }
    let core_params = |i: usize, admin_asks| client_core::CoreParams {
        id: i as u16,
        stats: stats.clone(),
        conn_limits: conn_limits.clone(),
        config: config.clone(),
        tree: tree.clone(),
        admin_asks,
        tls: tls.clone(),
    };
    // With clientCoreOnPipeline the one client core is a task on the pipeline's executor: its
    // channels to the pipeline are local ones (`core_link`), which never wake another thread
    // and wake the receiving task at once (after the next reactor poll while the log writes).
    let on_pipeline = config.client_core_on_pipeline.then(|| core_params(0, inspector_end.take()));
    let pipeline_cpu = config.pipeline_cpu.unwrap_or(0);
    let (cfg, rec, stop, st, pipeline_tree) =
        (config.clone(), recovered.clone(), shutdown.clone(), stats.clone(), tree.clone());
    // Its blocking pool is unpinned: snapshots and autopurge run there, and must not share
    // the pipeline's CPU (a pinned executor's pool would inherit its placement).
    let pipeline = builder("rk-pipeline".into(), pipeline_cpu)
        .blocking_thread_pool_placement(PoolPlacement::Unbound(offcore::BLOCKING_THREADS))
        .spawn(move || async move {
            let (mut from_cores, mut to_cores): (Vec<_>, Vec<_>) = (
                from_cores.into_iter().map(core_link::Rx::Thread).collect(),
                to_cores.into_iter().map(core_link::Tx::Thread).collect(),
            );
            let log_writing = core_link::LogWriting::default();
            let client_core = on_pipeline.map(|params| {
                let (up_tx, up_rx) = core_link::local::<Vec<ToPipeline>>(depth, &log_writing);
                let (down_tx, down_rx) = core_link::local::<ToClientCore>(depth, &log_writing);
                from_cores.push(up_rx);
                to_cores.push(down_tx);
                glommio::spawn_local(serve_client_core(params, (up_tx, down_rx), stop.clone()))
            });
            let r = match my_id {
                None => {
                    let params = pipeline::PipelineParams {
                        config: cfg,
                        recovered: rec,
                        tree: pipeline_tree,
                        from_cores,
                        to_cores,
                        log_writing,
                        shutdown: stop.clone(),
                        stats: st,
                    };
                    pipeline::run(params).await
                }
                Some(my_id) => {
                    let params = ensemble::EnsembleParams {
                        config: cfg,
                        stats: st,
                        recovered: rec,
                        tree: pipeline_tree,
                        my_id,
                        from_cores,
                        to_cores,
                        log_writing,
                        shutdown: stop.clone(),
                    };
                    ensemble::run(params).await
                }
            };
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            // The client core ends once the pipeline has dropped its channel to it.
            match client_core {
                Some(task) => r.and(task.await),
                None => r,
            }
        })
        .map_err(|e| format!("cannot start the pipeline core on CPU {pipeline_cpu}: {e}"))?;

    let mut handles = Vec::with_capacity(cores);
    for (i, (up_tx, down_rx)) in core_ends.into_iter().enumerate() {
        let cpu = match &config.client_cpus {
            Some(list) => list[i],
            None => (pipeline_cpu + 1 + i) % num_cpus(),
        };
        let params = core_params(i, if i == 0 { inspector_end.take() } else { None });
        let stop = shutdown.clone();
        let serve =
            move || serve_client_core(params, (core_link::Tx::Thread(up_tx), core_link::Rx::Thread(down_rx)), stop);
        let h = builder(format!("rk-client-{i}"), cpu).spawn(serve).map_err(|e| {
            shutdown.store(true, Ordering::Relaxed);
            format!("cannot start client core {i} on CPU {cpu}: {e}")
        });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => {
                let _ = pipeline.join();
                return Err(e);
            }
        }
    }
    drop(recovered);
    drop(tree);
    let admin = if config.admin_enabled {
        admin::start(config.clone(), stats.clone(), inspector, shutdown.clone())
    } else {
        None
    };

    let mut first_error: Option<String> = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(format!("client core failed: {e}"));
            }
        }
    }
    match pipeline.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            first_error.get_or_insert(e);
        }
        Err(e) => {
            first_error.get_or_insert(format!("pipeline core failed: {e}"));
        }
    }
    shutdown.store(true, Ordering::Relaxed);
    if let Some(a) = admin {
        let _ = a.join();
    }
    if let Some(w) = audit_writer {
        w.stop();
    }
    match first_error {
        Some(e) => Err(e),
        None => {
            tracing::info!("ringkeeper stopped cleanly");
            Ok(())
        }
    }
}

/// Runs a client core; its error stops the whole server.
async fn serve_client_core(
    params: client_core::CoreParams,
    ends: client_core::CoreEnds,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let r = client_core::run(params, ends).await;
    if r.is_err() {
        stop.store(true, Ordering::Relaxed);
    }
    r
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Corrupt log segments an ensemble member sets aside at most, one at a time, before giving up.
const DAMAGED_SEGMENTS_SET_ASIDE_MAX: usize = 64;

/// Recovers the data directory. A standalone server refuses to start on corruption (the
/// operator decides). An ensemble member instead records that it is losing logged txns
/// (`rejoin.pending`: it counts toward no quorum until it has synced with an established
/// leader), moves the damaged segment and every later one aside unchanged, and recovers from
/// what remains; ZAB then brings it back to the quorum's history (TRUNC/DIFF/SNAP).
fn recover(config: &Config) -> Result<storage::recovery::Recovered, String> {
    use storage::log::LogError;
    use storage::recovery::RecoveryError;
    for _ in 0..DAMAGED_SEGMENTS_SET_ASIDE_MAX {
        match storage::recovery::recover(&config.data_dir, &config.data_log_dir) {
            Err(RecoveryError::Log(LogError::Corrupt { file, offset, reason })) if config.is_ensemble() => {
                tracing::error!(
                    "txn log {file} is corrupt at byte {offset} ({reason}); this ensemble member moves it and \
                     every later segment aside, unchanged, and rejoins from the quorum"
                );
                let why = format!("txn log {file} corrupt at byte {offset}: {reason}");
                storage::peer_state::mark_rejoin_pending(&config.data_dir, &why).map_err(|e| e.to_string())?;
                let dir = storage::recovery::set_aside_damaged(&config.data_log_dir, std::path::Path::new(&file))
                    .map_err(|e| e.to_string())?;
                tracing::warn!("moved txn log {file} and every later segment to {}", dir.display());
            }
            other => return other.map_err(|e| e.to_string()),
        }
    }
    Err(format!("more than {DAMAGED_SEGMENTS_SET_ASIDE_MAX} corrupt txn log segments; the server will not start"))
}

#[cfg(test)]
mod tests {
    use super::is_late_blocking_answer;

    #[test]
    fn only_glommios_late_blocking_answer_is_spared_the_fail_stop() {
        let pool = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/glommio-0.9.0/src/sys/blocking.rs";
        assert!(is_late_blocking_answer(Some("failed to send response"), pool));
        // Any other panic there, or the same words raised anywhere else, still stops the server.
        assert!(!is_late_blocking_answer(Some("failed to bind blocking thread"), pool));
        assert!(!is_late_blocking_answer(None, pool));
        assert!(!is_late_blocking_answer(Some("failed to send response"), "src/server/ensemble.rs"));
        assert!(!is_late_blocking_answer(
            Some("failed to send response"),
            "/x/glommio-0.9.0/src/channels/shared_channel.rs"
        ));
    }
}
