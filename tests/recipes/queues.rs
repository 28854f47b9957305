//! FIFO queue and priority queue.

use std::collections::BTreeSet;
use std::time::Duration;

use ringkeeper::client::recipes::priority_queue::{PriorityQueue, PRIORITY_MAX};
use ringkeeper::client::recipes::queue::Queue;
use ringkeeper::client::recipes::RecipeError;

use crate::harness::{client, with_server, Proxy};

#[test]
fn queue_hands_out_elements_in_offer_order_each_once() {
    with_server(|hp, _| async move {
        let (pc, cc) = (client(&hp).await, client(&hp).await);
        let producer = Queue::new(&pc, "/q/fifo").await.expect("queue");
        let mut consumer = Queue::new(&cc, "/q/fifo").await.expect("queue");
        assert_eq!(consumer.poll().await.expect("poll"), None);
        for i in 0..20 {
            producer.offer(format!("e{i:02}")).await.expect("offer");
        }
        assert_eq!(producer.len().await.expect("len"), 20);
        for i in 0..10 {
            assert_eq!(consumer.take().await.expect("take").as_ref(), format!("e{i:02}").as_bytes());
        }
        // Two consumers drain the rest concurrently: every element once, each in order.
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let hp = hp.clone();
            tasks.push(tokio::spawn(async move {
                let c = client(&hp).await;
                let mut q = Queue::new(&c, "/q/fifo").await.expect("queue");
                let mut got = Vec::new();
                while let Some(d) = q.poll().await.expect("poll") {
                    got.push(String::from_utf8(d.to_vec()).expect("utf8"));
                }
                got
            }));
        }
        let mut all = BTreeSet::new();
        for t in tasks {
            let got = t.await.expect("task");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
            for g in got {
                assert!(all.insert(g), "an element taken twice");
            }
        }
        assert_eq!(all, (10..20).map(|i| format!("e{i:02}")).collect::<BTreeSet<_>>());
        // take waits on an empty queue until an element is offered.
        let waiting = tokio::spawn(async move { consumer.take().await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished());
        producer.offer("late").await.expect("offer");
        assert_eq!(waiting.await.expect("task").expect("take").as_ref(), b"late");
        // Ephemeral elements (seed 001's flags) go with their producer's session.
        let ec = client(&hp).await;
        let ephemeral = Queue::with_ephemeral_elements(&ec, "/q/ephemeral").await.expect("queue");
        ephemeral.offer("short-lived").await.expect("offer");
        let mut reader = Queue::new(&pc, "/q/ephemeral").await.expect("queue");
        assert_eq!(reader.len().await.expect("len"), 1);
        ec.close().await.expect("close");
        assert_eq!(reader.poll().await.expect("poll"), None);
    });
}

#[test]
fn an_offer_whose_reply_was_lost_enqueues_one_element() {
    with_server(|_, port| async move {
        let proxy = Proxy::start(port);
        let c = client(&proxy.hostport()).await;
        let mut q = Queue::new(&c, "/q/lost").await.expect("queue");
        proxy.lose_next_create_reply();
        let path = q.offer("once").await.expect("offer after a lost reply");
        assert_eq!((proxy.replies_lost(), q.len().await.expect("len")), (1, 1));
        assert!(c.exists(&path).await.expect("exists").is_some());
        assert_eq!(q.poll().await.expect("poll").as_deref(), Some(&b"once"[..]));
        assert_eq!(q.poll().await.expect("poll"), None);
    });
}

#[test]
fn priority_queue_hands_out_the_most_urgent_first_and_sees_newer_urgent_elements() {
    with_server(|hp, _| async move {
        let (pc, cc) = (client(&hp).await, client(&hp).await);
        let producer = PriorityQueue::new(&pc, "/q/prio").await.expect("queue");
        let mut consumer = PriorityQueue::new(&cc, "/q/prio").await.expect("queue");
        for (p, d) in [(5, "5a"), (1, "1a"), (9, "9a"), (1, "1b"), (0, "0a"), (5, "5b")] {
            producer.offer(p, d).await.expect("offer");
        }
        assert!(matches!(producer.offer(PRIORITY_MAX + 1, "x").await, Err(RecipeError::BadArgument(_))));
        let mut order = Vec::new();
        for _ in 0..3 {
            order.push(consumer.take().await.expect("take"));
        }
        // The consumer holds a listing with 5a, 5b, 9a left; a more urgent element arrives
        // and must come before them.
        producer.offer(2, "2a").await.expect("offer");
        while let Some(d) = consumer.poll().await.expect("poll") {
            order.push(d);
        }
        let order: Vec<&[u8]> = order.iter().map(|b| b.as_ref()).collect();
        assert_eq!(order, vec![&b"0a"[..], b"1a", b"1b", b"2a", b"5a", b"5b", b"9a"]);
        assert_eq!(consumer.len().await.expect("len"), 0);
    });
}
