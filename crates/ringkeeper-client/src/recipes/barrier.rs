//! Barrier (seed 001, "Barriers"): holds processes back while a barrier node exists.
//! Rules: the barrier is up while its node exists; `wait` calls exists with a watch and
//! returns when the node is absent, else sleeps on the watch and calls exists again when it
//! fires (no polling). `set` creates the node (persistent; already up is fine), `remove`
//! deletes it (already down is fine), which wakes every waiter — all of them may proceed.

use super::{delete_if_present, ensure_path, node_event, retried, RecipeResult};
use crate::client::Client;

/// A barrier at one node path.
#[derive(Debug, Clone)]
pub struct Barrier {
    client: Client,
    path: String,
}

impl Barrier {
    /// The barrier whose node is `path` (nothing is created until `set`).
    pub fn new(client: &Client, path: &str) -> Barrier {
        Barrier { client: client.clone(), path: path.to_string() }
    }

    /// Puts the barrier up (creates its node and missing ancestors).
    pub async fn set(&self) -> RecipeResult<()> {
        ensure_path(&self.client, &self.path).await
    }

    /// Takes the barrier down: every waiter proceeds.
    pub async fn remove(&self) -> RecipeResult<()> {
        delete_if_present(&self.client, &self.path).await
    }

    /// Whether the barrier is up now.
    pub async fn is_set(&self) -> RecipeResult<bool> {
        Ok(retried(|| self.client.exists(&self.path)).await?.is_some())
    }

    /// Returns once the barrier is down (at once if it is).
    pub async fn wait(&self) -> RecipeResult<()> {
        loop {
            match retried(|| self.client.exists_w(&self.path)).await? {
                (None, _) => return Ok(()),
                (Some(_), watch) => {
                    node_event(watch.await)?;
                }
            }
        }
    }
}
