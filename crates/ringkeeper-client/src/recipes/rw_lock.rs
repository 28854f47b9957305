//! Shared read/write lock (seed 001, "Shared Locks"): any number of readers together, or one
//! writer alone, in the order they asked.
//! Rules: a reader creates `<dir>/<guid>-read-<sequence>`, a writer `<dir>/<guid>-write-
//! <sequence>` (sequential, ephemeral, GUID rule); children are listed without a watch; a
//! reader holds the lock when no write node has a lower sequence number, else it watches the
//! next lower write node only; a writer holds it when no node at all is lower, else it
//! watches the next lower node only. Readers queued behind one writer are all released when
//! that writer leaves — they all get the lock, which is not a herd. A writer that asked
//! before a reader goes first (no writer starvation).

use super::lock::Lock;
use super::sequential::{holders, Kind};
use super::{child_path, ensure_path, retried, RecipeResult};
use crate::client::Client;

/// A read node is blocked by lower write nodes only.
pub(crate) const READ: Kind = Kind { prefix: "read-", blocked_by: &["write-"] };
/// A write node is blocked by any lower node.
pub(crate) const WRITE: Kind = Kind { prefix: "write-", blocked_by: &["read-", "write-"] };

/// One participant's two sides of the shared lock at a directory: `read()` and `write()` are
/// locks with `Lock`'s calls (acquire, try_acquire, release, ...).
#[derive(Debug)]
pub struct ReadWriteLock {
    read: Lock,
    write: Lock,
}

impl ReadWriteLock {
    /// A participant of the shared lock at `dir` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<ReadWriteLock> {
        ensure_path(client, dir).await?;
        Ok(ReadWriteLock { read: Lock::of_kind(client, dir, &READ), write: Lock::of_kind(client, dir, &WRITE) })
    }

    /// The read (shared) side.
    pub fn read(&self) -> &Lock {
        &self.read
    }

    /// The write (exclusive) side.
    pub fn write(&self) -> &Lock {
        &self.write
    }
}

/// The paths of the nodes holding the shared lock at `dir` now (readers, or one writer), in
/// sequence order.
pub async fn holders_of(client: &Client, dir: &str) -> RecipeResult<Vec<String>> {
    let children = retried(|| client.get_children(dir)).await?;
    Ok(holders(&children, &[&READ, &WRITE]).into_iter().map(|n| child_path(dir, n)).collect())
}
