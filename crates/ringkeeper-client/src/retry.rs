//! Retrying after recoverable errors (ConnectionLoss, OperationTimeout), and seed 001's GUID
//! rule for creates whose reply may have been lost.
//! Rules: only idempotent operations are retried blindly (`retry_idempotent`: reads,
//! setData/delete with an explicit version, sync, ...); a create is never re-sent without
//! first looking for the node it may already have made: `create_protected` names the node
//! `<guid>-<name>` and, after a recoverable error, lists the parent and takes the child
//! carrying its GUID (the recipes' recovery rule). Runtime-agnostic: the caller passes the
//! sleep; delays are deterministic (no jitter).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use super::client::Client;
use super::types::{Acl, CreateMode, KeeperError, Result};

/// How often and how patiently to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first one included); at least 1.
    pub tries_max: u32,
    /// Delay after the first failure; doubled after each further one.
    pub delay_initial: Duration,
    /// The longest delay between two attempts.
    pub delay_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy { tries_max: 10, delay_initial: Duration::from_millis(50), delay_max: Duration::from_secs(1) }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_initial.saturating_mul(1u32 << attempt.min(20)).min(self.delay_max)
    }
}

/// Errors after which the operation may or may not have happened, and a retry may succeed.
pub fn is_recoverable(e: KeeperError) -> bool {
    matches!(e, KeeperError::ConnectionLoss | KeeperError::OperationTimeout)
}

/// Runs `op` until it succeeds, fails with an unrecoverable error, or `policy.tries_max`
/// attempts are spent (the last error is returned). Only for idempotent operations: a create
/// retried this way may find NodeExists from its own first attempt, and a sequential create
/// would make a second node — use `create_protected`.
pub async fn retry_idempotent<T, F, Fut, S, SFut>(policy: &RetryPolicy, mut sleep: S, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
    S: FnMut(Duration) -> SFut,
    SFut: Future,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(e) if is_recoverable(e) && attempt + 1 < policy.tries_max.max(1) => {
                sleep(policy.delay(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The node name the GUID rule gives `name` (e.g. `"lock-"` → `"<guid>-lock-"`).
pub fn protected_name(guid: &str, name: &str) -> String {
    format!("{guid}-{name}")
}

/// The child of a parent's listing made by the create that used `guid`, if any.
pub fn find_protected<'a>(children: &'a [String], guid: &str) -> Option<&'a str> {
    let prefix = format!("{guid}-");
    children.iter().map(String::as_str).find(|c| c.starts_with(&prefix))
}

fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The GUID rule over any create and listing (see `create_protected`): `create(path)` makes
/// `parent/<guid>-<name>` (sequential or not); after a recoverable error the parent is listed
/// (retried as an idempotent read) and a child with the GUID is the node made earlier.
pub async fn create_with_guid<C, CFut, L, LFut, S, SFut>(
    policy: &RetryPolicy,
    parent: &str,
    guid: &str,
    name: &str,
    mut sleep: S,
    mut create: C,
    mut list: L,
) -> Result<String>
where
    C: FnMut(String) -> CFut,
    CFut: Future<Output = Result<String>>,
    L: FnMut() -> LFut,
    LFut: Future<Output = Result<Vec<String>>>,
    S: FnMut(Duration) -> SFut,
    SFut: Future,
{
    let path = child_path(parent, &protected_name(guid, name));
    let mut attempt = 0;
    loop {
        match create(path.clone()).await {
            Err(e) if is_recoverable(e) => {
                if attempt + 1 >= policy.tries_max.max(1) {
                    return Err(e);
                }
                sleep(policy.delay(attempt)).await;
                attempt += 1;
                let children = retry_idempotent(policy, &mut sleep, &mut list).await?;
                if let Some(found) = find_protected(&children, guid) {
                    return Ok(child_path(parent, found));
                }
            }
            other => return other,
        }
    }
}

/// Creates `parent/<guid>-<name>` with `mode` (typically EphemeralSequential), surviving a
/// lost reply without making a second node: the recovery rule of seed 001. `guid` must be
/// unique to this call (e.g. a UUID) and contain no '/'.
#[allow(clippy::too_many_arguments)]
pub async fn create_protected<S, SFut>(
    client: &Client,
    policy: &RetryPolicy,
    sleep: S,
    parent: &str,
    guid: &str,
    name: &str,
    data: impl Into<Bytes>,
    acl: &[Acl],
    mode: CreateMode,
) -> Result<String>
where
    S: FnMut(Duration) -> SFut,
    SFut: Future,
{
    let data = data.into();
    create_with_guid(
        policy,
        parent,
        guid,
        name,
        sleep,
        |path| {
            let data = data.clone();
            async move { client.create(&path, data, acl, mode).await }
        },
        || client.get_children(parent),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use std::cell::RefCell;

    fn policy(tries_max: u32) -> RetryPolicy {
        RetryPolicy { tries_max, delay_initial: Duration::from_millis(10), delay_max: Duration::from_millis(35) }
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let p = policy(5);
        let d: Vec<u128> = (0..5).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(d, vec![10, 20, 35, 35, 35]);
        assert_eq!(p.delay(u32::MAX), Duration::from_millis(35));
    }

    #[test]
    fn retries_only_recoverable_errors_and_gives_up_after_tries_max() {
        let slept = RefCell::new(Vec::new());
        let calls = RefCell::new(0);
        let sleep = |d: Duration| {
            slept.borrow_mut().push(d.as_millis());
            async {}
        };
        let r: Result<u32> = block_on(retry_idempotent(&policy(4), sleep, || {
            *calls.borrow_mut() += 1;
            let n = *calls.borrow();
            async move {
                if n < 3 {
                    Err(KeeperError::ConnectionLoss)
                } else {
                    Ok(n)
                }
            }
        }));
        assert_eq!(r, Ok(3));
        assert_eq!(*slept.borrow(), vec![10, 20]);
        // An unrecoverable error is returned at once.
        *calls.borrow_mut() = 0;
        let r: Result<()> = block_on(retry_idempotent(
            &policy(4),
            |_| async {},
            || {
                *calls.borrow_mut() += 1;
                async { Err(KeeperError::NoNode) }
            },
        ));
        assert_eq!((r, *calls.borrow()), (Err(KeeperError::NoNode), 1));
        // tries_max attempts, then the last error.
        *calls.borrow_mut() = 0;
        let r: Result<()> = block_on(retry_idempotent(
            &policy(3),
            |_| async {},
            || {
                *calls.borrow_mut() += 1;
                async { Err(KeeperError::OperationTimeout) }
            },
        ));
        assert_eq!((r, *calls.borrow()), (Err(KeeperError::OperationTimeout), 3));
    }

    #[test]
    fn a_create_whose_reply_was_lost_is_found_by_its_guid_not_made_twice() {
        // The server made the node, then the connection dropped before the reply.
        let tree = RefCell::new(vec!["other-lock-0000000001".to_string()]);
        let creates = RefCell::new(0);
        let r = block_on(create_with_guid(
            &policy(5),
            "/locks",
            "g-42",
            "lock-",
            |_| async {},
            |path: String| {
                *creates.borrow_mut() += 1;
                assert_eq!(path, "/locks/g-42-lock-");
                tree.borrow_mut().push("g-42-lock-0000000002".into());
                async { Err(KeeperError::ConnectionLoss) }
            },
            || {
                let children = tree.borrow().clone();
                async move { Ok(children) }
            },
        ));
        assert_eq!(r, Ok("/locks/g-42-lock-0000000002".to_string()));
        assert_eq!(*creates.borrow(), 1, "not created a second time");
        // The create never reached the server: it is sent again and succeeds.
        let creates = RefCell::new(0);
        let r = block_on(create_with_guid(
            &policy(5),
            "/",
            "g-7",
            "n",
            |_| async {},
            |path: String| {
                *creates.borrow_mut() += 1;
                let n = *creates.borrow();
                async move {
                    if n == 1 {
                        Err(KeeperError::ConnectionLoss)
                    } else {
                        Ok(format!("{path}0000000000"))
                    }
                }
            },
            || async { Ok(vec!["g-70-n0000000000".to_string()]) },
        ));
        assert_eq!(r, Ok("/g-7-n0000000000".to_string()), "g-70 is another GUID");
        assert_eq!(*creates.borrow(), 2);
        assert_eq!(find_protected(&["a-x".into(), "g-1-x".into()], "g-1"), Some("g-1-x"));
        assert_eq!(find_protected(&["g-10-x".into()], "g-1"), None);
    }
}
