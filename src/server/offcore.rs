//! Blocking file work moved off the executors: the pipeline executor's blocking pool (unpinned
//! threads, `BLOCKING_THREADS`) runs it, and the calling task only awaits the result. Used for
//! the snapshot writer and autopurge (`snapshot_writer`), and for an ensemble member's small
//! durable files (the epochs file, the rejoin marker), each an atomic temp + fsync + rename +
//! directory fsync that can take a disk's full sync latency.
//! Rules: only from a task on a glommio executor; a job owns what it touches (moved in, `Send`)
//! and never blocks on the executor that waits for it; the caller still awaits completion, so
//! the order of durable effects is the order of the awaits (nothing is acknowledged before the
//! job that makes it durable has returned).

use crate::storage::peer_state::{self, PeerStateError};
use std::path::PathBuf;

/// Threads of the pipeline executor's blocking pool (unpinned: a pinned executor's pool would
/// share its CPU): one for a snapshot (and the purge after it), the others free for glommio's
/// own blocking file operations (rename, remove, truncate) and the small durable files, so a
/// long snapshot never queues them.
pub const BLOCKING_THREADS: usize = 3;

/// Runs `job` on the executor's blocking pool and returns its result.
pub async fn run<F, R>(job: F) -> R
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    glommio::executor().spawn_blocking(job).await
}

/// `peer_state::write_epochs` on the blocking pool.
pub async fn write_epochs(data_dir: PathBuf, accepted: u32, current: u32) -> Result<(), PeerStateError> {
    run(move || peer_state::write_epochs(&data_dir, accepted, current)).await
}

/// `peer_state::write_membership` on the blocking pool.
pub async fn write_membership(data_dir: PathBuf, m: peer_state::Membership) -> Result<(), PeerStateError> {
    run(move || peer_state::write_membership(&data_dir, &m)).await
}

/// `peer_state::clear_rejoin_pending` on the blocking pool.
pub async fn clear_rejoin_pending(data_dir: PathBuf) -> Result<(), PeerStateError> {
    run(move || peer_state::clear_rejoin_pending(&data_dir)).await
}
