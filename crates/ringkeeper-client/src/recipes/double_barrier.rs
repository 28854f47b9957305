//! Double barrier (seed 001, "Double Barriers"): a set number of processes start a
//! computation together and finish it together.
//! Rules (seed 001's algorithm): `enter` sets an exists-watch on `<barrier>/ready`, creates
//! the participant's ephemeral node `<barrier>/<name>` (a lost reply is recovered by the
//! node's owner being this session), lists the children and, with fewer process nodes than
//! the count, sleeps on the ready watch; the process that sees the count reached creates
//! `ready`, which wakes the others (waiters wake only when it is time to go). `leave` lists
//! the process nodes (`ready` is not one): none left, done; only its own, it deletes it and
//! is done; the lowest process watches the highest and waits; any other deletes its node and
//! watches the lowest; each goes back to listing when its watch fires — one wake-up per
//! deletion but the last. The participant that leaves last also deletes `ready`, so a
//! barrier path serves one round at a time: use a fresh path per round (a participant that
//! enters before the previous round's last leave deleted `ready` would pass at once).
//! Participants that fail are removed with their session and do not hold the others.

use bytes::Bytes;

use super::{check_name, child_path, create_if_absent, create_owned_ephemeral, delete_if_present, ensure_path};
use super::{node_event, retried, sorted_children, RecipeError, RecipeResult};
use crate::client::Client;

/// The child whose creation lets everybody in.
pub const READY_NODE: &str = "ready";

/// One participant of a double barrier.
#[derive(Debug, Clone)]
pub struct DoubleBarrier {
    client: Client,
    path: String,
    name: String,
    count: usize,
}

impl DoubleBarrier {
    /// Participant `name` of the barrier at `path` (created if missing) for `count` processes.
    pub async fn new(client: &Client, path: &str, name: &str, count: usize) -> RecipeResult<DoubleBarrier> {
        check_name(name, &[READY_NODE])?;
        if count == 0 {
            return Err(RecipeError::BadArgument("a double barrier for 0 processes".into()));
        }
        ensure_path(client, path).await?;
        Ok(DoubleBarrier { client: client.clone(), path: path.to_string(), name: name.to_string(), count })
    }

    fn node(&self) -> String {
        child_path(&self.path, &self.name)
    }

    /// The process nodes now, in name order.
    async fn processes(&self) -> RecipeResult<Vec<String>> {
        let mut children = sorted_children(&self.client, &self.path).await?;
        children.retain(|c| c != READY_NODE);
        Ok(children)
    }

    /// Registers and waits until `count` processes have.
    pub async fn enter(&self) -> RecipeResult<()> {
        let ready = child_path(&self.path, READY_NODE);
        let (present, watch) = retried(|| self.client.exists_w(&ready)).await?;
        create_owned_ephemeral(&self.client, &self.node(), Bytes::new()).await?;
        if present.is_some() {
            return Ok(());
        }
        if self.processes().await?.len() >= self.count {
            return create_if_absent(&self.client, &ready).await;
        }
        let mut watch = watch;
        loop {
            node_event(watch.await)?;
            // Fired by `ready`'s creation (or, after a round ended, its deletion: look again).
            match retried(|| self.client.exists_w(&ready)).await? {
                (Some(_), _) => return Ok(()),
                (None, w) => watch = w,
            }
        }
    }

    /// Unregisters and waits until every process has.
    pub async fn leave(&self) -> RecipeResult<()> {
        loop {
            let processes = self.processes().await?;
            let Some(lowest) = processes.first() else { break };
            if processes.len() == 1 && *lowest == self.name {
                delete_if_present(&self.client, &self.node()).await?;
                break;
            }
            let own = processes.contains(&self.name);
            let watched = if *lowest == self.name {
                processes.last().unwrap_or(lowest)
            } else {
                if own {
                    delete_if_present(&self.client, &self.node()).await?;
                }
                lowest
            };
            let watched = child_path(&self.path, watched);
            if let (Some(_), watch) = retried(|| self.client.exists_w(&watched)).await? {
                node_event(watch.await)?;
            }
        }
        delete_if_present(&self.client, &child_path(&self.path, READY_NODE)).await
    }
}
