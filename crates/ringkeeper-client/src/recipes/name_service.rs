//! Name service (seed 001, "Out of the Box Applications"): names bound to values, each name
//! a persistent child of the service's root node.
//! Rules: `bind` creates or overwrites `<root>/<name>`; `resolve` reads it (`None` for an
//! unbound name); `unbind` deletes it; a client that must follow a binding as it changes uses
//! `configuration::Configuration::follow` on `path_of(name)` (watch and reload).

use bytes::Bytes;

use super::configuration::publish;
use super::RecipeResult;
use super::{check_name, child_path, delete_if_present, ensure_path, retried, sorted_children, RecipeError};
use crate::client::Client;
use crate::types::KeeperError;

/// A name service rooted at one node.
#[derive(Debug, Clone)]
pub struct NameService {
    client: Client,
    root: String,
}

impl NameService {
    /// The name service at `root` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, root: &str) -> RecipeResult<NameService> {
        ensure_path(client, root).await?;
        Ok(NameService { client: client.clone(), root: root.to_string() })
    }

    /// The node path that holds `name`'s value.
    pub fn path_of(&self, name: &str) -> RecipeResult<String> {
        check_name(name, &[])?;
        Ok(child_path(&self.root, name))
    }

    /// Binds `name` to `value` (replacing any earlier value).
    pub async fn bind(&self, name: &str, value: impl Into<Bytes>) -> RecipeResult<()> {
        publish(&self.client, &self.path_of(name)?, value).await.map(|_| ())
    }

    /// The value bound to `name`, if any.
    pub async fn resolve(&self, name: &str) -> RecipeResult<Option<Bytes>> {
        let path = self.path_of(name)?;
        match retried(|| self.client.get_data(&path)).await {
            Ok((data, _)) => Ok(Some(data)),
            Err(RecipeError::Keeper(KeeperError::NoNode)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes `name`'s binding (an unbound name is fine).
    pub async fn unbind(&self, name: &str) -> RecipeResult<()> {
        delete_if_present(&self.client, &self.path_of(name)?).await
    }

    /// The bound names, sorted.
    pub async fn names(&self) -> RecipeResult<Vec<String>> {
        sorted_children(&self.client, &self.root).await
    }
}
