//! Exclusive lock, shared read/write lock, revocable shared lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringkeeper::client::recipes::lock::Lock;
use ringkeeper::client::recipes::revocable_lock::{request_revocation, RevocableReadWriteLock, REVOKE_REQUEST};
use ringkeeper::client::recipes::rw_lock::{holders_of, ReadWriteLock};
use ringkeeper::client::recipes::RecipeError;
use ringkeeper::client::{KeeperError, SessionState, WatcherType};

use crate::harness::{client, client_with, until, with_server, Proxy, SHORT_SESSION};

#[test]
fn lock_excludes_and_every_task_gets_it_in_turn() {
    with_server(|hp, _| async move {
        let inside = Arc::new(AtomicBool::new(false));
        let entries = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (hp, inside, entries) = (hp.clone(), inside.clone(), entries.clone());
            tasks.push(tokio::spawn(async move {
                let c = client(&hp).await;
                let lock = Lock::new(&c, "/app/locks/excl").await.expect("lock");
                for _ in 0..3 {
                    lock.acquire().await.expect("acquire");
                    assert!(lock.is_held());
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    entries.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    lock.release().await.expect("release");
                    assert!(!lock.is_held() && lock.node().is_none());
                }
                c.close().await.expect("close");
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(entries.load(Ordering::SeqCst), 12);
        let c = client(&hp).await;
        assert!(c.get_children("/app/locks/excl").await.expect("ls").is_empty(), "no node left behind");
        // try_acquire: taken when free, refused (without a node left) when held.
        let a = Lock::new(&c, "/app/locks/excl").await.expect("lock");
        let b = Lock::new(&c, "/app/locks/excl").await.expect("lock");
        assert!(a.try_acquire().await.expect("try a"));
        assert_eq!(a.acquire().await, Err(RecipeError::AlreadyHeld));
        assert!(!b.try_acquire().await.expect("try b"));
        assert_eq!(c.get_children("/app/locks/excl").await.expect("ls").len(), 1);
        assert_eq!(b.release().await, Err(RecipeError::NotHeld));
        a.release().await.expect("release a");
        assert!(b.try_acquire().await.expect("try b again"));
    });
}

#[test]
fn a_release_wakes_exactly_one_waiter() {
    with_server(|hp, _| async move {
        const WAITERS: usize = 5;
        let dir = "/herd";
        let holder_client = client(&hp).await;
        let holder = Lock::new(&holder_client, dir).await.expect("lock");
        holder.acquire().await.expect("holder");
        let mut waiters = Vec::new();
        let mut clients = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..WAITERS {
            let c = client(&hp).await;
            let lock = Arc::new(Lock::new(&c, dir).await.expect("lock"));
            let l = lock.clone();
            tasks.push(tokio::spawn(async move { l.acquire().await }));
            // Each waiter queues behind the previous one (its node is made before the next).
            until("the waiter's node", || async { lock.node().is_some() }).await;
            let pred = if i == 0 { holder.node() } else { waiters.last().and_then(|w: &Arc<Lock>| w.node()) };
            let pred = pred.expect("predecessor node");
            // ... and watches exactly its predecessor: the server holds that watch for it.
            until("the waiter's watch on its predecessor", || async {
                c.check_watches(&pred, WatcherType::Data).await.is_ok()
            })
            .await;
            waiters.push(lock);
            clients.push(c);
        }
        let total_wakeups = |w: &[Arc<Lock>]| w.iter().map(|l| l.wakeups()).sum::<u64>();
        assert_eq!(total_wakeups(&waiters), 0);
        for round in 0..WAITERS {
            if round == 0 {
                holder.release().await.expect("release holder");
            } else {
                waiters[round - 1].release().await.expect("release");
            }
            let next = tasks.remove(0);
            next.await.expect("task").expect("acquire");
            assert!(waiters[round].is_held());
            // Give any other waiter time to wake up, then count: one wake-up per release.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(total_wakeups(&waiters), round as u64 + 1, "wake-ups after release {round}");
            assert_eq!(waiters[round].wakeups(), 1);
            for (j, w) in waiters.iter().enumerate().skip(round + 1) {
                assert!(!w.is_held(), "waiter {j} holds too");
                // Its watch was not fired: the server still holds it.
                let pred = waiters[j - 1].node().expect("pred");
                assert_eq!(clients[j].check_watches(&pred, WatcherType::Data).await, Ok(()), "waiter {j}'s watch");
            }
        }
        waiters[WAITERS - 1].release().await.expect("last release");
    });
}

#[test]
fn the_holders_session_expires_and_the_next_waiter_gets_the_lock() {
    with_server(|hp, port| async move {
        let proxy = Proxy::start(port);
        let session = SHORT_SESSION;
        let holder_client = client_with(&proxy.hostport(), session).await;
        let holder = Lock::new(&holder_client, "/expiry").await.expect("lock");
        holder.acquire().await.expect("holder");
        let c = client(&hp).await;
        let waiter = Arc::new(Lock::new(&c, "/expiry").await.expect("lock"));
        let w = waiter.clone();
        let task = tokio::spawn(async move { w.acquire().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!task.is_finished(), "the waiter got the lock while it was held");
        // The holder is cut off from the server: no pings, so the server expires its session
        // and deletes its lock node.
        let cut = Instant::now();
        proxy.cut_off(true);
        task.await.expect("task").expect("the waiter's acquire");
        let waited = cut.elapsed();
        assert!(waiter.is_held());
        assert!(waited >= session / 2, "acquired {waited:?} after the cut: before the session could expire");
        assert_eq!(c.get_children("/expiry").await.expect("ls").len(), 1);
        // Back in touch, the old holder learns its session expired; its release says so.
        proxy.cut_off(false);
        until("the holder's session to be Expired", || async { holder_client.state() == SessionState::Expired }).await;
        assert_eq!(holder.release().await, Err(RecipeError::Keeper(KeeperError::SessionExpired)));
        waiter.release().await.expect("release");
    });
}

#[test]
fn a_lost_create_reply_is_found_by_its_guid_and_not_made_twice() {
    with_server(|_, port| async move {
        let proxy = Proxy::start(port);
        let c = client(&proxy.hostport()).await;
        let session = c.session_id();
        let lock = Lock::new(&c, "/lost").await.expect("lock");
        let creates_before = proxy.creates();
        proxy.lose_next_create_reply();
        lock.acquire().await.expect("acquire after a lost create reply");
        assert_eq!(proxy.replies_lost(), 1, "the create's reply was dropped by the proxy");
        assert_eq!(proxy.creates() - creates_before, 1, "the create was not sent again");
        assert_eq!(c.session_id(), session, "same session, resumed on a new connection");
        let children = c.get_children("/lost").await.expect("ls");
        assert_eq!(children.len(), 1, "one node: {children:?}");
        let node = lock.node().expect("node");
        assert_eq!(node, format!("/lost/{}", children[0]));
        let stat = c.exists(&node).await.expect("exists").expect("the node");
        assert_eq!(stat.ephemeral_owner, session);
        lock.release().await.expect("release");
        assert!(c.get_children("/lost").await.expect("ls").is_empty());
    });
}

#[test]
fn readers_share_and_a_writer_excludes_in_arrival_order() {
    with_server(|hp, _| async move {
        let dir = "/rw";
        let (c1, c2, c3, c4) = (client(&hp).await, client(&hp).await, client(&hp).await, client(&hp).await);
        let r1 = ReadWriteLock::new(&c1, dir).await.expect("rw");
        let r2 = ReadWriteLock::new(&c2, dir).await.expect("rw");
        let w = Arc::new(ReadWriteLock::new(&c3, dir).await.expect("rw"));
        let r3 = Arc::new(ReadWriteLock::new(&c4, dir).await.expect("rw"));
        r1.read().acquire().await.expect("r1");
        r2.read().acquire().await.expect("r2: readers share");
        assert_eq!(holders_of(&c1, dir).await.expect("holders").len(), 2);
        let wl = w.clone();
        let writer = tokio::spawn(async move { wl.write().acquire().await });
        until("the writer's node", || async { w.write().node().is_some() }).await;
        // A reader after the waiting writer queues behind it.
        let rl = r3.clone();
        let late_reader = tokio::spawn(async move { rl.read().acquire().await });
        until("the late reader's node", || async { r3.read().node().is_some() }).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished() && !late_reader.is_finished());
        r1.read().release().await.expect("r1 release");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished(), "the writer got in while r2 reads");
        r2.read().release().await.expect("r2 release");
        writer.await.expect("task").expect("writer");
        assert_eq!(holders_of(&c1, dir).await.expect("holders"), vec![w.write().node().expect("node")]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!late_reader.is_finished(), "a reader got in while the writer writes");
        w.write().release().await.expect("writer release");
        late_reader.await.expect("task").expect("late reader");
        // Two writers exclude each other.
        let w2 = ReadWriteLock::new(&c2, dir).await.expect("rw");
        assert!(!w2.write().try_acquire().await.expect("try while a reader holds"));
        r3.read().release().await.expect("release");
        assert!(w2.write().try_acquire().await.expect("try when free"));
        assert!(!w.write().try_acquire().await.expect("second writer"));
        assert!(!r1.read().try_acquire().await.expect("reader while writing"));
    });
}

#[test]
fn a_revoked_reader_consents_and_the_writer_gets_the_lock() {
    with_server(|hp, _| async move {
        let dir = "/revocable";
        let (c1, c2) = (client(&hp).await, client(&hp).await);
        let reader = Arc::new(RevocableReadWriteLock::new(&c1, dir).await.expect("lock"));
        let writer = Arc::new(RevocableReadWriteLock::new(&c2, dir).await.expect("lock"));
        reader.read().acquire().await.expect("reader");
        let r = reader.clone();
        let consent = tokio::spawn(async move {
            r.read().revocation_requested().await?;
            r.read().release().await
        });
        let wl = writer.clone();
        let write = tokio::spawn(async move { wl.write().acquire().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!consent.is_finished() && !write.is_finished(), "nothing moves before the revocation");
        // The writer's side asks every holder to give the lock up.
        let holders = holders_of(&c2, dir).await.expect("holders");
        assert_eq!(holders, vec![reader.read().node().expect("reader node")]);
        for h in &holders {
            request_revocation(&c2, h).await.expect("revoke");
        }
        consent.await.expect("task").expect("the reader saw the request and released");
        write.await.expect("task").expect("writer");
        assert!(writer.write().is_held() && !reader.read().is_held());
        // A revocation asked while a participant still waits is seen once it holds.
        let r = reader.clone();
        let wait = tokio::spawn(async move {
            r.read().acquire().await?;
            r.read().revocation_requested().await
        });
        until("the reader's new node", || async { reader.read().node().is_some() }).await;
        let node = reader.read().node().expect("node");
        request_revocation(&c2, &node).await.expect("revoke the waiter");
        assert_eq!(c2.get_data(&node).await.expect("get").0.as_ref(), REVOKE_REQUEST);
        writer.write().release().await.expect("writer release");
        wait.await.expect("task").expect("held, then told to give it up");
        reader.read().release().await.expect("release");
        assert_eq!(request_revocation(&c2, &node).await, Err(RecipeError::Keeper(KeeperError::NoNode)));
    });
}
