//! Leader election (seed 001, "Leader Election"): among the candidates, the one whose node
//! has the smallest sequence number leads; when it goes, the next one takes over.
//! Rules: a candidate volunteers by creating `<dir>/<guid>-n_<sequence>` (sequential,
//! ephemeral, its data the candidate's identity; GUID rule: after a lost create reply the
//! node is found by its GUID among the children, never created twice); it lists the children
//! and, unless its node is the smallest, watches only the node just below its own (no herd
//! effect: a leader's departure wakes one candidate). When that fires it lists again: if its
//! node is now the smallest it leads, else it watches its new predecessor. The leader's
//! process dying ends its session, which deletes its node and wakes the next candidate.
//! Leading is known only to the candidate itself: `leader` tells others who it is.

use bytes::Bytes;

use super::sequential::{line, Contender, Kind};
use super::{child_path, ensure_path, retried, RecipeError, RecipeResult};
use crate::client::Client;
use crate::types::KeeperError;

/// A candidate's node kind: every lower candidate is ahead of it.
const CANDIDATE: Kind = Kind { prefix: "n_", blocked_by: &["n_"] };

/// One candidate of the election at a directory.
///
/// ```no_run
/// use ringkeeper_client::recipes::leader_election::LeaderElection;
/// use ringkeeper_client::Client;
///
/// async fn lead(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
///     let election = LeaderElection::new(client, "/election/scheduler").await?;
///     election.volunteer("host-a:8080").await?;
///     election.wait_for_leadership().await?;
///     // ... lead until done, or until the session ends ...
///     election.resign().await?;
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct LeaderElection {
    contender: Contender,
}

impl LeaderElection {
    /// A candidate of the election at `dir` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, dir: &str) -> RecipeResult<LeaderElection> {
        ensure_path(client, dir).await?;
        Ok(LeaderElection { contender: Contender::new(client, dir, &CANDIDATE) })
    }

    /// Joins the election with `data` as this candidate's identity (what `leader` returns);
    /// returns the candidate's node path. Joining again keeps the node made first.
    pub async fn volunteer(&self, data: impl Into<Bytes>) -> RecipeResult<String> {
        let _busy = self.contender.begin()?;
        let (name, _) = self.contender.enqueue(data.into()).await?;
        Ok(child_path(self.contender.dir(), &name))
    }

    /// Waits until this candidate leads (it must have volunteered).
    pub async fn wait_for_leadership(&self) -> RecipeResult<()> {
        let _busy = self.contender.begin()?;
        self.contender.wait_first().await
    }

    /// Whether this candidate leads now (one look, no watch).
    pub async fn is_leader(&self) -> RecipeResult<bool> {
        let _busy = self.contender.begin()?;
        self.contender.check().await
    }

    /// Leaves the election (deletes the node; the next candidate takes over).
    pub async fn resign(&self) -> RecipeResult<()> {
        let _busy = self.contender.begin()?;
        self.contender.withdraw().await
    }

    /// This candidate's node path, once it has volunteered.
    pub fn node(&self) -> Option<String> {
        self.contender.node_path()
    }

    /// Watch events that woke this candidate up while it waited.
    pub fn wakeups(&self) -> u64 {
        self.contender.wakeups()
    }
}

/// The current leader of the election at `dir`: its node path and identity; `None` when
/// there is no candidate.
pub async fn leader(client: &Client, dir: &str) -> RecipeResult<Option<(String, Bytes)>> {
    loop {
        let children = retried(|| client.get_children(dir)).await?;
        let Some(first) = line(&children, &[CANDIDATE.prefix]).into_iter().next() else { return Ok(None) };
        let path = child_path(dir, first.name);
        match retried(|| client.get_data(&path)).await {
            Ok((data, _)) => return Ok(Some((path, data))),
            // The leader left between the two reads: look again.
            Err(RecipeError::Keeper(KeeperError::NoNode)) => continue,
            Err(e) => return Err(e),
        }
    }
}
