//! Barrier and double barrier.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ringkeeper::client::recipes::barrier::Barrier;
use ringkeeper::client::recipes::double_barrier::{DoubleBarrier, READY_NODE};
use ringkeeper::client::recipes::RecipeError;

use crate::harness::{client, with_server};

#[test]
fn barrier_holds_waiters_until_removed() {
    with_server(|hp, _| async move {
        let c = client(&hp).await;
        let barrier = Barrier::new(&c, "/b/one/gate");
        barrier.wait().await.expect("no barrier: passes at once");
        barrier.set().await.expect("set");
        barrier.set().await.expect("set twice");
        assert!(barrier.is_set().await.expect("is_set"));
        let passed = Arc::new(AtomicUsize::new(0));
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let (hp, passed) = (hp.clone(), passed.clone());
            waiters.push(tokio::spawn(async move {
                let c = client(&hp).await;
                Barrier::new(&c, "/b/one/gate").wait().await.expect("wait");
                passed.fetch_add(1, Ordering::SeqCst);
            }));
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(passed.load(Ordering::SeqCst), 0, "a waiter passed a barrier that is up");
        barrier.remove().await.expect("remove");
        for w in waiters {
            w.await.expect("waiter");
        }
        assert_eq!(passed.load(Ordering::SeqCst), 3);
        barrier.remove().await.expect("remove twice");
    });
}

#[test]
fn double_barrier_enters_when_all_arrived_and_leaves_when_all_left() {
    with_server(|hp, _| async move {
        const N: usize = 4;
        let path = "/b/double/round-1";
        let entered = Arc::new(AtomicUsize::new(0));
        let left = Arc::new(AtomicUsize::new(0));
        let mut participants = Vec::new();
        let mut clients = Vec::new();
        for i in 0..N {
            let c = client(&hp).await;
            participants.push(Arc::new(DoubleBarrier::new(&c, path, &format!("p{i}"), N).await.expect("barrier")));
            clients.push(c);
        }
        assert!(matches!(DoubleBarrier::new(&clients[0], path, READY_NODE, N).await, Err(RecipeError::BadArgument(_))));
        let enter = |p: Arc<DoubleBarrier>, entered: Arc<AtomicUsize>| {
            tokio::spawn(async move {
                p.enter().await.expect("enter");
                entered.fetch_add(1, Ordering::SeqCst);
            })
        };
        let mut entering: Vec<_> = participants[..N - 1].iter().map(|p| enter(p.clone(), entered.clone())).collect();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(entered.load(Ordering::SeqCst), 0, "entered before all {N} arrived");
        assert_eq!(clients[0].get_children(path).await.expect("ls").len(), N - 1);
        entering.push(enter(participants[N - 1].clone(), entered.clone()));
        for e in entering {
            e.await.expect("enter");
        }
        assert_eq!(entered.load(Ordering::SeqCst), N);
        assert!(clients[0].exists(&format!("{path}/{READY_NODE}")).await.expect("exists").is_some());
        // Leaving: nobody is through until the last one has left; p0 (the lowest) leaves
        // first and waits longest.
        let mut leaving = Vec::new();
        for p in &participants[..N - 1] {
            let (p, left) = (p.clone(), left.clone());
            leaving.push(tokio::spawn(async move {
                p.leave().await.expect("leave");
                left.fetch_add(1, Ordering::SeqCst);
            }));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(left.load(Ordering::SeqCst), 0, "left before everyone did");
        participants[N - 1].leave().await.expect("last leave");
        for l in leaving {
            l.await.expect("leave");
        }
        assert_eq!(left.load(Ordering::SeqCst), N - 1);
        assert!(clients[0].get_children(path).await.expect("ls").is_empty(), "process nodes and ready are gone");
    });
}

#[test]
fn a_participant_that_dies_inside_does_not_hold_the_others_at_leave() {
    with_server(|hp, _| async move {
        let path = "/b/double/dies";
        let (c1, c2) = (client(&hp).await, client(&hp).await);
        let a = Arc::new(DoubleBarrier::new(&c1, path, "a", 2).await.expect("a"));
        let b = DoubleBarrier::new(&c2, path, "b", 2).await.expect("b");
        let a2 = a.clone();
        let ea = tokio::spawn(async move { a2.enter().await });
        b.enter().await.expect("b enters");
        ea.await.expect("task").expect("a enters");
        // b's process fails: its session ends and its node goes; a still leaves.
        c2.close().await.expect("close");
        a.leave().await.expect("a leaves alone");
        assert!(c1.get_children(path).await.expect("ls").is_empty());
    });
}
