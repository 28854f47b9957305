//! Two-phase commit (seed 001, "Two-phased Commit"): the sites of a transaction agree to
//! commit it or to abort it.
//! Rules: the coordinator creates the transaction node `/…/Tx` (its data the transaction)
//! and one child per site `Tx/<site>` with empty data, all in one multi (so no site sees a
//! half-made set); each site reads the transaction, votes by writing `commit` or `abort`
//! into its own child — once: the write is conditional on the child's version 0, and a second
//! vote is AlreadyVoted — and learns the outcome by reading every child with a data watch:
//! any abort decides abort at once, all commit decides commit, otherwise it sleeps on the
//! watches of the sites that have not voted and reads again only the one that fired. The
//! coordinator may cast abort for sites that never voted (`abort_unvoted`, the same
//! conditional write, so a vote already cast stands) — how long to wait is its own choice —
//! and removes the transaction's nodes once done.

use bytes::Bytes;

use super::{check_name, child_path, first_event, node_event, retried, sorted_children, RecipeError, RecipeResult};
use crate::client::{Client, OneShotWatch};
use crate::types::{CreateMode, KeeperError, Op, ANY_VERSION};
use crate::OPEN_ACL_UNSAFE;

/// The data of a commit vote.
pub const VOTE_COMMIT: &[u8] = b"commit";
/// The data of an abort vote.
pub const VOTE_ABORT: &[u8] = b"abort";
/// Sites of one transaction at most (its nodes are made by one multi).
pub const SITES_MAX: usize = 1_000;

/// A site's vote, and the transaction's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vote {
    /// Commit the transaction.
    Commit,
    /// Abort the transaction.
    Abort,
}

impl Vote {
    fn data(self) -> &'static [u8] {
        match self {
            Vote::Commit => VOTE_COMMIT,
            Vote::Abort => VOTE_ABORT,
        }
    }

    /// The vote a site's child holds: `None` before it voted.
    fn parse(data: &[u8], path: &str) -> RecipeResult<Option<Vote>> {
        match data {
            b"" => Ok(None),
            d if d == VOTE_COMMIT => Ok(Some(Vote::Commit)),
            d if d == VOTE_ABORT => Ok(Some(Vote::Abort)),
            _ => Err(RecipeError::Malformed(path.to_string())),
        }
    }
}

/// One transaction, as its coordinator or one of its sites sees it.
#[derive(Debug, Clone)]
pub struct Transaction {
    client: Client,
    path: String,
}

impl Transaction {
    /// Coordinator: creates the transaction at `path` (its parent must exist) carrying
    /// `payload`, with one child per site.
    pub async fn create(
        client: &Client,
        path: &str,
        payload: impl Into<Bytes>,
        sites: &[&str],
    ) -> RecipeResult<Transaction> {
        if sites.is_empty() || sites.len() > SITES_MAX {
            return Err(RecipeError::BadArgument(format!("{} sites (1 to {SITES_MAX})", sites.len())));
        }
        let mut ops = vec![Op::create(path, payload.into(), &OPEN_ACL_UNSAFE, CreateMode::Persistent)];
        for site in sites {
            check_name(site, &[])?;
            ops.push(Op::create(&child_path(path, site), Bytes::new(), &OPEN_ACL_UNSAFE, CreateMode::Persistent));
        }
        let tx = Transaction::open(client, path);
        match client.multi(ops.clone()).await {
            Ok(_) => Ok(tx),
            // The reply was lost: the multi happened (all of it) or not at all.
            Err(e) if super::is_recoverable(e) => match retried(|| client.exists(path)).await? {
                Some(_) => Ok(tx),
                None => {
                    retried(|| client.multi(ops.clone())).await?;
                    Ok(tx)
                }
            },
            Err(e) => Err(e.into()),
        }
    }

    /// A site's (or an observer's) view of the transaction at `path`.
    pub fn open(client: &Client, path: &str) -> Transaction {
        Transaction { client: client.clone(), path: path.to_string() }
    }

    /// The transaction's node.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The transaction's payload.
    pub async fn payload(&self) -> RecipeResult<Bytes> {
        Ok(retried(|| self.client.get_data(&self.path)).await?.0)
    }

    /// The transaction's sites, sorted.
    pub async fn sites(&self) -> RecipeResult<Vec<String>> {
        sorted_children(&self.client, &self.path).await
    }

    /// Casts `site`'s vote; AlreadyVoted if it holds another vote (the same vote again is
    /// fine: a retry after a lost reply).
    pub async fn vote(&self, site: &str, vote: Vote) -> RecipeResult<()> {
        check_name(site, &[])?;
        let path = child_path(&self.path, site);
        match retried(|| self.client.set_data(&path, vote.data(), 0)).await {
            Ok(_) => Ok(()),
            Err(RecipeError::Keeper(KeeperError::BadVersion)) => {
                let (data, _) = retried(|| self.client.get_data(&path)).await?;
                if Vote::parse(&data, &path)? == Some(vote) {
                    Ok(())
                } else {
                    Err(RecipeError::AlreadyVoted(path))
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Coordinator: casts abort for every site that has not voted; returns those sites.
    pub async fn abort_unvoted(&self) -> RecipeResult<Vec<String>> {
        let mut aborted = Vec::new();
        for site in self.sites().await? {
            let path = child_path(&self.path, &site);
            match retried(|| self.client.set_data(&path, VOTE_ABORT, 0)).await {
                Ok(_) => aborted.push(site),
                Err(RecipeError::Keeper(KeeperError::BadVersion)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(aborted)
    }

    /// Reads `site`'s vote with a data watch.
    async fn read_vote(&self, site: &str) -> RecipeResult<(Option<Vote>, OneShotWatch)> {
        let path = child_path(&self.path, site);
        match retried(|| self.client.get_data_w(&path)).await {
            Ok((data, _, watch)) => Ok((Vote::parse(&data, &path)?, watch)),
            Err(RecipeError::Keeper(KeeperError::NoNode)) => Err(RecipeError::NodeLost(path)),
            Err(e) => Err(e),
        }
    }

    /// Waits for the outcome: Abort as soon as one site voted abort, Commit once all voted
    /// commit.
    pub async fn outcome(&self) -> RecipeResult<Vote> {
        let mut waiting: Vec<String> = Vec::new();
        let mut watches: Vec<OneShotWatch> = Vec::new();
        for site in self.sites().await? {
            match self.read_vote(&site).await? {
                (Some(Vote::Abort), _) => return Ok(Vote::Abort),
                (Some(Vote::Commit), _) => {}
                (None, watch) => {
                    waiting.push(site);
                    watches.push(watch);
                }
            }
        }
        while !waiting.is_empty() {
            let (i, event) = first_event(&mut watches).await;
            node_event(event)?;
            match self.read_vote(&waiting[i]).await? {
                (Some(Vote::Abort), _) => return Ok(Vote::Abort),
                (Some(Vote::Commit), _) => {
                    waiting.swap_remove(i);
                    drop(watches.swap_remove(i));
                }
                (None, watch) => watches[i] = watch,
            }
        }
        Ok(Vote::Commit)
    }

    /// Coordinator: deletes the transaction's nodes (all in one multi).
    pub async fn remove(&self) -> RecipeResult<()> {
        let mut ops: Vec<Op> =
            self.sites().await?.iter().map(|s| Op::delete(&child_path(&self.path, s), ANY_VERSION)).collect();
        ops.push(Op::delete(&self.path, ANY_VERSION));
        match retried(|| self.client.multi(ops.clone())).await {
            Ok(_) | Err(RecipeError::Keeper(KeeperError::NoNode)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
