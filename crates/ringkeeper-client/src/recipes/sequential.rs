//! The waiting line the lock, the shared locks and the election share: each contender owns
//! one sequential-ephemeral node `<guid>-<prefix><sequence>` in a directory, and proceeds
//! when no node that blocks its kind has a lower sequence number.
//! Rules (seed 001's lock protocol): the children are listed without a watch; a blocked
//! contender sets one exists-watch, on its predecessor — the blocking node with the largest
//! sequence number below its own — and lists again only when that fires (or the node was
//! already gone), so a removal wakes only the contender behind it; the node is created under
//! the GUID rule (`create_protected`); a contender whose own node has vanished stops with
//! NodeLost, one whose session ended with that session's error. A wait dropped half-way
//! keeps the node: the next acquire resumes in its place, `withdraw` removes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::{child_path, create_protected, delete_if_present, new_guid, node_event, retried, split_sequence};
use super::{RecipeError, RecipeResult};
use crate::client::Client;
use crate::types::{CreateMode, KeeperError};

/// A kind of node in a waiting line: its name prefix and the prefixes of the nodes that block
/// it when lower in sequence.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Kind {
    pub prefix: &'static str,
    pub blocked_by: &'static [&'static str],
}

/// One child of the directory that belongs to the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    pub name: &'a str,
    pub prefix: &'static str,
    pub sequence: u32,
}

/// The children whose names end in one of `prefixes` and a sequence number, in sequence
/// order; other children are not part of the line.
pub(crate) fn line<'a>(children: &'a [String], prefixes: &[&'static str]) -> Vec<Entry<'a>> {
    let mut entries: Vec<Entry<'a>> = children
        .iter()
        .filter_map(|name| {
            let (stem, sequence) = split_sequence(name)?;
            let prefix = prefixes.iter().copied().find(|p| stem.ends_with(p))?;
            Some(Entry { name, prefix, sequence })
        })
        .collect();
    entries.sort_by_key(|e| e.sequence);
    entries
}

/// Where `own` stands among `children`: `None` if it is not there, `Some(None)` if nothing
/// blocks it, `Some(Some(name))` for its predecessor, the node to watch.
pub(crate) fn predecessor<'a>(children: &'a [String], own: &str, kind: &Kind) -> Option<Option<&'a str>> {
    let (_, own_sequence) = split_sequence(own)?;
    children.iter().find(|c| *c == own)?;
    Some(line(children, kind.blocked_by).into_iter().rfind(|e| e.sequence < own_sequence).map(|e| e.name))
}

/// The nodes among `children` nothing blocks, in sequence order: the holders (or the leader).
pub(crate) fn holders<'a>(children: &'a [String], kinds: &[&Kind]) -> Vec<&'a str> {
    let prefixes: Vec<&'static str> = kinds.iter().map(|k| k.prefix).collect();
    line(children, &prefixes)
        .into_iter()
        .filter(|e| {
            kinds.iter().find(|k| k.prefix == e.prefix).is_some_and(|k| predecessor(children, e.name, k) == Some(None))
        })
        .map(|e| e.name)
        .collect()
}

#[derive(Debug, Default)]
struct State {
    /// The name of this contender's node, once created.
    node: Option<String>,
    /// Whether the node was first in line when last looked at.
    held: bool,
    /// A call is under way on this contender.
    busy: bool,
}

/// Clears `busy` when the call ends (also when its future is dropped).
pub(crate) struct Busy<'a>(&'a Mutex<State>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        lock_state(self.0).busy = false;
    }
}

fn lock_state(m: &Mutex<State>) -> MutexGuard<'_, State> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// One participant of a waiting line in `dir`.
#[derive(Debug)]
pub(crate) struct Contender {
    client: Client,
    dir: String,
    kind: &'static Kind,
    state: Mutex<State>,
    wakeups: AtomicU64,
}

impl Contender {
    pub fn new(client: &Client, dir: &str, kind: &'static Kind) -> Contender {
        Contender {
            client: client.clone(),
            dir: dir.to_string(),
            kind,
            state: Mutex::new(State::default()),
            wakeups: AtomicU64::new(0),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Marks a call under way; Busy if another one is.
    pub fn begin(&self) -> RecipeResult<Busy<'_>> {
        let mut s = lock_state(&self.state);
        if s.busy {
            return Err(RecipeError::Busy);
        }
        s.busy = true;
        Ok(Busy(&self.state))
    }

    pub fn is_held(&self) -> bool {
        lock_state(&self.state).held
    }

    /// The path of this contender's node, if it has one.
    pub fn node_path(&self) -> Option<String> {
        lock_state(&self.state).node.as_ref().map(|n| child_path(&self.dir, n))
    }

    /// Watch events this contender has woken up on while waiting.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    fn forget(&self) {
        let mut s = lock_state(&self.state);
        s.node = None;
        s.held = false;
    }

    /// Creates this contender's node (GUID rule) unless it has one; returns its name and
    /// whether it was created now.
    pub async fn enqueue(&self, data: Bytes) -> RecipeResult<(String, bool)> {
        if let Some(n) = lock_state(&self.state).node.clone() {
            return Ok((n, false));
        }
        let guid = new_guid(&self.client);
        let name =
            create_protected(&self.client, &self.dir, &guid, self.kind.prefix, data, CreateMode::EphemeralSequential)
                .await?;
        lock_state(&self.state).node = Some(name.clone());
        Ok((name, true))
    }

    /// Where the node stands now: `None` if first in line, else its predecessor.
    async fn look(&self, own: &str) -> RecipeResult<Option<String>> {
        let children = retried(|| self.client.get_children(&self.dir)).await?;
        match predecessor(&children, own, self.kind) {
            Some(p) => Ok(p.map(str::to_string)),
            None => Err(RecipeError::NodeLost(child_path(&self.dir, own))),
        }
    }

    /// Whether the node is first in line now (one look, no watch).
    pub async fn check(&self) -> RecipeResult<bool> {
        let own = lock_state(&self.state).node.clone().ok_or(RecipeError::NotHeld)?;
        let first = self.settle(self.look(&own).await)?.is_none();
        lock_state(&self.state).held = first;
        Ok(first)
    }

    /// Waits until the node is first in line, watching only its predecessor.
    pub async fn wait_first(&self) -> RecipeResult<()> {
        let own = lock_state(&self.state).node.clone().ok_or(RecipeError::NotHeld)?;
        self.settle(self.wait_loop(&own).await)?;
        lock_state(&self.state).held = true;
        Ok(())
    }

    /// Forgets the node when `r` says it is gone (NodeLost, or the session ended); other
    /// errors (ConnectionLoss after the retries) leave it in place.
    fn settle<T>(&self, r: RecipeResult<T>) -> RecipeResult<T> {
        if let Err(
            RecipeError::NodeLost(_) | RecipeError::Keeper(KeeperError::SessionExpired | KeeperError::AuthFailed),
        ) = &r
        {
            self.forget();
        }
        r
    }

    async fn wait_loop(&self, own: &str) -> RecipeResult<()> {
        loop {
            let Some(pred) = self.look(own).await? else { return Ok(()) };
            let path = child_path(&self.dir, &pred);
            if let (Some(_), watch) = retried(|| self.client.exists_w(&path)).await? {
                let event = watch.await;
                self.wakeups.fetch_add(1, Ordering::Relaxed);
                node_event(event)?;
            }
        }
    }

    /// Deletes this contender's node (held or waiting); NotHeld if it has none.
    pub async fn withdraw(&self) -> RecipeResult<()> {
        let own = lock_state(&self.state).node.clone().ok_or(RecipeError::NotHeld)?;
        let r = delete_if_present(&self.client, &child_path(&self.dir, &own)).await;
        if !matches!(r, Err(RecipeError::Keeper(KeeperError::ConnectionLoss))) {
            self.forget();
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXCLUSIVE: Kind = Kind { prefix: "lock-", blocked_by: &["lock-"] };
    const READ: Kind = Kind { prefix: "read-", blocked_by: &["write-"] };
    const WRITE: Kind = Kind { prefix: "write-", blocked_by: &["read-", "write-"] };

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_line_is_in_sequence_order_not_name_order_and_ignores_foreign_children() {
        let c = names(&["b-lock-0000000003", "z-lock-0000000001", "a-lock-0000000002", "readme", "x-other-0000000000"]);
        let l: Vec<&str> = line(&c, &["lock-"]).into_iter().map(|e| e.name).collect();
        assert_eq!(l, vec!["z-lock-0000000001", "a-lock-0000000002", "b-lock-0000000003"]);
    }

    #[test]
    fn each_contender_watches_only_its_predecessor() {
        let c = names(&["g1-lock-0000000001", "g2-lock-0000000004", "g3-lock-0000000007"]);
        assert_eq!(predecessor(&c, "g1-lock-0000000001", &EXCLUSIVE), Some(None));
        assert_eq!(predecessor(&c, "g2-lock-0000000004", &EXCLUSIVE), Some(Some("g1-lock-0000000001")));
        assert_eq!(predecessor(&c, "g3-lock-0000000007", &EXCLUSIVE), Some(Some("g2-lock-0000000004")));
        assert_eq!(predecessor(&c, "g9-lock-0000000002", &EXCLUSIVE), None, "own node gone");
    }

    #[test]
    fn readers_wait_only_for_lower_writers_and_writers_for_anything_lower() {
        let c = names(&[
            "a-read-0000000001",
            "b-read-0000000002",
            "c-write-0000000003",
            "d-read-0000000004",
            "e-read-0000000005",
            "f-write-0000000006",
        ]);
        assert_eq!(predecessor(&c, "b-read-0000000002", &READ), Some(None));
        assert_eq!(predecessor(&c, "c-write-0000000003", &WRITE), Some(Some("b-read-0000000002")));
        // Both later readers watch the same writer: they are all released together (seed 001:
        // not a herd, they all get the lock).
        assert_eq!(predecessor(&c, "d-read-0000000004", &READ), Some(Some("c-write-0000000003")));
        assert_eq!(predecessor(&c, "e-read-0000000005", &READ), Some(Some("c-write-0000000003")));
        assert_eq!(predecessor(&c, "f-write-0000000006", &WRITE), Some(Some("e-read-0000000005")));
        assert_eq!(holders(&c, &[&READ, &WRITE]), vec!["a-read-0000000001", "b-read-0000000002"]);
        let w = names(&["c-write-0000000003", "d-read-0000000004"]);
        assert_eq!(holders(&w, &[&READ, &WRITE]), vec!["c-write-0000000003"]);
        assert_eq!(holders(&[], &[&EXCLUSIVE]), Vec::<&str>::new());
    }
}
