//! Group membership (seed 001, "Out of the Box Applications"): the group is a node, each
//! member an ephemeral child, so a member that fails leaves the group by itself.
//! Rules: `join` creates `<group>/<member>` ephemeral (a lost create reply is recovered by the
//! node's owner being this session; another session's member of that name is NodeExists);
//! `members` lists the children; `watch` follows the membership: every listing sets a
//! children watch, and a change is reported as the listing that follows the watch, so the
//! last change is never missed (intermediate ones may be seen together).

use bytes::Bytes;

use super::{check_name, child_path, create_owned_ephemeral, delete_if_present, ensure_path, node_event, retried};
use super::{sorted_children, RecipeResult};
use crate::client::{Client, OneShotWatch};

/// A group at one node path.
#[derive(Debug, Clone)]
pub struct Group {
    client: Client,
    path: String,
}

impl Group {
    /// The group at `path` (created, with its ancestors, if missing).
    pub async fn new(client: &Client, path: &str) -> RecipeResult<Group> {
        ensure_path(client, path).await?;
        Ok(Group { client: client.clone(), path: path.to_string() })
    }

    /// Joins as `member` with `data`; the membership lasts until `leave` or the session's end.
    pub async fn join(&self, member: &str, data: impl Into<Bytes>) -> RecipeResult<String> {
        check_name(member, &[])?;
        let path = child_path(&self.path, member);
        create_owned_ephemeral(&self.client, &path, data.into()).await?;
        Ok(path)
    }

    /// Leaves the group (a member that is not there is fine).
    pub async fn leave(&self, member: &str) -> RecipeResult<()> {
        check_name(member, &[])?;
        delete_if_present(&self.client, &child_path(&self.path, member)).await
    }

    /// The members now, in name order.
    pub async fn members(&self) -> RecipeResult<Vec<String>> {
        sorted_children(&self.client, &self.path).await
    }

    /// A member's data.
    pub async fn member_data(&self, member: &str) -> RecipeResult<Bytes> {
        check_name(member, &[])?;
        let path = child_path(&self.path, member);
        Ok(retried(|| self.client.get_data(&path)).await?.0)
    }

    /// Starts following the membership.
    pub async fn watch(&self) -> RecipeResult<MembershipWatch> {
        let (members, watch) = list_w(&self.client, &self.path).await?;
        Ok(MembershipWatch { group: self.clone(), members, watch: Some(watch) })
    }
}

async fn list_w(client: &Client, path: &str) -> RecipeResult<(Vec<String>, OneShotWatch)> {
    let (mut members, watch) = retried(|| client.get_children_w(path)).await?;
    members.sort();
    Ok((members, watch))
}

/// The membership of a group as last read, and the watch for its next change.
#[derive(Debug)]
pub struct MembershipWatch {
    group: Group,
    members: Vec<String>,
    /// `None` after a failed listing: the next `changed` lists again first.
    watch: Option<OneShotWatch>,
}

impl MembershipWatch {
    /// The members as last read, in name order.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Waits for the membership to change and returns the new one.
    pub async fn changed(&mut self) -> RecipeResult<&[String]> {
        loop {
            if let Some(watch) = self.watch.take() {
                node_event(watch.await)?;
            }
            let (members, watch) = list_w(&self.group.client, &self.group.path).await?;
            self.watch = Some(watch);
            if members != self.members {
                self.members = members;
                return Ok(&self.members);
            }
        }
    }
}
