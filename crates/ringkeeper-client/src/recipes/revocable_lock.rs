//! Revocable shared lock (seed 001, "Revocable Shared Locks"): the shared read/write lock,
//! whose holders can be asked to give it up.
//! Rules: the shared lock's protocol (`rw_lock`), plus: right after creating its node, a
//! participant reads that node with a data watch; whoever wants the lock back writes
//! `REVOKE_REQUEST` ("unlock") into the holder's node (`request_revocation`); the watch fires,
//! the participant reads the node again (with a new watch) and, on "unlock",
//! `revocation_requested` returns: the holder consents by releasing when it is ready. Nobody
//! deletes another's node (no forced revocation).

use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::lock::Lock;
use super::rw_lock::{READ, WRITE};
use super::sequential::Kind;
use super::{ensure_path, node_event, retried, RecipeError, RecipeResult};
use crate::client::{Client, OneShotWatch};
use crate::types::{EventType, KeeperError, ANY_VERSION};

/// The data a revoker writes into a lock node.
pub const REVOKE_REQUEST: &[u8] = b"unlock";

/// One side (read or write) of a revocable shared lock.
#[derive(Debug)]
pub struct RevocableLock {
    lock: Lock,
    /// The node's data as read right after the create, with the watch that read set; until
    /// `revocation_requested` takes them.
    first_read: Mutex<Option<(Bytes, OneShotWatch)>>,
}

fn slot(m: &Mutex<Option<(Bytes, OneShotWatch)>>) -> MutexGuard<'_, Option<(Bytes, OneShotWatch)>> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl RevocableLock {
    fn new(client: &Client, dir: &str, kind: &'static Kind) -> RevocableLock {
        RevocableLock { lock: Lock::of_kind(client, dir, kind), first_read: Mutex::new(None) }
    }

    /// Waits until this side holds the lock. A revocation asked while waiting is seen by
    /// `revocation_requested` once held.
    pub async fn acquire(&self) -> RecipeResult<()> {
        let (name, created) = self.lock.enqueue().await?;
        if created {
            let path = super::child_path(self.lock.dir(), &name);
            let (data, _, watch) = retried(|| self.lock.client().get_data_w(&path)).await?;
            *slot(&self.first_read) = Some((data, watch));
        }
        self.lock.wait().await
    }

    /// Releases the lock (or withdraws a waiting node).
    pub async fn release(&self) -> RecipeResult<()> {
        slot(&self.first_read).take();
        self.lock.release().await
    }

    /// True while this handle holds the lock (and nobody revoked it).
    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    /// The path of this side's node: what a revoker passes to `request_revocation`.
    pub fn node(&self) -> Option<String> {
        self.lock.node()
    }

    /// Returns once someone has asked this holder to give the lock up (its node holds
    /// `REVOKE_REQUEST`); NodeLost if the node goes away first. The caller then releases.
    pub async fn revocation_requested(&self) -> RecipeResult<()> {
        let path = self.lock.node().ok_or(RecipeError::NotHeld)?;
        let client = self.lock.client();
        let mut read = slot(&self.first_read).take();
        loop {
            let (data, watch) = match read.take() {
                Some(r) => r,
                None => match retried(|| client.get_data_w(&path)).await {
                    Ok((data, _, watch)) => (data, watch),
                    Err(RecipeError::Keeper(KeeperError::NoNode)) => return Err(RecipeError::NodeLost(path)),
                    Err(e) => return Err(e),
                },
            };
            if data.as_ref() == REVOKE_REQUEST {
                return Ok(());
            }
            if node_event(watch.await)?.event_type == EventType::NodeDeleted {
                return Err(RecipeError::NodeLost(path));
            }
        }
    }
}

/// One participant's read and write sides of the revocable shared lock at a directory.
#[derive(Debug)]
pub struct RevocableReadWriteLock {
    read: RevocableLock,
    write: RevocableLock,
}

impl RevocableReadWriteLock {
    /// A participant of the revocable shared lock at `dir` (created if missing). The lock is
    /// the same as `rw_lock`'s: both kinds of participant may share a directory.
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<RevocableReadWriteLock> {
        ensure_path(client, dir).await?;
        Ok(RevocableReadWriteLock {
            read: RevocableLock::new(client, dir, &READ),
            write: RevocableLock::new(client, dir, &WRITE),
        })
    }

    /// The read (shared) side of the lock.
    pub fn read(&self) -> &RevocableLock {
        &self.read
    }

    /// The write (exclusive) side of the lock.
    pub fn write(&self) -> &RevocableLock {
        &self.write
    }
}

/// Asks the holder of lock node `node` to release it (writes `REVOKE_REQUEST` into it);
/// NoNode if it is already gone.
pub async fn request_revocation(client: &Client, node: &str) -> RecipeResult<()> {
    retried(|| client.set_data(node, REVOKE_REQUEST, ANY_VERSION)).await.map(|_| ())
}
