//! The migration commands' file work: `import-zookeeper` (ZooKeeper's newest valid snapshot
//! plus its txn logs -> a ringkeeper data dir holding one snapshot at the same zxid and the
//! epochs) and `export-zookeeper` (a ringkeeper data dir -> a ZooKeeper 3.8 `version-2/`
//! snapshot with its digest), for the binary's subcommands.
//! Rules: blocking std::fs, run offline (servers stopped); never writes a partial target: the
//! result is built in a temporary directory next to the target, fsynced, and renamed into
//! place last; a target that exists and is not an empty directory is refused; every refusal
//! names the file and the reason.

use super::digest::tree_digest;
use super::records::StatPersisted;
use super::replay::{tree_from_snapshot, Replay};
use super::snapshot::{
    decode_snapshot, encode_snapshot, snapshot_stream, zk_compressed_name, zk_name_zxid, zk_snapshot_name, ZkNode,
    ZkSnapshot, ZxidDigest, DIGEST_VERSION, SNAP_DB_ID, ZK_SNAPSHOT_PREFIX,
};
use super::txnlog::{decode_log, LogEnd, ZK_LOG_PREFIX};
use super::ZkFormatError;
use crate::proto::Acl;
use crate::storage::files::fsync_dir;
use crate::storage::peer_state::{read_epochs, write_epochs};
use crate::storage::recovery::{rebuild_tree, recover};
use crate::storage::snapshot::{encode_snapshot as encode_our_snapshot, snapshot_name};
use crate::tree::DataTree;
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// ZooKeeper keeps its files in this subdirectory of dataDir and dataLogDir.
pub const ZK_VERSION_DIR: &str = "version-2";
/// ZooKeeper's epoch files (decimal text) in `version-2/` of an ensemble member's dataDir.
const ZK_ACCEPTED_EPOCH_FILE: &str = "acceptedEpoch";
const ZK_CURRENT_EPOCH_FILE: &str = "currentEpoch";

/// Why a migration stopped.
#[derive(Debug)]
pub enum MigrateError {
    Io {
        path: PathBuf,
        err: io::Error,
    },
    /// A file's contents are wrong or not understood.
    Format {
        path: PathBuf,
        err: ZkFormatError,
    },
    /// Something about the directories (no snapshot, target not empty, ...).
    Refused(String),
}

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MigrateError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            MigrateError::Format { path, err } => write!(f, "{}: {err}", path.display()),
            MigrateError::Refused(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for MigrateError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> MigrateError + '_ {
    move |err| MigrateError::Io { path: path.to_path_buf(), err }
}

/// What an import did.
#[derive(Debug)]
pub struct ImportReport {
    pub snapshot: PathBuf,
    pub snapshot_zxid: i64,
    pub logs: Vec<PathBuf>,
    pub txns_applied: u64,
    pub zxid: i64,
    pub epoch: u32,
    pub nodes: usize,
    pub sessions: usize,
    /// The zxid whose logged digest the imported tree matched, and the digest.
    pub digest_checked: Option<(i64, i64)>,
    pub warnings: Vec<String>,
    pub written: PathBuf,
}

/// `dir/version-2` when it exists, else `dir` itself when it is named `version-2`.
fn version_dir(dir: &Path) -> Result<PathBuf, MigrateError> {
    let sub = dir.join(ZK_VERSION_DIR);
    if sub.is_dir() {
        return Ok(sub);
    }
    if dir.file_name().is_some_and(|n| n == ZK_VERSION_DIR) && dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    Err(MigrateError::Refused(format!(
        "{}: no {ZK_VERSION_DIR}/ directory (give ZooKeeper's dataDir / dataLogDir as zoo.cfg names them)",
        dir.display()
    )))
}

/// `(zxid, path)` of the files in `dir` named `prefix<hex zxid>` (for snapshots also
/// `.gz`/`.snappy` ones), sorted by zxid.
fn list_zk_files(dir: &Path, prefix: &str) -> Result<Vec<(i64, PathBuf)>, MigrateError> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let stem = match zk_compressed_name(&name) {
            Some(_) if prefix == ZK_SNAPSHOT_PREFIX => name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s),
            _ => name.as_str(),
        };
        if let Some(z) = zk_name_zxid(stem, prefix) {
            found.push((z, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

fn read_epoch_file(path: &Path) -> Result<Option<u32>, MigrateError> {
    match fs::read_to_string(path) {
        Ok(t) => t
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| MigrateError::Refused(format!("{}: not an epoch number: {:?}", path.display(), t.trim()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(MigrateError::Io { path: path.to_path_buf(), err }),
    }
}

/// Checks `to` may be written and makes the temporary directory beside it.
fn begin_target(to: &Path, tag: &str) -> Result<PathBuf, MigrateError> {
    match fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(MigrateError::Refused(format!(
                    "{}: exists and is not empty; the target must be a new or empty directory",
                    to.display()
                )));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(MigrateError::Io { path: to.to_path_buf(), err }),
    }
    let name = to
        .file_name()
        .ok_or_else(|| MigrateError::Refused(format!("{}: not a directory name", to.display())))?
        .to_string_lossy()
        .into_owned();
    let tmp = to.with_file_name(format!(".{name}.{tag}-{}.tmp", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    Ok(tmp)
}

/// Writes `bytes` to `path` and fsyncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), MigrateError> {
    use std::io::Write;
    let mut f = fs::File::create(path).map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

/// Renames the finished temporary directory onto `to` (an empty directory there is replaced)
/// and fsyncs the parent.
fn finish_target(tmp: &Path, to: &Path) -> Result<(), MigrateError> {
    fsync_dir(tmp).map_err(io_err(tmp))?;
    fs::rename(tmp, to).map_err(io_err(to))?;
    let parent = to.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fsync_dir(parent).map_err(io_err(parent))
}

/// Runs `f` on the temporary directory and removes it if `f` fails.
fn build_in<T>(tmp: &Path, f: impl FnOnce(&Path) -> Result<T, MigrateError>) -> Result<T, MigrateError> {
    let r = f(tmp);
    if r.is_err() {
        let _ = fs::remove_dir_all(tmp);
    }
    r
}

/// Reads ZooKeeper's newest valid snapshot and replays its logs into our tree.
pub fn read_zookeeper(zk_data: &Path, zk_log: Option<&Path>) -> Result<(DataTree, ImportReport), MigrateError> {
    let snap_dir = version_dir(zk_data)?;
    let log_dir = version_dir(zk_log.unwrap_or(zk_data))?;
    let snaps = list_zk_files(&snap_dir, ZK_SNAPSHOT_PREFIX)?;
    let mut warnings = Vec::new();
    let mut chosen = None;
    for (zxid, path) in snaps.iter().rev() {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let raw = Bytes::from(fs::read(path).map_err(io_err(path))?);
        // A snapshot that is there but cannot be read is refused (not passed over for an
        // older one): a compression method this does not read.
        let bytes = match snapshot_stream(&name, raw) {
            Ok(b) => b,
            Err(err @ ZkFormatError::Compressed { .. }) => {
                return Err(MigrateError::Format { path: path.clone(), err })
            }
            Err(e) => {
                warnings.push(format!("{}: skipped, not a valid snapshot: {e}", path.display()));
                continue;
            }
        };
        match decode_snapshot(&bytes) {
            Ok(s) => {
                chosen = Some((*zxid, path.clone(), s));
                break;
            }
            // As ZooKeeper does: an invalid snapshot (one being written when it stopped) is
            // passed over for the next older one.
            Err(e) => warnings.push(format!("{}: skipped, not a valid snapshot: {e}", path.display())),
        }
    }
    let Some((snap_zxid, snap_path, snap)) = chosen else {
        return Err(MigrateError::Refused(format!(
            "{}: no valid ZooKeeper snapshot (snapshot.<zxid>){}",
            snap_dir.display(),
            if warnings.is_empty() { String::new() } else { format!(": {}", warnings.join("; ")) }
        )));
    };
    let tree =
        tree_from_snapshot(&snap, snap_zxid).map_err(|err| MigrateError::Format { path: snap_path.clone(), err })?;
    let mut replay = Replay::new(tree, snap.digest);
    // ZooKeeper's choice of logs: the last one starting at or before the snapshot, and every
    // later one.
    let logs = list_zk_files(&log_dir, ZK_LOG_PREFIX)?;
    let first = logs.iter().rposition(|(z, _)| *z <= snap_zxid).unwrap_or(0);
    let mut used = Vec::new();
    let mut last = snap_zxid;
    let log_count = logs.len();
    for (i, (_, path)) in logs.iter().enumerate().skip(first) {
        let bytes = Bytes::from(fs::read(path).map_err(io_err(path))?);
        let scan = decode_log(&bytes).map_err(|err| MigrateError::Format { path: path.clone(), err })?;
        for e in &scan.entries {
            let z = e.header.zxid;
            if z <= last {
                continue;
            }
            // Within an epoch zxids follow on by one; a new epoch starts a new count.
            if z != last + 1 && (z >> 32) <= (last >> 32) {
                return Err(MigrateError::Format {
                    path: path.clone(),
                    err: ZkFormatError::MissingTxns { after: last, next: z },
                });
            }
            replay.apply_entry(e).map_err(|err| MigrateError::Format { path: path.clone(), err })?;
            last = z;
        }
        if let LogEnd::Partial { offset, reason } = scan.end {
            let what = if i + 1 == log_count { "" } else { " (not the last log file)" };
            warnings.push(format!(
                "{}: partial txn at byte {offset} ({reason}){what}: the txns before it are kept, as ZooKeeper does",
                path.display()
            ));
        }
        used.push(path.clone());
    }
    if replay.applied == 0 {
        replay.use_snapshot_digest_at(snap_zxid);
    }
    let applied = replay.applied;
    let (tree, digest_checked) = replay
        .finish()
        .map_err(|err| MigrateError::Format { path: used.last().cloned().unwrap_or_else(|| snap_path.clone()), err })?;
    let mut epoch = (tree.last_zxid() >> 32) as u32;
    for f in [ZK_ACCEPTED_EPOCH_FILE, ZK_CURRENT_EPOCH_FILE] {
        if let Some(e) = read_epoch_file(&snap_dir.join(f))? {
            epoch = epoch.max(e);
        }
    }
    let report = ImportReport {
        snapshot: snap_path,
        snapshot_zxid: snap_zxid,
        logs: used,
        txns_applied: applied,
        zxid: tree.last_zxid(),
        epoch,
        nodes: tree.node_count(),
        sessions: tree.sessions().count(),
        digest_checked,
        warnings,
        written: PathBuf::new(),
    };
    Ok((tree, report))
}

/// `import-zookeeper`: writes `to` as a ringkeeper data dir (snapshot + epochs).
pub fn import_zookeeper(zk_data: &Path, zk_log: Option<&Path>, to: &Path) -> Result<ImportReport, MigrateError> {
    let (tree, mut report) = read_zookeeper(zk_data, zk_log)?;
    let tmp = begin_target(to, "import")?;
    build_in(&tmp, |dir| {
        write_synced(&dir.join(snapshot_name(tree.last_zxid())), &encode_our_snapshot(&tree))?;
        write_epochs(dir, report.epoch, report.epoch)
            .map_err(|e| MigrateError::Refused(format!("{}: writing the epochs: {e}", dir.display())))?;
        finish_target(dir, to)
    })?;
    report.written = to.join(snapshot_name(report.zxid));
    Ok(report)
}

/// A ringkeeper tree as the snapshot ZooKeeper 3.8 would write of it.
pub fn zk_snapshot_of(tree: &DataTree) -> ZkSnapshot {
    let mut sessions: Vec<(i64, i32)> = tree.sessions().map(|(id, e)| (id, e.timeout_ms)).collect();
    sessions.sort_unstable();
    let mut ids: HashMap<Arc<[Acl]>, i64> = HashMap::new();
    let mut acls = std::collections::BTreeMap::new();
    let mut nodes = Vec::with_capacity(tree.node_count());
    for (path, n) in tree.walk() {
        let next = ids.len() as i64 + 1;
        let id = *ids.entry(n.acl.clone()).or_insert_with(|| {
            acls.insert(next, n.acl.to_vec());
            next
        });
        nodes.push(ZkNode {
            path: path.to_string(),
            data: n.data.clone(),
            acl: id,
            stat: StatPersisted {
                czxid: n.czxid,
                mzxid: n.mzxid,
                ctime: n.ctime,
                mtime: n.mtime,
                version: n.version,
                cversion: n.child_creates,
                aversion: n.aversion,
                ephemeral_owner: n.ephemeral_owner,
                pzxid: n.pzxid,
            },
        });
    }
    let digest = ZxidDigest { zxid: tree.last_zxid(), version: DIGEST_VERSION, digest: tree_digest(tree) };
    ZkSnapshot { db_id: SNAP_DB_ID, sessions, acls, nodes, digest: Some(digest), last_processed_zxid: None }
}

/// What an export wrote.
#[derive(Debug)]
pub struct ExportReport {
    pub zxid: i64,
    pub nodes: usize,
    pub sessions: usize,
    pub digest: i64,
    pub written: PathBuf,
    pub epochs: Option<(u32, u32)>,
    pub warnings: Vec<String>,
}

/// `export-zookeeper`: recovers the ringkeeper data dir (as start-up does) and writes
/// `to/version-2/snapshot.<zxid>`, plus ZooKeeper's epoch files when the dir has epochs (an
/// ensemble member's).
pub fn export_zookeeper(data_dir: &Path, log_dir: Option<&Path>, to: &Path) -> Result<ExportReport, MigrateError> {
    if !data_dir.is_dir() {
        return Err(MigrateError::Refused(format!("{}: no such data directory", data_dir.display())));
    }
    let rec = recover(data_dir, log_dir.unwrap_or(data_dir))
        .map_err(|e| MigrateError::Refused(format!("{}: {e}", data_dir.display())))?;
    let tree = rebuild_tree(&rec).map_err(|e| MigrateError::Refused(format!("{}: {e}", data_dir.display())))?;
    let (accepted, current) =
        read_epochs(data_dir).map_err(|e| MigrateError::Refused(format!("{}: {e}", data_dir.display())))?;
    let epochs = (accepted > 0 || current > 0).then_some((accepted, current));
    let snap = zk_snapshot_of(&tree);
    let digest = snap.digest.map_or(0, |d| d.digest);
    let tmp = begin_target(to, "export")?;
    let name = zk_snapshot_name(tree.last_zxid());
    build_in(&tmp, |dir| {
        let v2 = dir.join(ZK_VERSION_DIR);
        fs::create_dir(&v2).map_err(io_err(&v2))?;
        write_synced(&v2.join(&name), &encode_snapshot(&snap))?;
        if let Some((a, c)) = epochs {
            write_synced(&v2.join(ZK_ACCEPTED_EPOCH_FILE), a.to_string().as_bytes())?;
            write_synced(&v2.join(ZK_CURRENT_EPOCH_FILE), c.to_string().as_bytes())?;
        }
        fsync_dir(&v2).map_err(io_err(&v2))?;
        finish_target(dir, to)
    })?;
    Ok(ExportReport {
        zxid: tree.last_zxid(),
        nodes: tree.node_count(),
        sessions: tree.sessions().count(),
        digest,
        written: to.join(ZK_VERSION_DIR).join(name),
        epochs,
        warnings: rec.warnings.clone(),
    })
}
