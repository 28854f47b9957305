//! Configuration (seed 001, "Out of the Box Applications"): a value that follows a znode —
//! watch and reload.
//! Rules: every read of the node sets a watch in the same call (getData with a watch while it
//! exists, exists with a watch while it does not), and the value is read again whenever that
//! watch fires, so the last update is never missed: a write after a read fires that read's
//! watch (intermediate values may be skipped, never the last). After a reconnect the client
//! sets the watch again and the server fires it for what changed meanwhile. `publish`
//! writes a value (creating the node if missing).

use bytes::Bytes;

use super::{ensure_path, node_event, retried, RecipeError, RecipeResult};
use crate::client::{Client, OneShotWatch};
use crate::types::{CreateMode, KeeperError, Stat, ANY_VERSION};
use crate::OPEN_ACL_UNSAFE;

/// A value that follows a znode.
#[derive(Debug)]
pub struct Configuration {
    client: Client,
    path: String,
    /// The value and its Stat as last read; `None` while the node does not exist.
    current: Option<(Bytes, Stat)>,
    /// `None` after a failed read: the next `changed` reads again first.
    watch: Option<OneShotWatch>,
}

/// Reads `path` with a watch: its data and Stat if it exists.
async fn read_w(client: &Client, path: &str) -> RecipeResult<(Option<(Bytes, Stat)>, OneShotWatch)> {
    loop {
        match retried(|| client.get_data_w(path)).await {
            Ok((data, stat, watch)) => return Ok((Some((data, stat)), watch)),
            Err(RecipeError::Keeper(KeeperError::NoNode)) => {}
            Err(e) => return Err(e),
        }
        // Present again: created between the two calls, read it.
        if let (None, watch) = retried(|| client.exists_w(path)).await? {
            return Ok((None, watch));
        }
    }
}

impl Configuration {
    /// Starts following `path` (which need not exist yet).
    pub async fn follow(client: &Client, path: &str) -> RecipeResult<Configuration> {
        let (current, watch) = read_w(client, path).await?;
        Ok(Configuration { client: client.clone(), path: path.to_string(), current, watch: Some(watch) })
    }

    /// The value as last read; `None` while the node does not exist.
    pub fn value(&self) -> Option<&Bytes> {
        self.current.as_ref().map(|(d, _)| d)
    }

    /// The node's data version as last read.
    pub fn version(&self) -> Option<i32> {
        self.current.as_ref().map(|(_, s)| s.version)
    }

    /// Waits for the node to change (data, creation or deletion) and returns the new value.
    pub async fn changed(&mut self) -> RecipeResult<Option<&Bytes>> {
        loop {
            if let Some(watch) = self.watch.take() {
                node_event(watch.await)?;
            }
            let (current, watch) = read_w(&self.client, &self.path).await?;
            self.watch = Some(watch);
            let key = |c: &Option<(Bytes, Stat)>| c.as_ref().map(|(_, s)| (s.czxid, s.mzxid));
            if key(&current) != key(&self.current) {
                self.current = current;
                return Ok(self.value());
            }
        }
    }
}

/// Writes `data` as the value at `path` (creating the node and its ancestors if missing);
/// the new Stat.
pub async fn publish(client: &Client, path: &str, data: impl Into<Bytes>) -> RecipeResult<Stat> {
    let data = data.into();
    loop {
        match retried(|| client.set_data(path, data.clone(), ANY_VERSION)).await {
            Ok(stat) => return Ok(stat),
            Err(RecipeError::Keeper(KeeperError::NoNode)) => {}
            Err(e) => return Err(e),
        }
        if let Some((parent, _)) = path.rsplit_once('/').filter(|(p, _)| !p.is_empty()) {
            ensure_path(client, parent).await?;
        }
        match retried(|| client.create2(path, data.clone(), &OPEN_ACL_UNSAFE, CreateMode::Persistent)).await {
            Ok((_, stat)) => return Ok(stat),
            // Created meanwhile (by someone else, or by a create whose reply was lost): set it.
            Err(RecipeError::Keeper(KeeperError::NodeExists)) => {}
            Err(e) => return Err(e),
        }
    }
}
