//! Exclusive lock (seed 001, "Locks"): at any time at most one holder among all clients.
//! Rules: to acquire, create `<dir>/<guid>-lock-<sequence>` (sequential, ephemeral, GUID
//! rule: a lost reply is found by its GUID, not created again); list the children without a
//! watch; the lowest sequence number holds the lock; any other sets an exists-watch on the
//! next lower node only and lists again when it fires — a release wakes exactly one waiter,
//! no polling, no timeout. Release deletes the node; a holder whose session ends loses the
//! lock with its ephemeral node, and the next waiter gets it.
//! A `Lock` is one participant: one acquisition at a time, one task at a time (Busy
//! otherwise). An acquire future dropped while waiting leaves the node in line: acquire
//! again to resume, or release to withdraw it.

use bytes::Bytes;

use super::sequential::{Contender, Kind};
use super::{ensure_path, RecipeError, RecipeResult};
use crate::client::Client;

/// The exclusive lock's node kind: every lower lock node blocks.
pub(crate) const EXCLUSIVE: Kind = Kind { prefix: "lock-", blocked_by: &["lock-"] };

/// One participant of a lock; see the module rules.
///
/// ```no_run
/// use ringkeeper_client::recipes::lock::Lock;
/// use ringkeeper_client::Client;
///
/// async fn exclusive_work(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
///     let lock = Lock::new(client, "/locks/reindex").await?;
///     lock.acquire().await?; // waits, watching only its predecessor
///     // ... the work only one holder may do ...
///     lock.release().await?;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Lock {
    contender: Contender,
}

impl Lock {
    /// A participant of the exclusive lock at `dir` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<Lock> {
        ensure_path(client, dir).await?;
        Ok(Lock::of_kind(client, dir, &EXCLUSIVE))
    }

    /// A participant whose node is of `kind` (the shared locks' read and write sides).
    pub(crate) fn of_kind(client: &Client, dir: &str, kind: &'static Kind) -> Lock {
        Lock { contender: Contender::new(client, dir, kind) }
    }

    /// Waits until this participant holds the lock.
    pub async fn acquire(&self) -> RecipeResult<()> {
        let _busy = self.begin()?;
        self.contender.enqueue(Bytes::new()).await?;
        self.contender.wait_first().await
    }

    /// Takes the lock if nobody is ahead, without waiting; false (and no node left behind)
    /// otherwise.
    pub async fn try_acquire(&self) -> RecipeResult<bool> {
        let _busy = self.begin()?;
        self.contender.enqueue(Bytes::new()).await?;
        if self.contender.check().await? {
            return Ok(true);
        }
        self.contender.withdraw().await?;
        Ok(false)
    }

    /// The first half of `acquire` alone: this participant's node, created now unless it has
    /// one. The shared locks read or watch it before waiting.
    pub(crate) async fn enqueue(&self) -> RecipeResult<(String, bool)> {
        let _busy = self.begin()?;
        self.contender.enqueue(Bytes::new()).await
    }

    /// The second half of `acquire`: waits until the node made by `enqueue` holds the lock.
    pub(crate) async fn wait(&self) -> RecipeResult<()> {
        let _busy = self.begin()?;
        self.contender.wait_first().await
    }

    fn begin(&self) -> RecipeResult<super::sequential::Busy<'_>> {
        let busy = self.contender.begin()?;
        if self.contender.is_held() {
            return Err(RecipeError::AlreadyHeld);
        }
        Ok(busy)
    }

    /// Releases the lock (or withdraws a waiting node); NotHeld if there is no node.
    pub async fn release(&self) -> RecipeResult<()> {
        let _busy = self.contender.begin()?;
        self.contender.withdraw().await
    }

    /// Whether this participant held the lock when it last looked (a holder whose session
    /// expired learns it on its next call).
    pub fn is_held(&self) -> bool {
        self.contender.is_held()
    }

    /// The path of this participant's lock node (while holding or waiting).
    pub fn node(&self) -> Option<String> {
        self.contender.node_path()
    }

    /// The lock's directory.
    pub fn dir(&self) -> &str {
        self.contender.dir()
    }

    pub(crate) fn client(&self) -> &Client {
        self.contender.client()
    }

    /// How many watch events woke this participant up while it waited (one per removal of
    /// its predecessor): the measure of the herd effect.
    pub fn wakeups(&self) -> u64 {
        self.contender.wakeups()
    }
}
