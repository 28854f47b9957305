//! Start-up checks of the host: io_uring must be usable and RLIMIT_MEMLOCK high enough for
//! glommio's registered buffers, and the client port must be free. Each failure becomes a
//! message that says what to do. A data directory on a file system that discards online gets
//! a warning.
//! Rules: never panic here; raise the soft limit when the hard limit allows it.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Locked memory one executor needs besides its io memory (rings, registered buffers).
pub const EXECUTOR_MEMLOCK_OVERHEAD_BYTES: u64 = 512 * 1024;

#[derive(Debug)]
pub enum StartupError {
    IoUringDisabled {
        setting: String,
    },
    MemlockTooLow {
        needed_bytes: u64,
        soft_bytes: u64,
        hard_bytes: u64,
    },
    ClientPortUnavailable {
        addr: SocketAddr,
        error: std::io::Error,
    },
    /// A pinned core layout names CPUs this process may not run on.
    CoreLayout {
        key: &'static str,
        cpus: Vec<usize>,
        usable: Vec<usize>,
    },
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::IoUringDisabled { setting } => write!(
                f,
                "io_uring is disabled on this host (kernel.io_uring_disabled = {setting}). ringkeeper needs it: run \
                 `sysctl -w kernel.io_uring_disabled=0` as root (or set it to 1 and add this user to the group in \
                 kernel.io_uring_group), or run on a kernel with io_uring enabled (Linux 5.8 or later)"
            ),
            StartupError::MemlockTooLow { needed_bytes, soft_bytes, hard_bytes } => write!(
                f,
                "RLIMIT_MEMLOCK is too low: ringkeeper needs {needed_bytes} bytes of locked memory for its io_uring \
                 buffers, the limit is {soft_bytes} (hard {hard_bytes}) and cannot be raised by this user. Fix: \
                 `ulimit -l {kib}` in the starting shell (as root), or `LimitMEMLOCK={needed_bytes}` in the systemd \
                 unit, or a memlock line in /etc/security/limits.conf; or lower ringkeeper.ioMemoryBytes / \
                 ringkeeper.clientCores",
                kib = needed_bytes.div_ceil(1024)
            ),
            StartupError::ClientPortUnavailable { addr, error } => write!(
                f,
                "cannot listen on {addr}: {error}. Another server (ZooKeeper or ringkeeper) may be running there: \
                 stop it, or set clientPort / clientPortAddress to a free address"
            ),
            StartupError::CoreLayout { key, cpus, usable } => write!(
                f,
                "{key} names CPU {} but this process may only run on CPUs {} (of this machine's online CPUs, in \
                 its affinity mask). Fix the core layout: pick CPUs from that list, or set \
                 ringkeeper.cpuPinning=false",
                cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
                cpu_list(usable)
            ),
        }
    }
}

/// CPUs as ranges: 0-3,6,8-9.
fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// With pinning on, every CPU the layout names (client cores and the pipeline) must be one
/// this process may run on; `usable` is that set (None: the affinity mask is unknown).
pub fn check_core_layout(
    client_cpus: Option<&[usize]>,
    pipeline_cpu: Option<usize>,
    usable: Option<Vec<usize>>,
) -> Result<(), StartupError> {
    let Some(mut usable) = usable else { return Ok(()) };
    usable.sort_unstable();
    let outside = |list: &[usize]| -> Vec<usize> { list.iter().copied().filter(|c| !usable.contains(c)).collect() };
    if let Some(list) = client_cpus {
        let bad = outside(list);
        if !bad.is_empty() {
            return Err(StartupError::CoreLayout { key: "ringkeeper.clientCpus", cpus: bad, usable });
        }
    }
    if let Some(p) = pipeline_cpu {
        if !usable.contains(&p) {
            return Err(StartupError::CoreLayout { key: "ringkeeper.pipelineCpu", cpus: vec![p], usable });
        }
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask), if the kernel says.
pub fn usable_cpus() -> Option<Vec<usize>> {
    core_affinity::get_core_ids().map(|ids| ids.into_iter().map(|c| c.id).collect())
}

impl std::error::Error for StartupError {}

/// Checks io_uring and locked memory for `executors` executors of `io_memory_bytes` each.
pub fn check_host(executors: usize, io_memory_bytes: usize) -> Result<(), StartupError> {
    if let Ok(v) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        let v = v.trim();
        // 1 allows only members of kernel.io_uring_group (and root); 2 disables it entirely.
        let root = unsafe { libc::geteuid() } == 0;
        if v == "2" || (v == "1" && !root) {
            return Err(StartupError::IoUringDisabled { setting: v.to_string() });
        }
    }
    let needed = executors as u64 * (io_memory_bytes as u64 + EXECUTOR_MEMLOCK_OVERHEAD_BYTES);
    match crate::host::raise_memlock(needed) {
        Ok(Some(old)) => {
            tracing::info!("raised RLIMIT_MEMLOCK from {old} to {needed} bytes");
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(StartupError::MemlockTooLow {
            needed_bytes: e.needed_bytes,
            soft_bytes: e.soft_bytes,
            hard_bytes: e.hard_bytes,
        }),
    }
}

/// File descriptors kept from client connections for everything else: log segments and the
/// spare, snapshots, directories, purge, the admin server and its connections.
pub const FDS_RESERVED: u64 = 128;
/// File descriptors one executor holds (io_uring rings, eventfds, timers).
pub const FDS_PER_EXECUTOR: u64 = 8;
/// File descriptors per `server.N` line (election and quorum sockets, both ways).
pub const FDS_PER_PEER: u64 = 4;
/// Client connections allowed however low the descriptor limit (with a warning).
pub const FD_BUDGET_CONNECTIONS_MIN: u64 = 8;

/// Raises the soft RLIMIT_NOFILE to the hard limit (the JVM does the same for ZooKeeper) and
/// returns how many client connections the limit leaves room for: the limit minus the
/// descriptors open now, those `executors` executors will open, `peers` peers' sockets and
/// `FDS_RESERVED`. Client connections past it are refused at accept, so running out of
/// descriptors never starves the txn log (a log roll that cannot open its next segment would
/// stop the server). None: no limit known.
pub fn client_fd_budget(executors: usize, peers: usize) -> Option<u32> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::info!("raised RLIMIT_NOFILE from {} to {}", lim.rlim_cur, lim.rlim_max);
            lim.rlim_cur = lim.rlim_max;
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    let open_now = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
    let held = open_now + FDS_RESERVED + FDS_PER_EXECUTOR * executors as u64 + FDS_PER_PEER * peers as u64;
    let budget = lim.rlim_cur.saturating_sub(held);
    if budget < FD_BUDGET_CONNECTIONS_MIN {
        tracing::warn!(
            "RLIMIT_NOFILE is {} file descriptors: that leaves room for {budget} client connections; allowing \
             {FD_BUDGET_CONNECTIONS_MIN}. Raise it (`ulimit -n`, or LimitNOFILE= in the systemd unit)",
            lim.rlim_cur
        );
    }
    Some(budget.clamp(FD_BUDGET_CONNECTIONS_MIN, u32::MAX as u64) as u32)
}

/// Pending connections the kernel queues on each client core's listener.
pub const LISTEN_BACKLOG_MAX: i32 = 1024;

/// How long start-up waits for the client port to become free. A server killed a moment ago
/// keeps its listener open until the kernel tears down its io_uring (in-flight accepts hold
/// the socket), so a restart right after kill -9 may find the port briefly busy.
pub const CLIENT_PORT_WAIT_MS_MAX: u64 = 3000;

/// Checks that nothing listens on the client address. The client cores bind with
/// SO_REUSEPORT (one listener each), which would silently share the port with another
/// server; this bind has SO_REUSEADDR only, so it fails on a live listener but not on the
/// TIME_WAIT connections a previous run left behind. Retries for CLIENT_PORT_WAIT_MS_MAX.
pub fn check_client_port(addr: SocketAddr) -> Result<(), StartupError> {
    let probe = || -> std::io::Result<()> {
        let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(CLIENT_PORT_WAIT_MS_MAX);
    loop {
        match probe() {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(error) => return Err(StartupError::ClientPortUnavailable { addr, error }),
        }
    }
}

/// One client core's listener: SO_REUSEPORT (the kernel spreads connections over the client
/// cores).
pub fn bind_client_listener(addr: SocketAddr) -> std::io::Result<glommio::net::TcpListener> {
    bind_listener(addr, true, LISTEN_BACKLOG_MAX)
}

/// A listening socket handed to glommio: always SO_REUSEADDR (its connections' TIME_WAIT never
/// blocks a restart), SO_REUSEPORT only where several executors share the address.
pub fn bind_listener(addr: SocketAddr, reuse_port: bool, backlog: i32) -> std::io::Result<glommio::net::TcpListener> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(reuse_port)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(backlog)?;
    // SAFETY: the fd is a listening TCP socket that we own and hand over whole.
    Ok(unsafe { glommio::net::TcpListener::from_raw_fd(s.into_raw_fd()) })
}

/// Where the mount table is read.
const MOUNT_TABLE_PATH: &str = "/proc/self/mounts";

/// The mount option of online discard: ext4's and xfs's, and btrfs's synchronous mode. Not
/// `discard=async` (btrfs's queued mode), which never holds up a sync.
const DISCARD_OPTION: &str = "discard";

/// File systems whose `discard` runs in the background (f2fs's default): not warned about.
const FSTYPES_DISCARDING_ASIDE: &[&str] = &["f2fs"];

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount<'a> {
    pub point: PathBuf,
    pub fstype: &'a str,
    pub options: &'a str,
}

/// The mount that holds `dir` (absolute, with no `..`), from the text of /proc/self/mounts:
/// the mount point with the most components that is `dir` or an ancestor of it, the last of
/// equal ones (a later mount hides an earlier one at the same point). A mount that hides an
/// ancestor's mount point is not seen through: the table alone cannot tell.
pub fn mount_of<'a>(mounts: &'a str, dir: &Path) -> Option<Mount<'a>> {
    let mut best: Option<Mount<'a>> = None;
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (Some(_device), Some(point), Some(fstype), Some(options)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let point = unescape_mount_field(point);
        let deeper = |b: &Mount<'_>| point.components().count() >= b.point.components().count();
        if dir.starts_with(&point) && best.as_ref().is_none_or(deeper) {
            best = Some(Mount { point, fstype, options });
        }
    }
    best
}

/// /proc/self/mounts writes a space, tab, newline and backslash in a path as `\ooo` (octal).
fn unescape_mount_field(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The mounts holding `dirs` (canonical) that discard a file's blocks as it is removed, each
/// once, with the first of `dirs` found on it.
pub fn discarding_mounts<'a>(mounts: &'a str, dirs: &[PathBuf]) -> Vec<(PathBuf, Mount<'a>)> {
    let mut found: Vec<(PathBuf, Mount<'a>)> = Vec::new();
    for dir in dirs {
        let Some(m) = mount_of(mounts, dir) else { continue };
        let discards = m.options.split(',').any(|o| o == DISCARD_OPTION);
        if discards && !FSTYPES_DISCARDING_ASIDE.contains(&m.fstype) && !found.iter().any(|(_, f)| f.point == m.point) {
            found.push((dir.clone(), m));
        }
    }
    found
}

/// Warns when a directory the txn log or snapshots live in is on a file system mounted with
/// online `discard`: there a file's removal (autopurge, or any other program's) holds up the
/// syncs of the log until the disk has discarded its blocks (docs/benchmarks.md, "Disk stalls
/// from file removals"). Advice only: an unreadable mount table is passed over; data in an
/// overlay (a container's layer) shows no `discard` and is not judged. Blocking (a read of the
/// mount table, a canonicalize per directory): called once, before any executor starts.
pub fn warn_if_discard_mount(dirs: &[&Path]) {
    let Ok(mounts) = std::fs::read_to_string(MOUNT_TABLE_PATH) else { return };
    // A directory not made yet is where its nearest existing ancestor is.
    let real: Vec<PathBuf> = dirs.iter().filter_map(|d| d.ancestors().find_map(|a| a.canonicalize().ok())).collect();
    for (dir, m) in discarding_mounts(&mounts, &real) {
        tracing::warn!(
            "{} is on {} ({}), mounted with `discard`: removing a file there (autopurge, or any other \
             program) stalls the txn log's syncs until the disk has discarded its blocks; mount it \
             without `discard` and trim it periodically (fstrim) instead",
            dir.display(),
            m.point.display(),
            m.fstype
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_holding_a_directory_is_its_deepest_mount_point_and_discard_is_seen() {
        let mounts = "/dev/vda / ext4 rw,relatime,discard,resv_strict 0 0\n\
                      proc /proc proc rw,nosuid 0 0\n\
                      /dev/vdb /var/lib/zk ext4 rw,relatime,discard 0 0\n\
                      /dev/vdc /var/lib/zk\\040logs xfs rw,noatime,discard 0 0\n\
                      tmpfs /var/lib/zk tmpfs rw 0 0\n\
                      /dev/vdd /srv/a ext4 rw,nodiscard 0 0\n\
                      /dev/vde /srv/b btrfs rw,ssd,discard=async 0 0\n\
                      /dev/vdf /srv/c f2fs rw,discard 0 0\n\
                      /dev/vdg /srv/d xfs rw,discard 0 0\n\
                      garbage\n";
        let at = |d: &str| mount_of(mounts, Path::new(d)).map(|m| (m.point.display().to_string(), m.options));
        assert_eq!(at("/tmp/rk"), Some(("/".into(), "rw,relatime,discard,resv_strict")));
        assert_eq!(at("/var/lib/zk/data"), Some(("/var/lib/zk".into(), "rw")), "the later mount hides the earlier");
        assert_eq!(at("/var/lib/zk logs/version-2"), Some(("/var/lib/zk logs".into(), "rw,noatime,discard")));
        assert_eq!(at("/var/lib/zkother"), Some(("/".into(), "rw,relatime,discard,resv_strict")), "by path components");
        assert_eq!(mount_of("", Path::new("/x")), None);

        let warned = |dirs: &[&str]| -> Vec<String> {
            let dirs: Vec<PathBuf> = dirs.iter().map(PathBuf::from).collect();
            discarding_mounts(mounts, &dirs)
                .into_iter()
                .map(|(d, m)| format!("{} {}", d.display(), m.point.display()))
                .collect()
        };
        assert_eq!(warned(&["/tmp/data", "/tmp/log"]), vec!["/tmp/data /"], "one warning for one mount");
        assert_eq!(warned(&["/var/lib/zk/data", "/srv/d/log"]), vec!["/srv/d/log /srv/d"], "tmpfs hides the discard");
        assert_eq!(
            warned(&["/tmp/data", "/var/lib/zk logs/log"]),
            vec!["/tmp/data /", "/var/lib/zk logs/log /var/lib/zk logs"]
        );
        assert!(warned(&["/srv/a/x", "/srv/b/x", "/srv/c/x"]).is_empty(), "nodiscard, btrfs's async discard, f2fs");
    }

    #[test]
    fn a_layout_outside_the_usable_cpus_is_refused_with_the_list() {
        let usable = Some(vec![0, 1, 2, 3, 6]);
        assert!(check_core_layout(Some(&[1, 2]), Some(0), usable.clone()).is_ok());
        let e = check_core_layout(Some(&[1, 7, 9]), Some(0), usable.clone()).unwrap_err().to_string();
        assert!(
            e.starts_with("ringkeeper.clientCpus names CPU 7, 9 but this process may only run on CPUs 0-3,6"),
            "{e}"
        );
        let e = check_core_layout(None, Some(5), usable).unwrap_err().to_string();
        assert!(e.starts_with("ringkeeper.pipelineCpu names CPU 5"), "{e}");
        assert!(check_core_layout(Some(&[99]), None, None).is_ok(), "an unknown mask is not checked");
    }
}

/// How long a start-up step may wait on another thread before the wait is logged.
pub const STARTUP_STEP_WARN_MS: u64 = 10_000;

/// Logs every `STARTUP_STEP_WARN_MS` that `what` is still waiting, until `done` is set: a
/// step that waits on another thread (the channels between the pipeline and client cores)
/// would otherwise stall a member without a word. Runs on the calling executor.
pub fn warn_while_waiting(what: String, done: std::rc::Rc<std::cell::Cell<bool>>) {
    glommio::spawn_local(async move {
        let mut waited_ms = 0;
        while !done.get() {
            glommio::timer::sleep(std::time::Duration::from_millis(STARTUP_STEP_WARN_MS)).await;
            waited_ms += STARTUP_STEP_WARN_MS;
            if !done.get() {
                tracing::warn!("{what}: still waiting after {} s", waited_ms / 1000);
            }
        }
    })
    .detach();
}
