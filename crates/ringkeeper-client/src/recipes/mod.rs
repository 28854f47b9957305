//! The recipes of seed 001, built on `Client`'s async calls only: name service,
//! configuration (watch-and-reload), group membership, barrier, double barrier, queue,
//! priority queue, lock, shared read/write lock, revocable shared lock, two-phase commit and
//! leader election; one module each. This module holds what they share: the error type, the
//! GUID, paths, and the creates that survive a lost reply.
//!
//! Rules (seed 001, for every recipe):
//! - runtime-agnostic: only `Client`'s futures and `OneShotWatch`es, no timer, no runtime; the
//!   same recipe runs on tokio and on glommio;
//! - no polling and no herd effect: a waiter sets one watch, on its predecessor (the node whose
//!   removal may let it proceed), and sleeps on it;
//! - every sequential node a recipe makes is named `<guid>-<prefix><sequence>` (the GUID
//!   rule): after a recoverable error on the create (ConnectionLoss) the parent is listed and
//!   a child carrying the GUID is the node made earlier — it is never created twice
//!   (`retry::create_protected`); an ephemeral with a fixed name is recovered by its owner
//!   (`create_owned_ephemeral`);
//! - order is the server's sequence number (the last `SEQUENCE_DIGITS` of a name), never the
//!   name: GUID prefixes differ;
//! - a watch resolved by a session event (Expired, Closed, AuthFailed) ends the wait with
//!   that session's error; recoverable errors are retried `RECIPE_RETRY.tries_max` times at
//!   most. Retries need no timer: a request made while the session is disconnected waits for
//!   the next connection, so the session's reconnect schedule paces them.

pub mod barrier;
pub mod configuration;
pub mod double_barrier;
pub mod group;
pub mod leader_election;
pub mod lock;
pub mod name_service;
pub mod priority_queue;
pub mod queue;
pub mod revocable_lock;
pub mod rw_lock;
mod sequential;
pub mod two_phase_commit;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::client::{Client, OneShotWatch};
use super::retry::{self, is_recoverable, RetryPolicy};
use super::types::{CreateMode, EventType, KeeperError, KeeperState, WatchedEvent, ANY_VERSION};
use super::OPEN_ACL_UNSAFE;

pub use lock::Lock;

/// How often a recipe retries a call that failed with a recoverable error. The delays are
/// not slept (see the module rules: the session paces the retries).
pub const RECIPE_RETRY: RetryPolicy =
    RetryPolicy { tries_max: 5, delay_initial: Duration::from_millis(0), delay_max: Duration::from_millis(0) };

/// Digits of the sequence suffix ZooKeeper appends (`%010d`).
pub const SEQUENCE_DIGITS: usize = 10;

/// Why a recipe call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipeError {
    /// A ZooKeeper call failed (SessionExpired once the session is gone; ConnectionLoss when
    /// `RECIPE_RETRY` was spent).
    Keeper(KeeperError),
    /// The handle already holds the lock (or leads the election); release it first.
    AlreadyHeld,
    /// Another call on the same handle is under way (a handle serves one task at a time).
    Busy,
    /// Release or resign on a handle that has no node.
    NotHeld,
    /// The recipe's own node (this path) is gone: deleted by someone else, or its session
    /// ended.
    NodeLost(String),
    /// An argument the recipe cannot use (a name with '/', a reserved name, a priority out of
    /// range, ...).
    BadArgument(String),
    /// A node holds data the recipe never writes (this path).
    Malformed(String),
    /// Two-phase commit: this site has voted already.
    AlreadyVoted(String),
}

impl std::fmt::Display for RecipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecipeError::Keeper(e) => write!(f, "{e}"),
            RecipeError::AlreadyHeld => write!(f, "already held"),
            RecipeError::Busy => write!(f, "another call on this handle is under way"),
            RecipeError::NotHeld => write!(f, "not held"),
            RecipeError::NodeLost(p) => write!(f, "the recipe's node {p} is gone"),
            RecipeError::BadArgument(why) => write!(f, "bad argument: {why}"),
            RecipeError::Malformed(p) => write!(f, "{p} holds data this recipe never writes"),
            RecipeError::AlreadyVoted(p) => write!(f, "{p} has voted already"),
        }
    }
}

impl std::error::Error for RecipeError {}

impl From<KeeperError> for RecipeError {
    fn from(e: KeeperError) -> RecipeError {
        RecipeError::Keeper(e)
    }
}

/// The result of a recipe call.
pub type RecipeResult<T> = std::result::Result<T, RecipeError>;

static GUIDS_MADE: AtomicU64 = AtomicU64::new(0);

/// A GUID for one create: 32 hex digits, the session id then a hash of the process, the time
/// and a counter under a key drawn from the OS (std's `RandomState`). Unique to the call: no
/// two GUIDs of one session are equal, and sessions have distinct ids.
pub fn new_guid(client: &Client) -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(GUIDS_MADE.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos());
    format!("{:016x}{:016x}", client.session_id() as u64, h.finish())
}

/// `parent/name`, for a parent that may be the root.
pub fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Checks a name a recipe makes a child of: not empty, no '/', not "." or "..", not one of
/// the recipe's `reserved` names.
pub(crate) fn check_name(name: &str, reserved: &[&str]) -> RecipeResult<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || reserved.contains(&name) {
        return Err(RecipeError::BadArgument(format!("{name:?} cannot name a child here")));
    }
    Ok(())
}

/// Runs an idempotent call, retried after recoverable errors (`RECIPE_RETRY`).
pub(crate) async fn retried<T, F, Fut>(op: F) -> RecipeResult<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = super::types::Result<T>>,
{
    Ok(retry::retry_idempotent(&RECIPE_RETRY, |_| std::future::ready(()), op).await?)
}

/// Creates `path` and its missing ancestors as empty persistent nodes (NodeExists is fine).
pub async fn ensure_path(client: &Client, path: &str) -> RecipeResult<()> {
    if retried(|| client.exists(path)).await?.is_some() {
        return Ok(());
    }
    let mut at = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        create_if_absent(client, &at).await?;
    }
    Ok(())
}

/// Creates `path` as an empty persistent node; one already there is fine.
pub(crate) async fn create_if_absent(client: &Client, path: &str) -> RecipeResult<()> {
    match retried(|| client.create(path, Bytes::new(), &OPEN_ACL_UNSAFE, CreateMode::Persistent)).await {
        Ok(_) | Err(RecipeError::Keeper(KeeperError::NodeExists)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes `path` whatever its version; a node already gone is fine.
pub(crate) async fn delete_if_present(client: &Client, path: &str) -> RecipeResult<()> {
    match retried(|| client.delete(path, ANY_VERSION)).await {
        Ok(()) | Err(RecipeError::Keeper(KeeperError::NoNode)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The children of `path`, sorted by name.
pub(crate) async fn sorted_children(client: &Client, path: &str) -> RecipeResult<Vec<String>> {
    let mut children = retried(|| client.get_children(path)).await?;
    children.sort();
    Ok(children)
}

/// Creates `parent/<guid>-<name><sequence>` with `mode` under the GUID rule: a lost reply is
/// recovered by listing `parent`, never by a second create. Returns the node's name (not its
/// path).
pub(crate) async fn create_protected(
    client: &Client,
    parent: &str,
    guid: &str,
    name: &str,
    data: Bytes,
    mode: CreateMode,
) -> RecipeResult<String> {
    let path = retry::create_protected(
        client,
        &RECIPE_RETRY,
        |_| std::future::ready(()),
        parent,
        guid,
        name,
        data,
        &OPEN_ACL_UNSAFE,
        mode,
    )
    .await?;
    Ok(path.rsplit('/').next().unwrap_or(&path).to_string())
}

/// Creates an ephemeral node with a fixed name, recovering a lost reply by ownership: a node
/// at `path` owned by this session is the one made earlier (by a create whose reply was lost,
/// or by an earlier call); NodeExists when another session owns it.
pub(crate) async fn create_owned_ephemeral(client: &Client, path: &str, data: Bytes) -> RecipeResult<()> {
    let mut attempt = 0;
    loop {
        match client.create(path, data.clone(), &OPEN_ACL_UNSAFE, CreateMode::Ephemeral).await {
            Ok(_) => return Ok(()),
            Err(KeeperError::NodeExists) => {
                return match retried(|| client.exists(path)).await? {
                    Some(stat) if stat.ephemeral_owner == client.session_id() => Ok(()),
                    _ => Err(KeeperError::NodeExists.into()),
                };
            }
            Err(e) if is_recoverable(e) && attempt + 1 < RECIPE_RETRY.tries_max => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The error a watch resolved by a session event stands for; `Ok` for a node event.
pub(crate) fn node_event(event: WatchedEvent) -> RecipeResult<WatchedEvent> {
    if event.event_type != EventType::None {
        return Ok(event);
    }
    Err(RecipeError::Keeper(match event.keeper_state {
        KeeperState::AuthFailed => KeeperError::AuthFailed,
        KeeperState::Expired | KeeperState::Closed => KeeperError::SessionExpired,
        // A one-shot watch is not resolved by Disconnected (it is set again on reconnect);
        // any other state here is the session's end as well.
        _ => KeeperError::ConnectionLoss,
    }))
}

/// Waits for the first of `watches` to fire: its index and event (a session event when the
/// session ended). Pending forever for an empty list.
pub(crate) async fn first_event(watches: &mut [OneShotWatch]) -> (usize, WatchedEvent) {
    std::future::poll_fn(|cx| {
        for (i, w) in watches.iter_mut().enumerate() {
            if let Poll::Ready(e) = std::pin::Pin::new(w).poll(cx) {
                return Poll::Ready((i, e));
            }
        }
        Poll::Pending
    })
    .await
}

/// Splits a sequential node's name into its stem (`<guid>-<prefix>`) and sequence number;
/// `None` for a name without the `SEQUENCE_DIGITS` digits at its end.
pub fn split_sequence(name: &str) -> Option<(&str, u32)> {
    let at = name.len().checked_sub(SEQUENCE_DIGITS)?;
    let (stem, digits) = (name.get(..at)?, name.get(at..)?);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem, digits.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_suffixes_split_and_names_are_checked() {
        assert_eq!(split_sequence("abc-lock-0000000042"), Some(("abc-lock-", 42)));
        assert_eq!(split_sequence("0000000007"), Some(("", 7)));
        assert_eq!(split_sequence("lock-00000x0042"), None);
        assert_eq!(split_sequence("short"), None);
        assert_eq!(split_sequence("x-é000000001"), None, "not on a char boundary");
        assert!(check_name("site-1", &["ready"]).is_ok());
        for bad in ["", "a/b", ".", "..", "ready"] {
            assert!(matches!(check_name(bad, &["ready"]), Err(RecipeError::BadArgument(_))), "{bad:?}");
        }
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/x", "a"), "/x/a");
    }

    #[test]
    fn session_events_end_a_wait_with_the_session_error() {
        let node = WatchedEvent {
            event_type: EventType::NodeDeleted,
            keeper_state: KeeperState::SyncConnected,
            path: Some("/a".into()),
        };
        assert_eq!(node_event(node.clone()), Ok(node));
        assert_eq!(
            node_event(WatchedEvent::session(KeeperState::Expired)),
            Err(RecipeError::Keeper(KeeperError::SessionExpired))
        );
        assert_eq!(
            node_event(WatchedEvent::session(KeeperState::AuthFailed)),
            Err(RecipeError::Keeper(KeeperError::AuthFailed))
        );
    }
}
